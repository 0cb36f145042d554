"""Triton kernels for spherical neighborhood attention, eq. (27), forward and backward.

Layout: q, k, v, out are (batch, heads, nlat*nlon, head_dim) with arbitrary strides; the
log-sum-exp and Delta = rowsum(dO * OUT) are (batch*heads, nlat*nlon) float32.

A program owns one tile of ``BLOCK_M`` consecutive longitudes of one query row (forward, dQ)
or ``BLOCK_N`` longitudes of one key row (dK/dV), for one (batch, head). It walks the list of
partner rows of its row; in partner row r the disk of the point at column w is the wrapped
arc w-hw..w+hw (hw = half width, a property of the row pair), so the partners of a tile are
one contiguous wrapped span of ``tile + 2*hw`` columns, loaded in blocks and scored with
``tl.dot``. A per-element test |u - w| <= hw keeps exactly the disk; rows the disk covers
whole (2*hw+1 >= nlon) are loaded column 0..nlon-1 without a test. For one query the columns
w-hw..w+hw are distinct modulo nlon because 2*hw+1 <= nlon, so a span longer than the row
never counts a key twice.

Scores are kept in log2 units: s = (q . k) * scale * log2(e) + log2(w_row), so softmax uses
exp2; the stored log-sum-exp is in the same units. The forward uses an online softmax
(FlashAttention), the backward recomputes the probabilities from the log-sum-exp
(FlashAttention-2): one query-stationary kernel for dQ, one key-stationary kernel for dK and
dV (the partner table is transposed for it), no atomics, so results are deterministic.
Rows are visited heaviest first (``ROW_ORDER``) so the polar rows, which can hold 100x the
keys of an equatorial row, do not finish last.
"""

import triton
import triton.language as tl


@triton.jit
def _span(tile_start, tile_len, hw, nlon):
    """First unwrapped column, column count and whole-row flag of a tile's partners in a row."""
    whole = 2 * hw + 1 >= nlon
    start = tl.where(whole, 0, tile_start - hw)
    length = tl.where(whole, nlon, tile_len + 2 * hw)
    return start, length, whole


