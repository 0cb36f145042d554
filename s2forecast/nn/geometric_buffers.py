"""Buffers computed from a grid's geometry (Householder vectors, rotary angles, Legendre
kernels) that stay exact in whatever floating dtype their module is converted to.

They are computed in float64 and stored in the default dtype (float32), so float32 and bf16
models read them without a cast per forward. Converting the module with ``.double()`` /
``.to(torch.float64)`` would only widen those float32 roundings (1e-7 relative errors in
float64 outputs, enough to fail ``torch.autograd.gradcheck``); instead, on every dtype change
``_apply`` computes them again in float64 and rounds them once to the new dtype, on their
device.
"""

import torch
from torch import nn


class GeometricBuffers(nn.Module):
    """Base of modules with geometric buffers: subclasses implement ``_geometry()`` and call
    ``_register_geometry()`` in ``__init__``."""

    _geometry_names: tuple[str, ...] = ()

    def _geometry(self) -> dict[str, torch.Tensor]:
        """The geometric buffers by name, computed in float64 on the CPU."""
        raise NotImplementedError

    def _register_geometry(self) -> None:
        """Register the tensors of ``_geometry()`` as non-persistent buffers in the default dtype."""
        exact = self._geometry()
        for name, tensor in exact.items():
            self.register_buffer(name, tensor.to(torch.get_default_dtype()).contiguous(), persistent=False)
        self._geometry_names = tuple(exact)

    def _apply(self, fn, recurse=True):
        before = {name: self._buffers[name].dtype for name in self._geometry_names}
        module = super()._apply(fn, recurse)
        changed = [name for name, dtype in before.items() if self._buffers[name].dtype != dtype]
        if changed:  # a dtype conversion: round the exact values once, on the buffers' device
            exact = self._geometry()
            for name in changed:
                buffer = self._buffers[name]
                self._buffers[name] = exact[name].to(buffer.device, buffer.dtype).contiguous()
        return module
