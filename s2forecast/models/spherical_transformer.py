"""The spherical Transformer forecaster ("Attention on the Sphere", sec. 3.4).

    fields (batch, in_channels, nlat, nlon) on the data grid
      -> DISCO convolution encoder onto a coarser latent grid (torch-harmonics
         DiscreteContinuousConvS2), optional absolute position embedding
      -> num_layers pre-norm blocks: x + attention(norm(x)), x + MLP(norm(x)); the attention
         of each block is global (S2Attention) or neighborhood (S2NeighborhoodAttention), with
         an optional relative position embedding (SpRePE, RoPE, ...) per layer; or ball
         sparse attention (S2BallSparseAttention: a global receptive field for about 1/8 of
         dense attention's scores; O(N log N) with multi-level compression)
      -> decoder: spherical bilinear resampling back to the data grid (torch-harmonics
         ResampleS2) + DISCO convolution
      -> (batch, out_channels, nlat, nlon)

Every operator is defined on the sphere, so a trained model runs on another resolution by
rebuilding the grids (``on_grid``); the learned weights are resolution-free except for
grid-bound position embeddings (APE, RPE, RoPE, SpRePE's learnable mask), which is reported as an error.
torch-harmonics' DISCO convolution and resampling know no cell-centred grid, so data on an
``equiangular-midpoint`` grid (WeatherBench2's 64x32) is moved to the equiangular grid of its
cell edges (nlat + 1 rows, poles included: 2-tap averages, pole rows = zonal mean of the
nearest row) before the encoder and back after the decoder.
"""

import math

import torch
from torch import nn
from torch_harmonics import DiscreteContinuousConvS2, ResampleS2

from s2forecast.geometry import Grid
from s2forecast.nn import (
    S2Attention,
    S2BallSparseAttention,
    S2NeighborhoodAttention,
    SphericalNoise,
    VectorNoise,
    build_position_embedding,
)
from s2forecast.nn.position_embedding import GeodesicALiBi
from s2forecast.ops import default_radius
from s2forecast.user_errors import UserError

ATTENTION_KINDS = ("neighborhood", "global", "ball")
NORMS = ("instance", "layer", "none")
NOISE_KINDS = ("field", "vector")
NOISE_INJECTIONS = ("norm", "latent")
GRID_BOUND_EMBEDDINGS = ("ape", "rpe", "rope")


def grid_bound_embedding(embedding: str | None, options: dict | None) -> str | None:
    """Why a position embedding's weights fit only the training grid, or None: APE, RPE and RoPE, and
    SpRePE with ``mask: learnable`` (a weight per latent point and channel)."""
    if embedding in GRID_BOUND_EMBEDDINGS:
        return f"its position embedding {embedding!r} is tied to the training grid"
    if embedding == "sprepe" and (options or {}).get("mask") == "learnable":
        return (
            "its position embedding 'sprepe' with mask 'learnable' (a weight per latent point) is tied to the "
            "training grid"
        )
    return None


# torch-harmonics' examples' cutoff factors of its bases (its "fourier-bessel" has none there; "morlet",
# deprecated there for "harmonic", stays for the peer benchmark's model: scripts/bench_train.py)
BASIS_CUTOFF_FACTORS = {"piecewise linear": 0.5, "morlet": 0.5, "harmonic": 0.5, "zernike": math.sqrt(2.0)}
ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU, "silu": nn.SiLU}


def disco_cutoff(nlat: int, kernel_shape: tuple[int, int], basis_type: str) -> float:
    """torch-harmonics' DISCO filter support radius for an nlat-row grid (radians)."""
    if basis_type not in BASIS_CUTOFF_FACTORS:
        raise UserError(f"network option basis_type must be one of {sorted(BASIS_CUTOFF_FACTORS)}, got {basis_type!r}")
    factor = BASIS_CUTOFF_FACTORS[basis_type]
    return (kernel_shape[0] + 1) * factor * math.pi / float(nlat - 1)


def channel_norm(kind: str, channels: int, grid: Grid | None = None) -> nn.Module:
    """The norm of a block over (batch, channels, nlat, nlon) fields; "instance" on a ``grid``: the
    sphere's (``SphericalInstanceNorm``), else every point weighing the same (planar)."""
    if kind == "instance":
        if grid is not None:
            return SphericalInstanceNorm(channels, grid)
        return nn.InstanceNorm2d(channels, eps=1e-6, affine=True)
    if kind == "layer":
        return ChannelLayerNorm(channels)
    if kind == "none":
        return nn.Identity()
    raise UserError(f"norm must be one of {NORMS}, got {kind!r}")


