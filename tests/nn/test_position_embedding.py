"""SpRePE geometry (paper, appendix C) and the baselines behind the same interface."""

import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch_harmonics import RealSHT

from s2forecast.geometry import Grid, geodesic_distance, random_rotation
from s2forecast.nn import S2Attention, S2NeighborhoodAttention
from s2forecast.nn.harmonics import SphericalHarmonicAnalysis
from s2forecast.nn.position_embedding import (
    POSITION_EMBEDDINGS,
    AxialRotaryEmbedding,
    GeodesicALiBi,
    RelativePositionBias,
    SpectralPositionEmbedding,
    build_position_embedding,
    real_spherical_harmonics,
)
from s2forecast.nn.sprepe import SpRePE, householder_vectors, reflect_triplets
from s2forecast.ops import global_attention
from s2forecast.ops.quadrature_bias import log_quadrature_weights

KINDS = ["equiangular", "equiangular-midpoint", "legendre-gauss"]


def unit(n, seed=0):
    x = torch.randn(n, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return x / x.norm(dim=-1, keepdim=True)


def householder(p, n):
    """(3, 3) explicit R_n(p) = I - 2 v v^T."""
    v = householder_vectors(p[None], n)[0]
    return torch.eye(3, dtype=p.dtype) - 2.0 * torch.outer(v, v)


# --- the reflections ----------------------------------------------------------------------------
def test_reflection_is_orthogonal_improper_and_swaps_p_and_n():
    points, aux = unit(20, 1), unit(20, 2)
    for p, n in zip(points, aux, strict=True):
        r = householder(p, n)
        assert torch.allclose(r.T @ r, torch.eye(3, dtype=r.dtype), atol=1e-12)
        assert torch.det(r) == pytest.approx(-1.0, abs=1e-12)
        assert torch.allclose(r @ p, n, atol=1e-12) and torch.allclose(r @ n, p, atol=1e-12)


def test_relative_rotation_maps_pj_to_pi_about_the_plane_normal():
    """R_n(p_i)^T R_n(p_j): proper rotation, p_j -> p_i, axis = normal of the plane (n, p_i, p_j),
    angle = arc p_j -> p_i on that plane's circle."""
    n, pi, pj = unit(3, 5)
    rel = householder(pi, n).T @ householder(pj, n)
    assert torch.allclose(rel.T @ rel, torch.eye(3, dtype=rel.dtype), atol=1e-12)
    assert torch.det(rel) == pytest.approx(1.0, abs=1e-12)
    assert torch.allclose(rel @ pj, pi, atol=1e-12)
    normal = torch.linalg.cross(pi - n, pj - n)
    normal = normal / normal.norm()
    assert torch.allclose(rel @ normal, normal, atol=1e-12)  # the axis
    # rotation angle: the angle between p_i and p_j seen from the centre of the small circle
    centre = torch.dot(n, normal) * normal
    a, b = pi - centre, pj - centre
    arc = torch.atan2(torch.linalg.cross(a, b).norm(), torch.dot(a, b))
    angle = torch.acos(((torch.trace(rel) - 1) / 2).clamp(-1, 1))
    assert angle == pytest.approx(arc.item(), abs=1e-9)


def test_elementwise_form_equals_block_diagonal_product_and_eq5():
    grid = Grid(6, 12)
    pe = SpRePE(2, 12, grid, mask="none", aux_points="random", seed=3)
    x = torch.randn(1, 2, grid.npoints, 12, dtype=torch.float64)
    got = reflect_triplets(x, pe.vectors("q").double())
    points = grid.unit_vectors.reshape(-1, 3)
    aux = pe.aux.double()
    for head in range(2):
        for token in [0, 7, 40, grid.npoints - 1]:
            blocks = [householder(points[token], aux[head, t]) for t in range(4)]
            assert torch.allclose(got[0, head, token], torch.block_diag(*blocks) @ x[0, head, token], atol=1e-6)
            # eq. (5): diagonal, then the two cyclic shifts of the triplet
            v = pe.vectors("q").double()[head, token]  # (triplets, 3)
            t = x[0, head, token].view(4, 3)
            eq5 = (1 - 2 * v**2) * t - 2 * v * v.roll(-1, 1) * t.roll(-1, 1) - 2 * v * v.roll(-2, 1) * t.roll(-2, 1)
            assert torch.allclose(got[0, head, token], eq5.flatten(), atol=1e-6)


@pytest.mark.parametrize("mask", ["none", "fixed", "adaptive"])
def test_norms_preserved(mask):
    grid = Grid(8, 16, "legendre-gauss")
    pe = SpRePE(3, 16, grid, mask=mask)
    q, k = torch.randn(2, 2, 3, grid.npoints, 16).unbind(0)
    q2, k2 = pe(q, k)
    assert torch.allclose(q2.norm(dim=-1), q.norm(dim=-1), atol=1e-5)
    assert torch.allclose(k2.norm(dim=-1), k.norm(dim=-1), atol=1e-5)


def test_scores_invariant_under_a_joint_rotation():
    """Rotating every position and auxiliary point by Q conjugates each R_n(p_i)^T R_n(p_j) by Q,
    so the score is unchanged when the q/k triplets are rotated by Q as well, and the relative
    rotation's angle is unchanged on its own."""
    rot = random_rotation(generator=torch.Generator().manual_seed(0)).double()
    points, aux = unit(6, 11), unit(5, 12)  # 6 tokens, 5 triplets
    q, k = torch.randn(2, 6, 5, 3, dtype=torch.float64).unbind(0)

    def scores(points, aux, q, k):
        v = householder_vectors(points, aux)  # (triplets, tokens, 3)
        eq = reflect_triplets(q.flatten(-2), v.transpose(0, 1)).view_as(q)
        ek = reflect_triplets(k.flatten(-2), v.transpose(0, 1)).view_as(k)
        return torch.einsum("itc,jtc->ij", eq, ek)

    before = scores(points, aux, q, k)
    after = scores(points @ rot.T, aux @ rot.T, q @ rot.T, k @ rot.T)
    assert torch.allclose(before, after, atol=1e-10)
    rel = householder(points[0], aux[0]).T @ householder(points[1], aux[0])
    rel_rotated = householder(rot @ points[0], rot @ aux[0]).T @ householder(rot @ points[1], rot @ aux[0])
    assert torch.trace(rel).item() == pytest.approx(torch.trace(rel_rotated).item(), abs=1e-10)


# --- masks ----------------------------------------------------------------------------------------
def test_fixed_mask_touches_exactly_its_channels():
    grid = Grid(8, 16)
    pe = SpRePE(2, 32, grid)  # 7/8 of 32 = 28 -> 27 channels, 9 triplets
    assert pe.channels() == 27
    q, k = torch.randn(2, 1, 2, grid.npoints, 32).unbind(0)
    q2, _ = pe(q, k)
    assert torch.equal(q2[..., 27:], q[..., 27:])
    changed = (q2[..., :27] - q[..., :27]).abs().view(1, 2, grid.npoints, 9, 3).amax(dim=(0, 1, 2, 4))
    assert (changed > 1e-3).all()  # every claimed triplet moves somewhere


@pytest.mark.parametrize(("ratio", "head_dim", "channels"), [(0.7, 90, 63), (0.7, 180, 126), (0.35, 180, 63)])
def test_fixed_mask_takes_floor_of_ratio_times_head_dim(ratio, head_dim, channels):
    """0.7 * 90 is 62.99999999999999 in floating point: int() of it dropped a triplet (a review found it)."""
    assert SpRePE(1, head_dim, Grid(4, 8), ratio=ratio).channels() == channels


def test_adaptive_mask_follows_latitude():
    grid = Grid(17, 32)
    pe = SpRePE(1, 30, grid, mask="adaptive", ratio_min=0.2, ratio_max=1.0)
    q = torch.randn(1, 1, grid.npoints, 30)
    q2, _ = pe(q, q)
    moved = (q2 - q).abs().view(grid.nlat, grid.nlon, 10, 3).amax(dim=(1, 3)) > 1e-6  # (row, triplet)
    lat = torch.deg2rad(grid.lats_deg)
    expected = torch.floor((torch.cos(lat).clamp(min=0) * 1.0).clamp(0.2, 1.0) * 30 + 1e-9).long() // 3
    assert torch.equal(moved.sum(dim=1), expected)
    assert expected[grid.nlat // 2] == 10 and expected[0] == 2  # all triplets at the equator, 6 channels at the pole


def test_learnable_mask_interpolates():
    grid = Grid(6, 12)
    pe = SpRePE(1, 12, grid, mask="learnable")
    full = SpRePE(1, 12, grid, mask="none")
    q = torch.randn(1, 1, grid.npoints, 12)
    with torch.no_grad():
        pe.mask_logits_q.fill_(-100.0)
        assert torch.allclose(pe(q, q)[0], q)
        pe.mask_logits_q.fill_(100.0)
        assert torch.allclose(pe(q, q)[0], full(q, q)[0], atol=1e-6)
    pe.mask_logits_q.data.zero_()
    pe(q, q)[0].sum().backward()
    assert pe.mask_logits_q.grad.abs().sum() > 0


# --- auxiliary points -----------------------------------------------------------------------------
def test_point_equal_to_its_auxiliary_point_is_finite_and_deterministic():
    grid = Grid(8, 16, "legendre-gauss")
    pe = SpRePE(1, 6, grid, mask="none", aux_points="learnable")
    target = grid.unit_vectors.reshape(-1, 3)[37].float()
    with torch.no_grad():
        pe.aux[0, 0] = target
    q = torch.randn(1, 1, grid.npoints, 6, requires_grad=True)
    out, _ = pe(q, q)
    assert torch.isfinite(out).all()
    assert torch.equal(out, pe(q, q)[0])
    assert out[0, 0, 37, :3].norm().item() == pytest.approx(q[0, 0, 37, :3].norm().item(), rel=1e-5)
    out.sum().backward()
    assert torch.isfinite(pe.aux.grad).all() and torch.isfinite(q.grad).all()
    v = pe.vectors("q")[0, 37, 0]
    assert torch.dot(v, target).abs() < 1e-6  # the mirror contains p, so R p = p = n


@pytest.mark.parametrize("row", [0, -1])
def test_an_auxiliary_point_on_a_pole_gives_every_copy_of_the_pole_one_mirror(row):
    """The grid repeats a pole along its row; the south pole's copies differ by ~1e-16 in x and y (sin pi
    is not 0), which picked two different mirrors across the row: one physical point, two embeddings."""
    grid = Grid(9, 16)
    pe = SpRePE(1, 3, grid, mask="none", aux_points="learnable").double()
    pole = grid.unit_vectors.reshape(grid.nlat, grid.nlon, 3)[row, 0].double()
    with torch.no_grad():
        pe.aux[0, 0] = torch.tensor([0.0, 0.0, 1.0 if row == 0 else -1.0], dtype=torch.float64)
    assert torch.linalg.vector_norm(pe.aux[0, 0] - pole) < 1e-6  # the degenerate case
    q = torch.zeros(1, 1, grid.npoints, 3, dtype=torch.float64)
    q[..., 0] = 1.0  # one query everywhere
    out = pe(q, q)[0].view(grid.nlat, grid.nlon, 3)[row]
    torch.testing.assert_close(out, out[:1].expand_as(out), rtol=0, atol=1e-12)
    # and the mirror does not jump under a tiny move of the point (x = y = 0 tied, broken by 1e-16)
    points = torch.stack([pole, pole + 1e-12, torch.nn.functional.normalize(torch.tensor([1.0, 2.0, 3.0]), dim=0)])
    aux = pe.aux[0, 0].detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda a: householder_vectors(points.double(), a), (aux,), eps=1e-9, atol=1e-5)


def test_learnable_points_are_normalized_and_train():
    grid = Grid(6, 12)
    pe = SpRePE(2, 12, grid, aux_points="learnable")
    q = torch.randn(1, 2, grid.npoints, 12)
    before = pe(q, q)[0]
    with torch.no_grad():
        pe.aux.mul_(3.0)
    assert torch.allclose(pe(q, q)[0], before, atol=1e-6)
    pe(q, q)[0].square().sum().backward()
    assert pe.aux.grad.abs().sum() > 0


def test_auxiliary_point_strategies():
    grid = Grid(6, 12)
    aux = {name: SpRePE(2, 24, grid, aux_points=name, seed=1).aux for name in ["grid", "random", "identical"]}
    assert torch.allclose(aux["grid"].norm(dim=-1), torch.ones(2, 7))
    assert (aux["identical"] == aux["identical"][0, 0]).all()
    assert torch.unique(aux["grid"].reshape(-1, 3), dim=0).shape[0] == 14  # one point per head and triplet
    assert torch.equal(aux["random"], SpRePE(2, 24, grid, aux_points="random", seed=1).aux)
    assert not torch.equal(aux["random"], SpRePE(2, 24, grid, aux_points="random", seed=2).aux)
    # evenly spread: the closest pair of grid points is far from 0
    grid_points = aux["grid"].reshape(-1, 3).double()
    distance = geodesic_distance(grid_points[:, None], grid_points[None]) + 10 * torch.eye(14)
    assert distance.min() > 0.5


# --- inside the attention layers ------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("layer", ["global", "neighborhood"])
def test_sprepe_in_attention_layers_with_bf16_autocast(kind, layer):
    grid = Grid(8, 16, kind)
    pe = SpRePE(2, 16, grid)
    if layer == "global":
        module = S2Attention(32, 2, grid, position_embedding=pe)
    else:
        module = S2NeighborhoodAttention(32, 2, grid, position_embedding=pe)
    x = torch.randn(2, 32, *grid.shape, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = module(x)
    out.float().square().mean().backward()
    assert out.dtype == torch.bfloat16 and torch.isfinite(x.grad).all()
    plain = module(x)
    module.position_embedding = None
    assert not torch.allclose(plain, module(x))  # the embedding changes the layer


def test_sprepe_with_the_fused_kernel():
    """SpRePE acts on q/k before attention, so the fused kernel (interpreted on CPU) takes it as is."""
    grid = Grid(8, 16)
    module = S2NeighborhoodAttention(32, 2, grid, position_embedding=SpRePE(2, 16, grid), backend="reference")
    x = torch.randn(1, 32, *grid.shape)
    expected = module(x)
    module.backend = "fused"
    assert torch.allclose(module(x), expected, atol=1e-5)


def test_sprepe_between_grids():
    grid_in, grid_out = Grid(16, 32), Grid(8, 16, "legendre-gauss")
    pe = SpRePE(2, 8, grid_out, grid_in)
    module = S2Attention(16, 2, grid_in, grid_out, position_embedding=pe)
    assert module(torch.randn(1, 16, 8, 16), torch.randn(1, 16, 16, 32)).shape == (1, 16, 8, 16)
    assert {"v_q", "v_k"} <= set(dict(pe.named_buffers()))
    one = SpRePE(2, 8, grid_in)  # one grid: the keys' vectors are the queries' (stored once)
    assert "v_k" not in dict(one.named_buffers()) and one.vectors("k") is one.vectors("q")


def test_the_adaptive_masks_ratios_are_checked_for_that_mask_alone():
    """A review found: a fixed mask refused ratio_max 0.2 for exceeding ratio_min, options it never uses."""
    assert SpRePE(2, 24, Grid(6, 12), mask="fixed", ratio_max=0.2).channels() == 21
    with pytest.raises(ValueError, match=r"^ratio_min \(0.5\) must not exceed ratio_max \(0.2\)$"):
        SpRePE(2, 24, Grid(6, 12), mask="adaptive", ratio_max=0.2)


@pytest.mark.parametrize("built_on", [Grid(9, 16, "legendre-gauss"), Grid(16, 9)])
def test_an_embedding_built_for_other_positions_is_refused(built_on):
    """A review found: an embedding of another grid with as many points ran, the queries embedded at
    the wrong positions (the forward checks only the point count)."""
    grid = Grid(9, 16)
    message = rf"^SpRePE is built for queries on {re.escape(str(built_on))} and keys on .* but this (\w+ )?attention"
    for layer in (S2Attention, S2NeighborhoodAttention):
        with pytest.raises(ValueError, match=message):
            layer(16, 2, grid, position_embedding=SpRePE(2, 8, built_on))
    with pytest.raises(ValueError, match=r"^SpRePE is built for queries on .*\(nlat=16, nlon=32.* keys on .*nlat=8"):
        S2Attention(16, 2, Grid(16, 32), Grid(8, 16), position_embedding=SpRePE(2, 8, Grid(16, 32), Grid(8, 16)))


# --- baselines ------------------------------------------------------------------------------------
def test_rope_scores_depend_only_on_index_offsets():
    grid = Grid(6, 10)
    rope = AxialRotaryEmbedding(8, grid)
    q = torch.randn(8).expand(1, 1, grid.npoints, 8)
    k = torch.randn(8).expand(1, 1, grid.npoints, 8)
    q2, k2 = rope(q, k)
    scores = (q2[0, 0] @ k2[0, 0].T).view(*grid.shape, *grid.shape)
    for (r1, c1, r2, c2), shift in [((0, 0, 1, 2), (3, 5)), ((2, 7, 4, 1), (1, 2)), ((5, 9, 4, 7), (-4, -6))]:
        a = scores[r1, c1, r2, c2]
        b = scores[r1 + shift[0], c1 + shift[1], r2 + shift[0], c2 + shift[1]]
        assert a.item() == pytest.approx(b.item(), abs=1e-5)
    assert torch.allclose(q2.norm(dim=-1), q.norm(dim=-1), atol=1e-5)


def test_spectral_embedding_channels_are_the_named_harmonics():
    grid = Grid(16, 32, "legendre-gauss")
    harmonics = real_spherical_harmonics(grid, 25)
    w = grid.quadrature_weights.reshape(-1)
    flat = harmonics.reshape(25, -1)
    assert torch.allclose((flat * w) @ flat.T, torch.eye(25, dtype=torch.float64), atol=1e-12)
    coeffs = RealSHT(16, 32, grid="legendre-gauss")(harmonics.float()).abs()  # (channel, l, m)
    for c in range(25):
        degree = math.isqrt(c)
        order = abs(c - degree * degree - degree)
        assert coeffs[c].argmax() == degree * coeffs.shape[-1] + order, c
    embedding = SpectralPositionEmbedding(25, Grid(16, 32, "equiangular-midpoint")).embedding
    assert torch.allclose(embedding.abs().amax(dim=(1, 2)), torch.ones(25))


def test_spectral_embedding_channels_that_vanish_on_the_grid_are_zero():
    """sin(8 lon) is zero at 16 longitudes (channel 64: l = 8, m = -8): a zero channel, not its
    round-off (1e-15) scaled to max 1; every other channel peaks at 1."""
    grid = Grid(8, 16)
    raw = real_spherical_harmonics(grid, 65).abs().amax(dim=(1, 2))
    assert raw[64] < 1e-12
    embedding = SpectralPositionEmbedding(65, grid).embedding
    assert torch.equal(embedding[64], torch.zeros(8, 16))
    assert torch.allclose(embedding[:64].abs().amax(dim=(1, 2)), torch.ones(64))


def test_relative_position_bias_table_lookup():
    grid = Grid(4, 6)
    rpe = RelativePositionBias(2, grid)
    with torch.no_grad():
        rpe.table.copy_(torch.randn_like(rpe.table))
    bias = rpe().view(2, 4, 6, 4, 6)
    assert bias[1, 3, 5, 0, 0] == rpe.table[1, 3 + 3, 5 + 5]
    assert bias[0, 0, 1, 2, 4] == rpe.table[0, -2 + 3, -3 + 5]
    assert torch.equal(bias[:, 1, 1, 2, 2], bias[:, 2, 3, 3, 4])


def test_alibi_is_minus_slope_times_geodesic_distance():
    grid = Grid(6, 12, "legendre-gauss")
    alibi = GeodesicALiBi(4, grid)
    bias = alibi()
    points = grid.unit_vectors.reshape(-1, 3)
    distance = geodesic_distance(points[:, None], points[None])
    slopes = 2.0 ** (-8.0 * torch.arange(1, 5) / 4) / grid.lat_spacing
    assert torch.allclose(bias, (-slopes[:, None, None] * distance).float(), atol=1e-5)
    assert torch.all(bias.diagonal(dim1=1, dim2=2).abs() < 1e-5)


@pytest.mark.parametrize("name", ["rpe", "alibi"])
def test_score_biases_in_global_attention_equal_dense_sdpa(name):
    grid = Grid(6, 12)
    pe = build_position_embedding(name, grid=grid, channels=16, num_heads=2, head_dim=8)
    if name == "rpe":
        with torch.no_grad():
            pe.table.normal_()
    q, k, v = torch.randn(3, 1, 2, grid.npoints, 8).unbind(0)
    bias = pe()
    expected = F.scaled_dot_product_attention(
        q, k, v, attn_mask=log_quadrature_weights(grid, "cpu", torch.float32) + bias
    )
    assert torch.allclose(global_attention(q, k, v, grid, bias=bias), expected, atol=1e-5)
    module = S2Attention(16, 2, grid, position_embedding=pe)
    module(torch.randn(1, 16, *grid.shape)).sum().backward()
    if name == "rpe":
        assert pe.table.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="neighborhood attention does not"):
        S2NeighborhoodAttention(16, 2, grid, position_embedding=pe)


# --- precision --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("aux_points", "mask"), [("grid", "fixed"), ("random", "adaptive"), ("learnable", "none")])
def test_sprepe_in_float64_is_exact(aux_points, mask):
    """A float64 module reflects float64 queries exactly: explicit 3x3 matrices
    I - 2 w w^T, w = (n - p) / |n - p|, built here in float64 from the grid's positions."""
    grid = Grid(4, 8, "legendre-gauss")
    pe = SpRePE(2, 14, grid, mask=mask, aux_points=aux_points, ratio_min=0.3)
    assert pe.channels() == 12
    assert next(b for name, b in pe.named_buffers() if name in ("v_q", "points_q")).dtype == torch.float32
    pe = pe.double()
    q = torch.randn(1, 2, grid.npoints, 14, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    got = pe.embed(q, "q")
    points = grid.unit_vectors.reshape(-1, 3)
    aux = pe.aux.detach() / pe.aux.detach().norm(dim=-1, keepdim=True)  # (heads, 4, 3)
    w = aux[:, None] - points[None, :, None]  # (heads, N, triplets, 3)
    matrices = (
        torch.eye(3, dtype=torch.float64) - 2 * w[..., :, None] * w[..., None, :] / w.square().sum(-1)[..., None, None]
    )
    expected = torch.einsum("hptab,hptb->hpta", matrices, q[0, :, :, :12].unflatten(-1, (4, 3)))
    if mask == "adaptive":  # triplets beyond a token's count stay as they are
        count = torch.floor((torch.cos(torch.deg2rad(grid.lats_deg)).clamp(0.3, 1.0)) * 14 + 1e-9).long() // 3
        active = torch.arange(4)[None, :] < count.repeat_interleave(grid.nlon)[:, None]  # (N, triplets)
        expected = torch.where(active[None, :, :, None], expected, q[0, :, :, :12].unflatten(-1, (4, 3)))
    torch.testing.assert_close(got[0, :, :, :12], expected.flatten(-2), rtol=0, atol=1e-12)
    assert torch.equal(got[..., 12:], q[..., 12:])


def test_rope_in_float64_is_exact():
    """Pairs rotated as complex numbers by exp(i * index * base^(-k / quarter)), here in float64."""
    grid = Grid(3, 5)
    rope = AxialRotaryEmbedding(8, grid, base=10.0)
    assert rope.cos.dtype == torch.float32
    rope = rope.double()
    q = torch.randn(1, 1, grid.npoints, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    rows, cols = torch.meshgrid(
        torch.arange(3.0, dtype=torch.float64), torch.arange(5.0, dtype=torch.float64), indexing="ij"
    )
    freqs = 10.0 ** -torch.tensor([0.0, 0.5], dtype=torch.float64)
    angles = torch.cat([rows.reshape(-1, 1) * freqs, cols.reshape(-1, 1) * freqs], dim=-1)  # (N, 4)
    expected = torch.view_as_real(
        torch.view_as_complex(q.unflatten(-1, (4, 2))) * torch.polar(torch.ones_like(angles), angles)
    )
    torch.testing.assert_close(rope(q, q)[0], expected.flatten(-2), rtol=0, atol=1e-12)


GEOMETRIC_MODULES = {
    "sprepe": lambda grid: SpRePE(2, 12, grid, mask="adaptive", aux_points="random"),
    "sprepe-learnable": lambda grid: SpRePE(2, 12, grid, aux_points="learnable"),
    "rope": lambda grid: AxialRotaryEmbedding(8, grid),
    "spectral-ape": lambda grid: SpectralPositionEmbedding(9, grid),
    "alibi": lambda grid: GeodesicALiBi(3, grid),
    "harmonics": lambda grid: SphericalHarmonicAnalysis(grid),
}


@pytest.mark.parametrize("name", GEOMETRIC_MODULES)
def test_geometric_buffers_are_rounded_once_to_the_module_dtype(name):
    """float32 by default (what float32 and bf16 training read, no cast per forward); converted
    to float64 they equal the module built in float64, not widened float32 roundings; to bf16,
    that rounded once."""
    grid = Grid(6, 12, "equiangular-midpoint")
    build = GEOMETRIC_MODULES[name]
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        exact = dict(build(grid).named_buffers())
    finally:
        torch.set_default_dtype(default)
    module = build(grid)
    buffers = {name: b for name, b in module.named_buffers() if name in exact and not name.startswith("active")}
    assert buffers and all(b.dtype == torch.float32 for b in buffers.values())
    for dtype in (torch.float64, torch.bfloat16, torch.float32, torch.float64):
        module.to(dtype)
        for buffer_name in buffers:
            got = dict(module.named_buffers())[buffer_name]
            assert got.dtype == dtype
            assert torch.equal(got, exact[buffer_name].to(dtype)), (buffer_name, dtype)


@pytest.mark.parametrize("name", ["sprepe", "rope"])
def test_attention_with_a_qk_embedding_passes_gradcheck_in_float64(name):
    grid = Grid(3, 6)
    pe = build_position_embedding(name, grid=grid, channels=8, num_heads=2, head_dim=4)
    layer = S2Attention(8, 2, grid, position_embedding=pe).double()
    x = torch.randn(1, 8, *grid.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert torch.autograd.gradcheck(layer, (x.requires_grad_(),))


@pytest.mark.parametrize("name", POSITION_EMBEDDINGS)
def test_every_embedding_is_built_by_name(name):
    grid = Grid(8, 16)
    pe = build_position_embedding(name, grid=grid, channels=32, num_heads=2, head_dim=16)
    if name == "none":
        assert pe is None
        return
    x = torch.randn(1, 32, *grid.shape)
    if pe.acts_on == "tokens":
        assert pe(x).shape == x.shape
        with pytest.raises(ValueError, match="added to the model's tokens"):
            S2Attention(32, 2, grid, position_embedding=pe)
    else:
        assert S2Attention(32, 2, grid, position_embedding=pe)(x).shape == x.shape


def test_factory_errors():
    grid = Grid(8, 16)
    with pytest.raises(ValueError, match="must be one of"):
        build_position_embedding("sinusoidal", grid=grid, channels=8, num_heads=2, head_dim=4)
    with pytest.raises(ValueError, match="takes options"):
        build_position_embedding("rope", grid=grid, channels=8, num_heads=2, head_dim=4, ratio=0.5)
    with pytest.raises(ValueError, match="mask must be one of"):
        build_position_embedding("sprepe", grid=grid, channels=8, num_heads=2, head_dim=12, mask="half")
    with pytest.raises(ValueError, match="divisible by 4"):
        build_position_embedding("rope", grid=grid, channels=8, num_heads=2, head_dim=6)
    with pytest.raises(ValueError, match="no channel triplet"):
        SpRePE(2, 2, grid)