@triton.jit
def neighborhood_forward_kernel(
    Q, K, V, OUT, LSE,
    ROW_ORDER, PARTNER_ROWS, PARTNER_WIDTHS, PARTNER_COUNT, LOG2_W,
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_on, stride_od,
    num_heads, nlon, npoints, max_partners, scale_log2,
    HEAD_DIM: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    tiles_per_row = tl.cdiv(nlon, BLOCK_M)
    tile = tl.program_id(0)
    bh = tl.program_id(1)
    row = tl.load(ROW_ORDER + tile // tiles_per_row)
    w0 = (tile % tiles_per_row) * BLOCK_M
    tile_len = tl.minimum(nlon - w0, BLOCK_M)
    b = (bh // num_heads).to(tl.int64)  # int64: batch offsets can pass 2**31 elements
    h = (bh % num_heads).to(tl.int64)
    Q += b * stride_qb + h * stride_qh
    K += b * stride_kb + h * stride_kh
    V += b * stride_vb + h * stride_vh

    offs_m = w0 + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    m_valid = offs_m < nlon
    q = tl.load(
        Q + (row * nlon + offs_m)[:, None] * stride_qn + offs_d[None, :] * stride_qd,
        mask=m_valid[:, None] & (offs_d[None, :] < HEAD_DIM),
        other=0.0,
    )

    # finite start so that a block with no key for some query gives exp2(-inf) = 0, not NaN
    m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    for p in range(0, tl.load(PARTNER_COUNT + row)):
        key_row = tl.load(PARTNER_ROWS + row * max_partners + p)
        hw = tl.load(PARTNER_WIDTHS + row * max_partners + p)
        log2_w = tl.load(LOG2_W + key_row)
        start, length, whole = _span(w0, tile_len, hw, nlon)
        for n0 in range(0, length, BLOCK_N):
            u = start + n0 + offs_n  # unwrapped key column, >= -nlon
            n_valid = n0 + offs_n < length
            key = key_row * nlon + (u + nlon) % nlon
            k = tl.load(
                K + key[None, :] * stride_kn + offs_d[:, None] * stride_kd,
                mask=n_valid[None, :] & (offs_d[:, None] < HEAD_DIM),
                other=0.0,
            )
            s = tl.dot(q, k, input_precision=PRECISION) * scale_log2 + log2_w
            inside = n_valid[None, :] & (whole | (tl.abs(u[None, :] - offs_m[:, None]) <= hw))
            s = tl.where(inside, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.exp2(m_i - m_new)
            p_ij = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p_ij, 1)
            v = tl.load(
                V + key[:, None] * stride_vn + offs_dv[None, :] * stride_vd,
                mask=n_valid[:, None] & (offs_dv[None, :] < HEAD_DIM_V),
                other=0.0,
            )
            acc = acc * alpha[:, None] + tl.dot(p_ij.to(v.dtype), v, input_precision=PRECISION)
            m_i = m_new

    # every query is its own neighbor, so l_i > 0 on valid rows; padded rows are not stored
    l_safe = tl.where(m_valid, l_i, 1.0)
    out = acc / l_safe[:, None]
    OUT += b * stride_ob + h * stride_oh
    tl.store(
        OUT + (row * nlon + offs_m)[:, None] * stride_on + offs_dv[None, :] * stride_od,
        out.to(OUT.dtype.element_ty),
        mask=m_valid[:, None] & (offs_dv[None, :] < HEAD_DIM_V),
    )
    tl.store(LSE + bh.to(tl.int64) * npoints + row * nlon + offs_m, m_i + tl.log2(l_safe), mask=m_valid)


@triton.jit
def neighborhood_backward_query_kernel(
    Q, K, V, DO, DQ, LSE, DELTA, OUT,
    ROW_ORDER, PARTNER_ROWS, PARTNER_WIDTHS, PARTNER_COUNT, LOG2_W,
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_on, stride_od,
    stride_gqb, stride_gqh, stride_gqn, stride_gqd,
    stride_yb, stride_yh, stride_yn, stride_yd,
    num_heads, nlon, npoints, max_partners, scale_log2, scale,
    HEAD_DIM: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """dQ, and DELTA = rowsum(dO * O) (float32, (batch*heads, N)) for the key kernel, which runs
    after this one; DO has strides stride_o*, DQ stride_gq*, the forward's output OUT stride_y*."""
    tiles_per_row = tl.cdiv(nlon, BLOCK_M)
    tile = tl.program_id(0)
    bh = tl.program_id(1)
    row = tl.load(ROW_ORDER + tile // tiles_per_row)
    w0 = (tile % tiles_per_row) * BLOCK_M
    tile_len = tl.minimum(nlon - w0, BLOCK_M)
    b = (bh // num_heads).to(tl.int64)  # int64: batch offsets can pass 2**31 elements
    h = (bh % num_heads).to(tl.int64)
    Q += b * stride_qb + h * stride_qh
    DQ += b * stride_gqb + h * stride_gqh
    K += b * stride_kb + h * stride_kh
    V += b * stride_vb + h * stride_vh
    DO += b * stride_ob + h * stride_oh
    OUT += b * stride_yb + h * stride_yh

    offs_m = w0 + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    m_valid = offs_m < nlon
    query = row * nlon + offs_m
    q_mask = m_valid[:, None] & (offs_d[None, :] < HEAD_DIM)
    q = tl.load(Q + query[:, None] * stride_qn + offs_d[None, :] * stride_qd, mask=q_mask, other=0.0)
    do_mask = m_valid[:, None] & (offs_dv[None, :] < HEAD_DIM_V)
    do = tl.load(DO + query[:, None] * stride_on + offs_dv[None, :] * stride_od, mask=do_mask, other=0.0)
    o = tl.load(OUT + query[:, None] * stride_yn + offs_dv[None, :] * stride_yd, mask=do_mask, other=0.0)
    lse = tl.load(LSE + bh.to(tl.int64) * npoints + query, mask=m_valid, other=0.0)
    # one pass over dO and O here instead of three over float32 copies before the kernels
    delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), axis=1)
    tl.store(DELTA + bh.to(tl.int64) * npoints + query, delta, mask=m_valid)

    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for p in range(0, tl.load(PARTNER_COUNT + row)):
        key_row = tl.load(PARTNER_ROWS + row * max_partners + p)
        hw = tl.load(PARTNER_WIDTHS + row * max_partners + p)
        log2_w = tl.load(LOG2_W + key_row)
        start, length, whole = _span(w0, tile_len, hw, nlon)
        for n0 in range(0, length, BLOCK_N):
            u = start + n0 + offs_n
            n_valid = n0 + offs_n < length
            key = key_row * nlon + (u + nlon) % nlon
            k = tl.load(
                K + key[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                mask=n_valid[:, None] & (offs_d[None, :] < HEAD_DIM),
                other=0.0,
            )
            v = tl.load(
                V + key[:, None] * stride_vn + offs_dv[None, :] * stride_vd,
                mask=n_valid[:, None] & (offs_dv[None, :] < HEAD_DIM_V),
                other=0.0,
            )
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2 + log2_w
            inside = m_valid[:, None] & n_valid[None, :] & (whole | (tl.abs(u[None, :] - offs_m[:, None]) <= hw))
            p_ij = tl.where(inside, tl.exp2(s - lse[:, None]), 0.0)
            dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
            ds = p_ij * (dp - delta[:, None])
            dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)

    tl.store(DQ + query[:, None] * stride_gqn + offs_d[None, :] * stride_gqd, (dq * scale).to(DQ.dtype.element_ty),
             mask=q_mask)  # fmt: skip


@triton.jit
def neighborhood_backward_key_kernel(
    Q, K, V, DO, DK, DV, LSE, DELTA,
    ROW_ORDER, PARTNER_ROWS, PARTNER_WIDTHS, PARTNER_COUNT, LOG2_W,
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_on, stride_od,
    stride_gkb, stride_gkh, stride_gkn, stride_gkd,
    stride_gvb, stride_gvh, stride_gvn, stride_gvd,
    num_heads, nlon, npoints, max_partners, scale_log2, scale,
    HEAD_DIM: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """dK and dV; the partner table is the transposed one (query rows of each key row).
    DK and DV have their own strides (stride_gk*, stride_gv*)."""
    tiles_per_row = tl.cdiv(nlon, BLOCK_N)
    tile = tl.program_id(0)
    bh = tl.program_id(1)
    row = tl.load(ROW_ORDER + tile // tiles_per_row)
    j0 = (tile % tiles_per_row) * BLOCK_N
    tile_len = tl.minimum(nlon - j0, BLOCK_N)
    b = (bh // num_heads).to(tl.int64)  # int64: batch offsets can pass 2**31 elements
    h = (bh % num_heads).to(tl.int64)
    Q += b * stride_qb + h * stride_qh
    K += b * stride_kb + h * stride_kh
    DK += b * stride_gkb + h * stride_gkh
    V += b * stride_vb + h * stride_vh
    DV += b * stride_gvb + h * stride_gvh
    DO += b * stride_ob + h * stride_oh

    offs_n = j0 + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    n_valid = offs_n < nlon
    key = row * nlon + offs_n
    k_mask = n_valid[:, None] & (offs_d[None, :] < HEAD_DIM)
    v_mask = n_valid[:, None] & (offs_dv[None, :] < HEAD_DIM_V)
    k = tl.load(K + key[:, None] * stride_kn + offs_d[None, :] * stride_kd, mask=k_mask, other=0.0)
    v = tl.load(V + key[:, None] * stride_vn + offs_dv[None, :] * stride_vd, mask=v_mask, other=0.0)
    log2_w = tl.load(LOG2_W + row)

    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], tl.float32)
    for p in range(0, tl.load(PARTNER_COUNT + row)):
        query_row = tl.load(PARTNER_ROWS + row * max_partners + p)
        hw = tl.load(PARTNER_WIDTHS + row * max_partners + p)
        start, length, whole = _span(j0, tile_len, hw, nlon)
        for m0 in range(0, length, BLOCK_M):
            u = start + m0 + offs_m
            m_valid = m0 + offs_m < length
            query = query_row * nlon + (u + nlon) % nlon
            q = tl.load(
                Q + query[:, None] * stride_qn + offs_d[None, :] * stride_qd,
                mask=m_valid[:, None] & (offs_d[None, :] < HEAD_DIM),
                other=0.0,
            )
            do = tl.load(
                DO + query[:, None] * stride_on + offs_dv[None, :] * stride_od,
                mask=m_valid[:, None] & (offs_dv[None, :] < HEAD_DIM_V),
                other=0.0,
            )
            lse = tl.load(LSE + bh.to(tl.int64) * npoints + query, mask=m_valid, other=0.0)
            delta = tl.load(DELTA + bh.to(tl.int64) * npoints + query, mask=m_valid, other=0.0)
            s_t = tl.dot(k, tl.trans(q), input_precision=PRECISION) * scale_log2 + log2_w  # (keys, queries)
            inside = n_valid[:, None] & m_valid[None, :] & (whole | (tl.abs(u[None, :] - offs_n[:, None]) <= hw))
            p_t = tl.where(inside, tl.exp2(s_t - lse[None, :]), 0.0)
            dv += tl.dot(p_t.to(do.dtype), do, input_precision=PRECISION)
            dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
            ds_t = p_t * (dp_t - delta[None, :])
            dk += tl.dot(ds_t.to(q.dtype), q, input_precision=PRECISION)

    tl.store(DK + key[:, None] * stride_gkn + offs_d[None, :] * stride_gkd, (dk * scale).to(DK.dtype.element_ty),
             mask=k_mask)  # fmt: skip
    tl.store(DV + key[:, None] * stride_gvn + offs_dv[None, :] * stride_gvd, dv.to(DV.dtype.element_ty),
             mask=v_mask)  # fmt: skip


__all__ = [
    "neighborhood_backward_key_kernel",
    "neighborhood_backward_query_kernel",
    "neighborhood_forward_kernel",
]
