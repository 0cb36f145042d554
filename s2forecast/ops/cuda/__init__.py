"""Fused GPU kernels (Triton). Imported lazily by the ops that dispatch to them, so that
``TRITON_INTERPRET=1`` set before the first use runs the same kernels on CPU."""
