"""Attention backends as objects: one per way of computing an op, each with

- ``name``: what ``backend=...`` calls it;
- ``available(device) -> bool``: whether it can run on ``device`` here (Triton installed,
  a CUDA device, or the Triton interpreter for CPU tensors);
- ``prepare(..., device, dtype) -> state``: everything it precomputes from the grid (tables,
  masks, log quadrature weights), as a NamedTuple of tensors on ``device`` for inputs of
  ``dtype`` (float64 inputs get float64 log weights, others float32);
- ``__call__(q, k, v, state, scale=None, ...)``: the op on (batch, heads, N, head_dim) tensors.

Backends hold no tensors: the layers of ``s2forecast.nn`` choose one when they are built or
moved to a device and keep its state as non-persistent buffers; the functional ops
(``neighborhood_attention`` ...) choose and prepare on every call.

``choose(op, name, device, dtype)`` resolves "auto":

- neighborhood: "fused" for CUDA devices (not for float64, which the kernels do not take) when
  Triton is installed, else "blocked". The Triton interpreter (TRITON_INTERPRET=1) does not make
  "auto" pick the kernels on CPU; name "fused" to run them there.
- ball: "fused" for CUDA devices other than float64 when Triton is installed, else "reference".
- global: "sdpa".
"""

import importlib.util
import threading

import torch

from s2forecast.geometry import Grid
from s2forecast.ops.ball_sparse_attention import BallSparseState, attend_ball_sparse, prepare_ball_sparse
from s2forecast.ops.cuda.tables import FusedNeighborhoodState, interpreting, prepare_fused_neighborhood
from s2forecast.ops.global_attention import global_attention, prepare_global
from s2forecast.ops.neighborhood_attention import (
    BlockedState,
    ReferenceState,
    neighborhood_attention_blocked,
    neighborhood_attention_reference,
    prepare_blocked,
    prepare_reference,
)
from s2forecast.ops.validation import check_attention_inputs, check_scale
from s2forecast.user_errors import UserError


def _triton_runs_on(device) -> bool:
    """Triton installed, and a CUDA device or (for CPU tensors) its interpreter."""
    device = torch.device(device)
    if importlib.util.find_spec("triton") is None:
        return False
    if device.type == "cuda":
        return torch.cuda.is_available()
    return device.type == "cpu" and interpreting()


class AttentionBackend:
    """Base of the backends; see the module docstring."""

    name = ""
    op = ""

    def available(self, device) -> bool:
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


# --- neighborhood attention -----------------------------------------------------------------
class BlockedNeighborhood(AttentionBackend):
    """Pure PyTorch over longitude blocks (``neighborhood_attention_blocked``); the CPU default.

    Keeps the scratch tensors of its gathers between calls, per thread (a fresh set per call
    makes the forward about 1.5x slower on CPU): scratch, not precompute, owned by the layer
    that chose this backend and dropped with it (or when the layer chooses again); not copied
    by deepcopy or pickling."""

    name, op = "blocked", "neighborhood"

    def __init__(self):
        self._local = threading.local()

    def __getstate__(self):
        return {}

    def __setstate__(self, state):
        self.__init__()

    def prepare(self, grid: Grid, theta: float, device="cpu", dtype=torch.float32) -> BlockedState:
        return prepare_blocked(grid, theta, device, dtype)

    def __call__(self, q, k, v, state: BlockedState, scale: float | None = None) -> torch.Tensor:
        grid = state.blocks.neighborhood.grid
        check_attention_inputs(q, k, v, grid, grid)
        workspace = self._local.__dict__.setdefault("workspace", {})
        return neighborhood_attention_blocked(q, k, v, state, check_scale(scale, q.shape[-1]), workspace)


class ReferenceNeighborhood(AttentionBackend):
    """Pure PyTorch over whole key rows (``neighborhood_attention_reference``); the tests' oracle."""

    name, op = "reference", "neighborhood"

    def prepare(self, grid: Grid, theta: float, device="cpu", dtype=torch.float32) -> ReferenceState:
        return prepare_reference(grid, theta, device, dtype)

    def __call__(self, q, k, v, state: ReferenceState, scale: float | None = None) -> torch.Tensor:
        grid = state.neighborhood.grid
        check_attention_inputs(q, k, v, grid, grid)
        scale = check_scale(scale, q.shape[-1])
        return neighborhood_attention_reference(q, k, v, state.neighborhood, scale, state.log_w)


