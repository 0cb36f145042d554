"""Spherical attention layers on fields of shape (batch, channels, nlat, nlon)."""

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from s2forecast.geometry import Grid
from s2forecast.ops import default_radius
from s2forecast.ops.backends import AttentionBackend, check_backend, choose
from s2forecast.ops.prepared import flatten, unflatten
from s2forecast.ops.validation import check_grid, check_positive_int, check_radius
from s2forecast.user_errors import UserError


class QKPositionEmbedding(Protocol):
    """What an attention layer calls on its queries and keys before attending.

    ``forward(q, k) -> (q, k)`` on tensors of shape (batch, heads, N, head_dim), queries on the
    layer's output grid and keys on its input grid (relative embeddings such as SpRePE or RoPE).
    Modules with ``acts_on = "scores"`` instead return an additive logit bias from
    ``forward()`` (global attention only); see ``s2forecast.nn.position_embedding``.
    """

    def __call__(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


class SphericalAttentionLayer(nn.Module):
    """Shared projections, heads, qk-norm and dropout of the spherical attention layers, and
    their attention backend (``s2forecast.ops.backends``).

    The backend is chosen, and its state prepared, when the layer is built and again when
    ``.to()``/``.cuda()``/``.double()``... move it to another device or dtype (``_apply``),
    never per forward. The state's tensors are non-persistent buffers: they follow the module
    and stay out of its state_dict (checkpoints hold the weights only).
    """

    kind = "attention"  # named in errors, e.g. "neighborhood attention"
    takes_score_bias = False  # whether the op accepts an additive logit bias (RPE, ALiBi)
    op = ""  # the op's key in s2forecast.ops.backends.BACKENDS

    def __init__(
        self,
        in_channels: int,
        num_heads: int,
        out_channels: int | None,
        qk_channels: int | None,
        bias: bool,
        use_qknorm: bool,
        dropout: float,
        position_embedding: nn.Module | None,
    ):
        super().__init__()
        in_channels = check_positive_int("in_channels", in_channels)
        num_heads = check_positive_int("num_heads", num_heads)
        out_channels = in_channels if out_channels is None else check_positive_int("out_channels", out_channels)
        qk_channels = in_channels if qk_channels is None else check_positive_int("qk_channels", qk_channels)
        for name, channels in (("qk_channels", qk_channels), ("out_channels", out_channels)):
            if channels % num_heads != 0:
                raise UserError(f"{name}={channels} is not divisible by num_heads={num_heads}")
        if not 0.0 <= dropout < 1.0:
            raise UserError(f"dropout must be in [0, 1), got {dropout}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.num_heads = num_heads
        self.head_dim = qk_channels // num_heads
        self.q_proj = nn.Linear(in_channels, qk_channels, bias=bias)
        self.k_proj = nn.Linear(in_channels, qk_channels, bias=bias)
        self.v_proj = nn.Linear(in_channels, out_channels, bias=bias)
        self.out_proj = nn.Linear(out_channels, out_channels, bias=bias)
        self.q_norm = nn.RMSNorm(self.head_dim) if use_qknorm else nn.Identity()
        self.k_norm = nn.RMSNorm(self.head_dim) if use_qknorm else nn.Identity()
        self.dropout = nn.Dropout(dropout)
        self.position_embedding = position_embedding
        self.position_acts_on = getattr(position_embedding, "acts_on", "qk")
        if position_embedding is not None and self.position_acts_on not in ("qk", "scores"):
            raise UserError(
                f"{type(position_embedding).__name__} acts on {self.position_acts_on!r}: absolute embeddings "
                "are added to the model's tokens, not inside an attention layer"
            )
        if position_embedding is not None and self.position_acts_on == "scores" and not self.takes_score_bias:
            raise UserError(
                f"{type(position_embedding).__name__} biases the scores, which {self.kind} does not "
                "take; use it with S2Attention, or use SpRePE / RoPE"
            )

    # --- backend -----------------------------------------------------------------------------
    def _init_backend(self, name: str, grid_q: Grid, grid_kv: Grid) -> None:
        """Choose the backend ``name`` and prepare its state; the subclass's last init step, once its
        query and key grids are known: a position embedding must be built for them."""
        embedding = self.position_embedding
        built_q = getattr(embedding, "grid", None)  # None: no embedding, or one of no grid
        built_kv = getattr(embedding, "grid_kv", built_q)
        if built_q is not None and (built_q, built_kv) != (grid_q, grid_kv):  # as many points, other positions
            raise UserError(
                f"{type(embedding).__name__} is built for queries on {built_q} and keys on {built_kv}, but this "
                f"{self.kind} has queries on {grid_q} and keys on {grid_kv}; build it for those grids"
            )
        self._backend_name = check_backend(self.op, name)
        self._attention_backend: AttentionBackend | None = None
        self._prepared_for = None
        self._state_names: tuple[str, ...] = ()
        self._state_skeleton = None
        self._choose_and_prepare()

    def _prepare(self, backend: AttentionBackend, device: torch.device, dtype: torch.dtype):
        """The state of ``backend`` for this layer's grid(s) on ``device`` for ``dtype`` inputs."""
        raise NotImplementedError

    def _choose_and_prepare(self) -> None:
        weight = self.q_proj.weight
        key = (weight.device, weight.dtype)
        backend = choose(self.op, self._backend_name, *key)
        # backends with one prepare (fused and reference ball sparse attention) share a state
        old = self._attention_backend
        reuse = old is not None and type(old).prepare is type(backend).prepare and self._prepared_for == key
        self._attention_backend = backend
        if reuse:
            return
        tensors, skeleton = flatten(self._prepare(backend, *key))
        for name in self._state_names:
            delattr(self, name)
        self._state_names = tuple(f"_state{i}" for i in range(len(tensors)))
        for name, tensor in zip(self._state_names, tensors, strict=True):
            self.register_buffer(name, tensor, persistent=False)
        self._state_skeleton, self._prepared_for = skeleton, key

    def _apply(self, fn, recurse=True):
        module = super()._apply(fn, recurse)
        if getattr(self, "_attention_backend", None) is not None:  # not while __init__ runs
            self._choose_and_prepare()
        return module

    def _state(self):
        """The backend's prepared state, rebuilt from the buffers (which ``_apply`` moved)."""
        return unflatten(self._state_skeleton, [self._buffers[name] for name in self._state_names])

    @property
    def backend(self) -> str:
        """The backend name asked for ("auto" or a backend's name); setting it chooses again."""
        return self._backend_name

    @backend.setter
    def backend(self, name: str) -> None:
        self._backend_name = check_backend(self.op, name)
        self._choose_and_prepare()

    @property
    def attention_backend(self) -> AttentionBackend:
        """The backend that runs, e.g. ``blocked`` for "auto" on CPU."""
        return self._attention_backend

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, N, heads*d) -> (batch, heads, N, d)"""
        batch, n, _ = x.shape
        return x.view(batch, n, self.num_heads, -1).transpose(1, 2)

    def _project(self, query, key, value, grid_q: Grid, grid_kv: Grid):
        if key is None:
            key = query
        if value is None:
            value = key
        for name, x, grid in (("query", query, grid_q), ("key", key, grid_kv), ("value", value, grid_kv)):
            if x.dim() != 4 or x.shape[1] != self.in_channels or tuple(x.shape[-2:]) != grid.shape:
                expected = f"(batch, {self.in_channels}, {grid.nlat}, {grid.nlon})"
                raise UserError(f"{name} must have shape {expected}, got {tuple(x.shape)}")
        tokens = {id(x): x.flatten(2).transpose(1, 2) for x in (query, key, value)}  # (batch, N, channels)
        if key is query and value is query and self._projections_are_plain():
            q, k, v = self._self_projections(tokens[id(query)])
        else:
            q, k, v = (self.q_proj(tokens[id(query)]), self.k_proj(tokens[id(key)]), self.v_proj(tokens[id(value)]))
        q = self.q_norm(self._split_heads(q))
        k = self.k_norm(self._split_heads(k))
        v = self._split_heads(v)
        if self.position_embedding is not None and self.position_acts_on == "qk":
            q, k = self.position_embedding(q, k)
        return q, k, v

    def _projections_are_plain(self) -> bool:
        """Whether q_proj, k_proj and v_proj are plain nn.Linear that no hook watches: only then
        may one product stand for their three calls (wrapped ones, LoRA adapters, and hooked
        ones, their own or global, run as modules)."""
        hooks = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
        own = any(getattr(p, name) for p in (self.q_proj, self.k_proj, self.v_proj) for name in hooks)
        watched = any(getattr(nn.modules.module, f"_global{name}", None) for name in hooks)
        return not own and not watched and all(type(p) is nn.Linear for p in (self.q_proj, self.k_proj, self.v_proj))

    def _self_projections(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v of one input (batch, N, in_channels) in one matrix product: x is read, and
        cast under autocast, once instead of three times, and its gradient summed in the product
        instead of over three. Slices of one (batch, N, 2*qk + out) tensor, each a view of its
        own (``split``'s multi-output views would refuse a position embedding's in-place edit)."""
        projections = (self.q_proj, self.k_proj, self.v_proj)
        weight = torch.cat([p.weight for p in projections])
        bias = None if self.q_proj.bias is None else torch.cat([p.bias for p in projections])
        qkv = F.linear(x, weight, bias)
        qk, out = self.q_proj.out_features, self.v_proj.out_features
        return qkv[..., :qk], qkv[..., qk : 2 * qk], qkv[..., 2 * qk : 2 * qk + out]

    def _merge(self, out: torch.Tensor, grid: Grid) -> torch.Tensor:
        """(batch, heads, N, d) -> projected (batch, out_channels, nlat, nlon)"""
        batch = out.shape[0]
        out = out.transpose(1, 2).reshape(batch, grid.npoints, self.out_channels)
        out = self.dropout(self.out_proj(out))
        return out.transpose(1, 2).reshape(batch, self.out_channels, *grid.shape)


class S2Attention(SphericalAttentionLayer):
    """Global quadrature-weighted attention (eq. 26), optionally between two grids.

    Queries live on ``grid_out``; keys and values on ``grid_in`` (down/upsampling when they
    differ). ``layer(x)``: (batch, in_channels, *grid_in.shape) -> (batch, out_channels,
    *grid_out.shape) when the grids are equal; when they differ, ``layer(query, key)`` with the query
    fields on ``grid_out`` and the key (and value) fields on ``grid_in``.

    Args:
        in_channels: channels of the input fields.
        num_heads: attention heads; must divide ``qk_channels`` and ``out_channels``.
        grid_in: grid of keys and values.
        grid_out: grid of queries and output; defaults to ``grid_in``.
        out_channels: output (and value) channels; defaults to ``in_channels``.
        qk_channels: query/key channels; defaults to ``in_channels``.
        bias: biases in the four projections.
        use_qknorm: RMS-normalize queries and keys per head.
        dropout: dropout on the output projection.
        position_embedding: optional module applied to (q, k), see ``QKPositionEmbedding``.
    """

    takes_score_bias = True
    op = "global"

    def __init__(
        self,
        in_channels: int,
        num_heads: int,
        grid_in: Grid,
        grid_out: Grid | None = None,
        out_channels: int | None = None,
        qk_channels: int | None = None,
        bias: bool = True,
        use_qknorm: bool = False,
        dropout: float = 0.0,
        position_embedding: nn.Module | None = None,
    ):
        super().__init__(
            in_channels, num_heads, out_channels, qk_channels, bias, use_qknorm, dropout, position_embedding
        )
        self.grid_in = check_grid(grid_in, "grid_in")
        self.grid_out = grid_in if grid_out is None else check_grid(grid_out, "grid_out")
        self._init_backend("auto", self.grid_out, self.grid_in)

    def _prepare(self, backend, device, dtype):
        return backend.prepare(self.grid_in, device, dtype)

    def forward(self, query: torch.Tensor, key: torch.Tensor | None = None, value: torch.Tensor | None = None):
        """query on ``grid_out``; key (default: query) and value (default: key) on ``grid_in``:
        ``layer(x, y)`` attends from x to y's values, where torch-harmonics' ``AttentionS2`` takes x's."""
        q, k, v = self._project(query, key, value, self.grid_out, self.grid_in)
        bias = self.position_embedding() if self.position_acts_on == "scores" else None
        out = self._attention_backend(q, k, v, self._state(), grid_q=self.grid_out, grid_kv=self.grid_in, bias=bias)
        return self._merge(out, self.grid_out)

    def extra_repr(self) -> str:
        return f"grid_in={self.grid_in}, grid_out={self.grid_out}, num_heads={self.num_heads}"


class S2NeighborhoodAttention(SphericalAttentionLayer):
    """Neighborhood attention (eq. 27): each point attends to the keys within a geodesic disk.

    Input and output (batch, channels, nlat, nlon) on ``grid``.

    Args:
        in_channels, num_heads, out_channels, qk_channels, bias, use_qknorm, dropout,
        position_embedding: as for ``S2Attention``.
        grid: grid of the input and output fields.
        theta: disk radius in radians; defaults to the attention paper's
            (7/sqrt(pi)) * latitude spacing (``s2forecast.ops.default_radius``).
        backend: "auto" (fused Triton kernel on CUDA, the longitude-blocked PyTorch path
            elsewhere), "fused", "blocked" or "reference"; see ``s2forecast.ops.backends``.
            Chosen again when the layer moves to another device or dtype.
    """

    kind = "neighborhood attention"
    op = "neighborhood"

    def __init__(
        self,
        in_channels: int,
        num_heads: int,
        grid: Grid,
        theta: float | None = None,
        out_channels: int | None = None,
        qk_channels: int | None = None,
        bias: bool = True,
        use_qknorm: bool = False,
        dropout: float = 0.0,
        position_embedding: nn.Module | None = None,
        backend: str = "auto",
    ):
        super().__init__(
            in_channels, num_heads, out_channels, qk_channels, bias, use_qknorm, dropout, position_embedding
        )
        self.grid = check_grid(grid, "grid")
        self._theta = default_radius(grid) if theta is None else check_radius(theta)
        self._init_backend(backend, self.grid, self.grid)

    @property
    def theta(self) -> float:
        """The disk radius in radians, fixed at construction: the backend's state (neighborhoods,
        tables) is built from it, so a new radius needs a new layer."""
        return self._theta

    def _prepare(self, backend, device, dtype):
        return backend.prepare(self.grid, self.theta, device, dtype)

    def forward(self, query: torch.Tensor, key: torch.Tensor | None = None, value: torch.Tensor | None = None):
        """query, key (default: query) and value (default: key) all on ``grid``."""
        q, k, v = self._project(query, key, value, self.grid, self.grid)
        out = self._attention_backend(q, k, v, self._state())
        return self._merge(out, self.grid)

    def extra_repr(self) -> str:
        return (
            f"grid={self.grid}, theta={self.theta:.6g}, num_heads={self.num_heads}, "
            f"backend={self._attention_backend.name}"
        )