class SphericalInstanceNorm(nn.Module):
    """Instance norm of fields on the sphere: each channel's mean and variance are integrals over
    the sphere with the grid's quadrature, so the norm commutes with rotations up to the quadrature's
    error. ``nn.InstanceNorm2d`` weighs every grid point the same: the crowded polar rows count as
    much as the equator's, and the norm alone stayed 13-15 % from rotation-equivariant from 17x32 to
    65x128 (``nn.equivariance.rotation_error``, the rotation of ``tests/models/test_spherical_norm.py``).
    Parameters as ``nn.InstanceNorm2d(channels, affine=True)``'s (``weight``, ``bias``), so its
    checkpoints load. Computed in float32 at least (as autocast runs InstanceNorm2d)."""

    def __init__(self, channels: int, grid: Grid, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        weights = grid.quadrature_weights
        self.register_buffer("area", (weights / weights.sum()).float(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, channels, nlat, nlon) -> the same, each channel of each sample of mean 0 and variance 1."""
        dtype = torch.promote_types(x.dtype, torch.float32)
        with torch.autocast(x.device.type, enabled=False):
            y, area = x.to(dtype), self.area.to(dtype)
            mean = (y * area).sum(dim=(-2, -1), keepdim=True)
            centred = y - mean
            variance = (centred.square() * area).sum(dim=(-2, -1), keepdim=True)
            out = centred * torch.rsqrt(variance + self.eps)
            out = out * self.weight.to(dtype)[:, None, None] + self.bias.to(dtype)[:, None, None]
        return out.to(x.dtype)


class ChannelLayerNorm(nn.LayerNorm):
    """LayerNorm over the channels of (batch, channels, nlat, nlon) fields."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class MLP(nn.Module):
    """Pointwise two-layer MLP on (batch, channels, nlat, nlon)."""

    def __init__(self, channels: int, hidden: int, activation: str):
        super().__init__()
        self.fc1 = nn.Conv2d(channels, hidden, 1)
        if activation not in ACTIVATIONS:
            raise UserError(f"network option activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.act = ACTIVATIONS[activation]()
        self.fc2 = nn.Conv2d(hidden, channels, 1)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class PreNormBlock(nn.Module):
    """Pre-norm block: x + attention(norm(x)), then x + MLP(norm(x)); (batch, C, nlat, nlon).
    The attention is any module on such fields (spherical or planar).

    With ``condition_channels`` > 0 the norms are adaptive (AdaLN, as in AIFS-CRPS and
    FourCastNet 3's noise conditioning): norm(x) * (1 + scale(c)) + shift(c), scale and shift
    pointwise linear in a condition field c (batch, condition_channels, nlat, nlon), zero at
    initialization so that a new conditioned block computes what an unconditioned one does.
    """

    def __init__(
        self, attention: nn.Module, channels: int, mlp_ratio: float, activation: str, norm: str,
        condition_channels: int = 0, grid: Grid | None = None,
    ):  # fmt: skip
        super().__init__()
        self.norm0 = channel_norm(norm, channels, grid)
        self.attention = attention
        self.norm1 = channel_norm(norm, channels, grid)
        self.mlp = MLP(channels, int(channels * mlp_ratio), activation)
        self.modulation = None
        if condition_channels:
            self.modulation = nn.Conv2d(condition_channels, 4 * channels, 1)
            nn.init.zeros_(self.modulation.weight)
            nn.init.zeros_(self.modulation.bias)

    def forward(self, x, condition: torch.Tensor | None = None):
        if self.modulation is None:
            x = x + self.attention(self.norm0(x))
            return x + self.mlp(self.norm1(x))
        scale0, shift0, scale1, shift1 = self.modulation(condition.to(x.dtype)).chunk(4, dim=1)
        x = x + self.attention(self.norm0(x) * (1 + scale0) + shift0)
        return x + self.mlp(self.norm1(x) * (1 + scale1) + shift1)


def attention_pattern(attention: str | list[str], num_layers: int, global_every: int | None) -> list[str]:
    """Per-layer attention kinds from one kind, an explicit list, or local layers with a
    global one every ``global_every`` layers (the last of each group)."""
    if isinstance(attention, str):
        pattern = [attention] * num_layers
        if global_every:
            pattern = ["global" if (i + 1) % global_every == 0 else attention for i in range(num_layers)]
    else:
        pattern = list(attention)
        if len(pattern) != num_layers:
            raise UserError(f"attention pattern {pattern} has {len(pattern)} entries for num_layers={num_layers}")
    bad = [a for a in pattern if a not in ATTENTION_KINDS]
    if bad:
        raise UserError(f"attention kinds must be in {ATTENTION_KINDS}, got {bad}")
    return pattern


class SphericalTransformer(nn.Module):
    """Encoder-processor-decoder Transformer on the sphere; see the module docstring.

    Args:
        grid: the data grid (input and output).
        in_channels: input channels (states x history + static + forcings).
        out_channels: predicted channels.
        embed_dim: latent width.
        num_layers: attention blocks.
        num_heads: attention heads.
        scale_factor: latent grid has nlat // scale_factor rows (at least 2) and
            nlon // scale_factor columns (at least 1); 1: no downsampling. An
            equiangular-midpoint grid counts its nlat + 1 edge rows.
        latent_kind: grid kind of the latent grid.
        attention: "neighborhood", "global", "ball" or a per-layer list of them.
        global_every: with a single kind, make every k-th layer global.
        theta: neighborhood radius (radians); default (7/sqrt(pi)) * latent lat spacing.
        mlp_ratio, activation, norm: block MLP width ratio, "gelu" | "relu" | "silu",
            "instance" | "layer" | "none".
        position_embedding: one of ``s2forecast.nn.POSITION_EMBEDDINGS``; absolute ones are
            added after the encoder, relative ones go into every attention layer.
        position_embedding_options: extra arguments of the embedding (e.g. SpRePE's mask).
        encoder_kernel_shape, basis_type: DISCO filter basis of encoder and decoder.
        encoder_cutoff, decoder_cutoff: DISCO filter radii (radians) of encoder and decoder;
            default torch-harmonics' for the grid (data grid and latent grid rows). ``on_grid``
            keeps the training grid's ``theta`` and radii: the same operator at another resolution.
        use_qknorm: RMS-normalize queries and keys.
        backend: neighborhood attention backend ("auto", "fused", "reference").
        ball_options: keyword arguments of ``S2BallSparseAttention`` for "ball" layers
            (ball_size, block_size, top_k, group_size, branches, select_block,
            compression_window).
        noise_channels: > 0 makes the model stochastic (ensemble members): every step draws
            that many unit-variance noise channels (``s2forecast.nn.noise``); the options below
            say which noise and where it enters. Everything the noise enters through is
            zero-initialized, so a new stochastic model computes the deterministic one.
        noise_kind: "field": spherical random fields on the latent grid (``SphericalNoise``);
            "vector": a Gaussian vector per sample, global (FGN; ``VectorNoise``).
        noise_injection: "norm": the noise conditions every block's norms (adaptive norms,
            AdaLN: scale and shift pointwise linear in the noise); "latent": a pointwise linear
            map of the noise is added to the latent state after the encoder.
        noise_alpha, noise_tau: the fields' spectrum, coefficient std of degree l proportional
            to (l (l + 1) + tau**2)**(-alpha/2): 2 and 3 are smooth, alpha 0 is white, tau 0 a
            power law ("field" only).
        noise_correlation: AR(1) correlation rho of the noise between rollout steps, in [0, 1]
            (0: independent draws every step).
    """

    def __init__(
        self,
        grid: Grid,
        in_channels: int,
        out_channels: int,
        embed_dim: int = 128,
        num_layers: int = 4,
        num_heads: int = 1,
        scale_factor: int = 2,
        latent_kind: str = "equiangular",
        attention: str | list[str] = "neighborhood",
        global_every: int | None = None,
        theta: float | None = None,
        mlp_ratio: float = 2.0,
        activation: str = "gelu",
        norm: str = "instance",
        position_embedding: str = "none",
        position_embedding_options: dict | None = None,
        encoder_kernel_shape: tuple[int, int] = (3, 3),
        basis_type: str = "harmonic",
        encoder_cutoff: float | None = None,
        decoder_cutoff: float | None = None,
        use_qknorm: bool = False,
        backend: str = "auto",
        ball_options: dict | None = None,
        noise_channels: int = 0,
        noise_kind: str = "field",
        noise_injection: str = "norm",
        noise_alpha: float = 2.0,
        noise_tau: float = 3.0,
        noise_correlation: float = 0.0,
    ):
        super().__init__()
        if noise_channels < 0:
            raise UserError(f"noise_channels must be >= 0, got {noise_channels}")
        if noise_kind not in NOISE_KINDS:
            raise UserError(f"noise_kind must be one of {NOISE_KINDS}, got {noise_kind!r}")
        if noise_injection not in NOISE_INJECTIONS:
            raise UserError(f"noise_injection must be one of {NOISE_INJECTIONS}, got {noise_injection!r}")
        if scale_factor < 1:
            raise UserError(f"scale_factor must be >= 1, got {scale_factor}")
        self.config = {
            k: v for k, v in locals().items() if k not in ("self", "__class__", "grid", "in_channels", "out_channels")
        }
        self.grid, self.in_channels, self.out_channels = grid, in_channels, out_channels
        self.midpoint = grid.kind == "equiangular-midpoint"
        grid = Grid(grid.nlat + 1, grid.nlon, "equiangular") if self.midpoint else grid
        self.latent = Grid(max(2, grid.nlat // scale_factor), max(1, grid.nlon // scale_factor), latent_kind)
        if grid.nlon % self.latent.nlon:  # the DISCO encoder maps whole columns onto the latent grid's
            raise UserError(  # the data grid (not a midpoint grid's edge grid, one row more)
                f"a {self.grid.nlat}x{grid.nlon} grid cannot run this network: its {grid.nlon} longitudes are not a "
                f"multiple of the latent grid's {self.latent.nlon} (nlon // scale_factor {scale_factor}); use a grid "
                f"whose nlon is a multiple of {scale_factor}"
            )
        kernel_shape = tuple(encoder_kernel_shape)
        # the physical radii of this grid (on_grid passes them on: the same operator on another grid)
        if encoder_cutoff is None:
            encoder_cutoff = disco_cutoff(grid.nlat, kernel_shape, basis_type)
        if decoder_cutoff is None:
            decoder_cutoff = disco_cutoff(self.latent.nlat, kernel_shape, basis_type)
        self.encoder_cutoff, self.decoder_cutoff = encoder_cutoff, decoder_cutoff
        self.encoder = DiscreteContinuousConvS2(
            in_channels, embed_dim, grid.shape, self.latent.shape, kernel_shape, basis_type,
            grid_in=_th_grid(grid), grid_out=_th_grid(self.latent), bias=False, theta_cutoff=encoder_cutoff,
        )  # fmt: skip
        options = position_embedding_options or {}
        head_dim = embed_dim // num_heads
        common = {"grid": self.latent, "channels": embed_dim, "num_heads": num_heads, "head_dim": head_dim}
        absolute = build_position_embedding(position_embedding, **common, **options)
        self.position_embedding = absolute if getattr(absolute, "acts_on", None) == "tokens" else None
        self.pattern = attention_pattern(attention, num_layers, global_every)
        theta = default_radius(self.latent) if theta is None else theta
        self.theta = theta
        blocks = []
        for i, kind in enumerate(self.pattern):
            relative = None
            if self.position_embedding is None:
                relative = build_position_embedding(position_embedding, **common, seed=i, **options)
            if kind == "ball":
                layer = S2BallSparseAttention(
                    embed_dim, num_heads, self.latent, use_qknorm=use_qknorm, position_embedding=relative,
                    **(ball_options or {}),
                )  # fmt: skip
            elif kind == "global":
                layer = S2Attention(
                    embed_dim, num_heads, self.latent, use_qknorm=use_qknorm, position_embedding=relative
                )
            else:
                layer = S2NeighborhoodAttention(
                    embed_dim, num_heads, self.latent, theta, use_qknorm=use_qknorm, position_embedding=relative,
                    backend=backend,
                )  # fmt: skip
            conditioned = noise_channels if noise_injection == "norm" else 0
            blocks.append(PreNormBlock(layer, embed_dim, mlp_ratio, activation, norm, conditioned, self.latent))
        self.blocks = nn.ModuleList(blocks)
        self.noise, self.noise_projection = None, None
        if noise_channels and noise_kind == "field":
            self.noise = SphericalNoise(self.latent, noise_channels, noise_alpha, noise_tau, noise_correlation)
        elif noise_channels:
            self.noise = VectorNoise(noise_channels, noise_correlation)
        if noise_channels and noise_injection == "latent":
            self.noise_projection = nn.Conv2d(noise_channels, embed_dim, 1, bias=False)  # the noise is zero-mean
            nn.init.zeros_(self.noise_projection.weight)
        self.resample = ResampleS2(
            *self.latent.shape, *grid.shape, grid_in=_th_grid(self.latent), grid_out=_th_grid(grid)
        )
        self.decoder = DiscreteContinuousConvS2(
            embed_dim, out_channels, grid.shape, grid.shape, kernel_shape, basis_type,
            grid_in=_th_grid(grid), grid_out=_th_grid(grid), bias=False, theta_cutoff=decoder_cutoff,
        )  # fmt: skip

    def forward(self, x: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        """x: (batch, in_channels, nlat, nlon) -> (batch, out_channels, nlat, nlon).

        noise: (batch, noise_channels, latent nlat, latent nlon) fields or (batch,
            noise_channels, 1, 1) vectors for a stochastic model (``sample_noise``); drawn from
            the global random state when not given.
        """
        dtype = x.dtype
        # DISCO and resampling in fp32 under autocast (float64 in a float64 module: gradchecks, references)
        exact = torch.float64 if self.decoder.weight.dtype == torch.float64 else torch.float32
        if dtype == torch.float64 and exact != torch.float64:  # it computed in float32 and labelled it float64
            raise UserError(
                "float64 input to a network of float32 weights; convert the network (.double()) or the input (.float())"
            )
        if self.noise is not None and noise is None:
            noise = self.sample_noise(x.shape[0])
        with torch.autocast(x.device.type, enabled=False):
            x = centres_to_edges(x.to(exact)) if self.midpoint else x.to(exact)
            h = self.encoder(x)
        if self.position_embedding is not None:
            h = self.position_embedding(h)
        if self.noise_projection is not None:
            h = h + self.noise_projection(noise.to(h.dtype))
            noise = None  # it entered here; the blocks are unconditioned
        for block in self.blocks:
            h = block(h, noise)
        with torch.autocast(x.device.type, enabled=False):
            out = self.decoder(self.resample(h.to(exact)))
            out = edges_to_centres(out) if self.midpoint else out
        return out.to(dtype)

    def sample_noise(
        self, batch: int, generator: torch.Generator | None = None, previous: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        """The noise input of ``batch`` members (None for a deterministic model); ``previous``: the
        last rollout step's noise, which a temporally correlated noise continues from."""
        return None if self.noise is None else self.noise(batch, generator, previous)

    def bound_to_grid(self) -> str | None:
        """Why these weights cannot run on another grid (a grid-bound position embedding), or None."""
        return grid_bound_embedding(self.config["position_embedding"], self.config.get("position_embedding_options"))

    def on_grid(self, grid: Grid) -> "SphericalTransformer":
        """The same weights on another data grid (neural-operator property), with the same physical
        radii: the neighborhoods' ``theta`` and the DISCO filters' cutoffs of this grid (their
        defaults follow the grid spacing; recomputed on a grid of twice the rows, the model computed
        another function: 13 % apart on a smooth field against 3.4 % with these radii, in
        ``tests/training/test_training.py``)."""
        if grid != self.grid and (reason := self.bound_to_grid()) is not None:
            raise UserError(f"the model cannot run on {grid}: {reason}; regrid the data to {self.grid}")
        radii = {"theta": self.theta, "encoder_cutoff": self.encoder_cutoff, "decoder_cutoff": self.decoder_cutoff}
        if self.config["position_embedding"] == "alibi":  # its bias per radian (a default per grid spacing)
            units = {m.distance_unit_rad for m in self.modules() if isinstance(m, GeodesicALiBi)}
            options = self.config.get("position_embedding_options") or {}
            radii["position_embedding_options"] = {**options, "distance_unit_rad": units.pop()} if units else options
        other = SphericalTransformer(grid, self.in_channels, self.out_channels, **{**self.config, **radii})
        state = {k: v for k, v in self.state_dict().items()}
        other.load_state_dict(state, strict=False)
        weight = next(self.parameters())
        return other.to(weight.device, weight.dtype)  # a float64 model stays float64


def _th_grid(grid: Grid) -> str:
    if grid.kind == "equiangular-midpoint":  # a data grid of this kind runs on its edge grid: the latent one only
        raise UserError(
            "network option latent_kind 'equiangular-midpoint' is not a grid of torch-harmonics' DISCO convolution; "
            "use 'equiangular' or 'legendre-gauss'"
        )
    return grid.kind


def centres_to_edges(x: torch.Tensor) -> torch.Tensor:
    """(..., nlat, nlon) on cell centres -> (..., nlat + 1, nlon) on the cell edges (poles
    included): interior edges average their two cells, a pole takes the zonal mean of its row."""
    north = x[..., :1, :].mean(dim=-1, keepdim=True).expand_as(x[..., :1, :])
    south = x[..., -1:, :].mean(dim=-1, keepdim=True).expand_as(x[..., -1:, :])
    return torch.cat([north, 0.5 * (x[..., 1:, :] + x[..., :-1, :]), south], dim=-2)


def edges_to_centres(x: torch.Tensor) -> torch.Tensor:
    """(..., nlat + 1, nlon) on cell edges -> (..., nlat, nlon) on the centres (2-tap mean)."""
    return 0.5 * (x[..., 1:, :] + x[..., :-1, :])