class FusedNeighborhood(AttentionBackend):
    """The Triton kernels of ``s2forecast.ops.cuda`` (CUDA, or CPU under TRITON_INTERPRET=1)."""

    name, op = "fused", "neighborhood"

    def available(self, device) -> bool:
        return _triton_runs_on(device)

    def prepare(self, grid: Grid, theta: float, device="cpu", dtype=torch.float32) -> FusedNeighborhoodState:
        return prepare_fused_neighborhood(grid, theta, device)

    def __call__(self, q, k, v, state: FusedNeighborhoodState, scale: float | None = None) -> torch.Tensor:
        check_attention_inputs(q, k, v, state.grid, state.grid)
        scale = check_scale(scale, q.shape[-1])
        from s2forecast.ops.cuda.fused_neighborhood_attention import fused_neighborhood_attention

        return fused_neighborhood_attention(q, k, v, state, None, scale)


# --- ball sparse attention ------------------------------------------------------------------
class BallSparseBackend(AttentionBackend):
    """The ball sparse backends: one prepare (a state both can run), fused or not to call."""

    op = "ball"
    fused = False

    def prepare(
        self,
        grid: Grid,
        ball_size: int,
        block_size: int | None,
        compression_window: int | None = None,
        device="cpu",
        dtype=torch.float32,
    ) -> BallSparseState:
        return prepare_ball_sparse(grid, ball_size, block_size, compression_window, device, dtype)

    def __call__(self, q, k, v, state: BallSparseState, scale: float | None = None, **options) -> torch.Tensor:
        """options: select_block, top_k, group_size, gates, branches of ``ball_sparse_attention``."""
        return attend_ball_sparse(q, k, v, state, scale, fused=self.fused, **options)


class ReferenceBallSparse(BallSparseBackend):
    """Gathers the listed keys and runs SDPA."""

    name = "reference"


class FusedBallSparse(BallSparseBackend):
    """Reads the listed keys through index lists with the Triton kernels (CUDA, or CPU under
    TRITON_INTERPRET=1); the ball branch and the single-level compression stay on SDPA."""

    name = "fused"
    fused = True

    def available(self, device) -> bool:
        return _triton_runs_on(device)


# --- global attention -----------------------------------------------------------------------
class SDPAGlobal(AttentionBackend):
    """PyTorch's scaled_dot_product_attention with log w as mask or folded channel."""

    name, op = "sdpa", "global"

    def prepare(self, grid_kv: Grid, device="cpu", dtype=torch.float32) -> torch.Tensor:
        return prepare_global(grid_kv, device, dtype)

    def __call__(
        self, q, k, v, state: torch.Tensor, scale: float | None = None, *, grid_q: Grid, grid_kv: Grid, bias=None
    ) -> torch.Tensor:
        return global_attention(q, k, v, grid_q, grid_kv, scale=scale, bias=bias, log_w=state)


BACKENDS: dict[str, dict[str, type[AttentionBackend]]] = {
    "neighborhood": {b.name: b for b in (BlockedNeighborhood, FusedNeighborhood, ReferenceNeighborhood)},
    "ball": {b.name: b for b in (FusedBallSparse, ReferenceBallSparse)},
    "global": {b.name: b for b in (SDPAGlobal,)},
}
_FALLBACK = {"neighborhood": "blocked", "ball": "reference", "global": "sdpa"}
OP_NAMES = {"neighborhood": "neighborhood attention", "ball": "ball sparse attention", "global": "global attention"}


def backend_names(op: str) -> tuple[str, ...]:
    """The names ``backend=`` takes for ``op``: "auto" and the registered backends."""
    return ("auto", *sorted(BACKENDS[op]))


def check_backend(op: str, name) -> str:
    """``name`` if ``op`` has such a backend (or "auto"), else a one-line ValueError."""
    if op not in BACKENDS:
        raise UserError(f"op must be one of {tuple(BACKENDS)}, got {op!r}")
    if not isinstance(name, str) or name not in backend_names(op):
        raise UserError(f"{OP_NAMES[op]} backend must be one of {backend_names(op)}, got {name!r}")
    return name


def choose(op: str, name: str = "auto", device="cpu", dtype: torch.dtype = torch.float32) -> AttentionBackend:
    """The backend of ``op`` ("neighborhood", "ball" or "global") called ``name``, "auto" being
    resolved for inputs of ``dtype`` on ``device`` (see the module docstring). A named backend
    is returned even where it is not available: it raises its own error when called."""
    check_backend(op, name)
    if name == "auto":
        device = torch.device(device)
        fused = BACKENDS[op].get("fused")
        use_fused = fused is not None and device.type == "cuda" and dtype != torch.float64
        name = "fused" if use_fused and fused().available(device) else _FALLBACK[op]
    return BACKENDS[op][name]()
