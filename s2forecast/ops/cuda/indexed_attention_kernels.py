"""Triton kernels for quadrature-weighted attention of query tiles to listed keys, fwd and bwd.

Ball sparse attention's three branches are all of one form: the queries of a tile (a ball, a
query group, or all queries) attend to a list of keys (the ball's own slots, its coarse tokens,
the tokens of its selected blocks) with logits scale * q.k + log w_key. These kernels read the
keys through the list instead of gathering copies of K and V (which the PyTorch path
materializes: 3.6x K and V for the multi-level coarse tokens at W = 256, 4x for the selection,
and as much again for their gradients).

Layout: q (batch, heads, num_tiles * rows_per_tile, head_dim), k and v (batch, heads, num_keys,
head_dim[_v]) with arbitrary strides; KEY_INDEX (batch*heads or 1, num_tiles, list_len) int32,
entries < 0 skipped; LOG2_W (num_keys,) float32 log2 of the key weights (-inf: never attended);
LSE and DELTA (batch*heads, num_queries) float32.

A program owns ``BLOCK_M`` query rows of one tile for one (batch, head) and walks the tile's
list in blocks of ``BLOCK_N``. Scores are in log2 units (exp2 softmax). The forward is an online
softmax that saves the log-sum-exp; the backward recomputes the probabilities from it
(FlashAttention-2) and accumulates dQ in registers, dK and dV with fp32 atomic adds, since any
key may be listed by many tiles (so dK and dV are not bit-reproducible run to run).
"""

import triton
import triton.language as tl


@triton.jit
def _tile_rows(tile_block, rows_per_tile, BLOCK_M: tl.constexpr):
    """Query rows of this program and their validity."""
    blocks_per_tile = tl.cdiv(rows_per_tile, BLOCK_M)
    tile = tile_block // blocks_per_tile
    first = (tile_block % blocks_per_tile) * BLOCK_M
    offs = first + tl.arange(0, BLOCK_M)
    # int64 rows: row * stride can pass 2**31 for strided views of large grids
    return tile, (tile * rows_per_tile + offs).to(tl.int64), offs < rows_per_tile


@triton.jit
def indexed_forward_kernel(
    Q, K, V, OUT, LSE, KEY_INDEX, LOG2_W,
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_on, stride_od,
    stride_ib, stride_it,
    num_heads, num_queries, rows_per_tile, list_len, scale_log2,
    HEAD_DIM: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    tile, query, m_valid = _tile_rows(tl.program_id(0), rows_per_tile, BLOCK_M)
    bh = tl.program_id(1)
    b = (bh // num_heads).to(tl.int64)  # int64: batch offsets can pass 2**31 elements
    h = (bh % num_heads).to(tl.int64)
    Q += b * stride_qb + h * stride_qh
    K += b * stride_kb + h * stride_kh
    V += b * stride_vb + h * stride_vh
    KEY_INDEX += bh.to(tl.int64) * stride_ib + tile.to(tl.int64) * stride_it

    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    q = tl.load(
        Q + query[:, None] * stride_qn + offs_d[None, :] * stride_qd,
        mask=m_valid[:, None] & (offs_d[None, :] < HEAD_DIM),
        other=0.0,
    )
    # finite start so that a block without keys gives exp2(-inf) = 0, not NaN
    m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    for n0 in range(0, list_len, BLOCK_N):
        key = tl.load(KEY_INDEX + n0 + offs_n, mask=n0 + offs_n < list_len, other=-1)
        n_valid = key >= 0
        key = tl.where(n_valid, key, 0).to(tl.int64)
        k = tl.load(
            K + key[None, :] * stride_kn + offs_d[:, None] * stride_kd,
            mask=n_valid[None, :] & (offs_d[:, None] < HEAD_DIM),
            other=0.0,
        )
        log2_w = tl.load(LOG2_W + key, mask=n_valid, other=float("-inf"))
        s = tl.dot(q, k, input_precision=PRECISION) * scale_log2 + log2_w[None, :]
        s = tl.where(n_valid[None, :], s, float("-inf"))
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

    # a row without any listed key of positive weight gets 0 (the callers guarantee there is one)
    l_safe = tl.where(l_i > 0, l_i, 1.0)
    OUT += b * stride_ob + h * stride_oh
    tl.store(
        OUT + query[:, None] * stride_on + offs_dv[None, :] * stride_od,
        (acc / l_safe[:, None]).to(OUT.dtype.element_ty),
        mask=m_valid[:, None] & (offs_dv[None, :] < HEAD_DIM_V),
    )
    tl.store(LSE + bh.to(tl.int64) * num_queries + query, m_i + tl.log2(l_safe), mask=m_valid)


@triton.jit
def indexed_backward_kernel(
    Q, K, V, DO, DQ, DK, DV, LSE, OUT, KEY_INDEX, LOG2_W,
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_on, stride_od,
    stride_yb, stride_yh, stride_yn, stride_yd,
    stride_ib, stride_it,
    num_heads, num_queries, num_keys, rows_per_tile, list_len, scale_log2, scale,
    HEAD_DIM: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """dQ (stored with q's strides) and dK, dV added atomically into contiguous float32
    (batch*heads, num_keys, head_dim[_v]) buffers. DO has strides stride_o*, the forward's
    output OUT stride_y*."""
    tile, query, m_valid = _tile_rows(tl.program_id(0), rows_per_tile, BLOCK_M)
    bh = tl.program_id(1)
    b = (bh // num_heads).to(tl.int64)
    h = (bh % num_heads).to(tl.int64)
    Q += b * stride_qb + h * stride_qh
    DQ += b * stride_qb + h * stride_qh
    K += b * stride_kb + h * stride_kh
    V += b * stride_vb + h * stride_vh
    DO += b * stride_ob + h * stride_oh
    OUT += b * stride_yb + h * stride_yh
    DK += bh.to(tl.int64) * num_keys * HEAD_DIM
    DV += bh.to(tl.int64) * num_keys * HEAD_DIM_V
    KEY_INDEX += bh.to(tl.int64) * stride_ib + tile.to(tl.int64) * stride_it

    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    q_mask = m_valid[:, None] & (offs_d[None, :] < HEAD_DIM)
    q = tl.load(Q + query[:, None] * stride_qn + offs_d[None, :] * stride_qd, mask=q_mask, other=0.0)
    do_mask = m_valid[:, None] & (offs_dv[None, :] < HEAD_DIM_V)
    do = tl.load(DO + query[:, None] * stride_on + offs_dv[None, :] * stride_od, mask=do_mask, other=0.0)
    o = tl.load(OUT + query[:, None] * stride_yn + offs_dv[None, :] * stride_yd, mask=do_mask, other=0.0)
    lse = tl.load(LSE + bh.to(tl.int64) * num_queries + query, mask=m_valid, other=0.0)
    delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), axis=1)  # rowsum(dO * O), from the tiles loaded

    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for n0 in range(0, list_len, BLOCK_N):
        key = tl.load(KEY_INDEX + n0 + offs_n, mask=n0 + offs_n < list_len, other=-1)
        n_valid = key >= 0
        key = tl.where(n_valid, key, 0).to(tl.int64)
        k_mask = n_valid[:, None] & (offs_d[None, :] < HEAD_DIM)
        v_mask = n_valid[:, None] & (offs_dv[None, :] < HEAD_DIM_V)
        k = tl.load(K + key[:, None] * stride_kn + offs_d[None, :] * stride_kd, mask=k_mask, other=0.0)
        v = tl.load(V + key[:, None] * stride_vn + offs_dv[None, :] * stride_vd, mask=v_mask, other=0.0)
        log2_w = tl.load(LOG2_W + key, mask=n_valid, other=float("-inf"))
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2 + log2_w[None, :]
        inside = m_valid[:, None] & n_valid[None, :]
        p_ij = tl.where(inside, tl.exp2(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p_ij * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
        dk = tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION) * scale
        dv = tl.dot(tl.trans(p_ij.to(do.dtype)), do, input_precision=PRECISION)
        tl.atomic_add(DK + key[:, None] * HEAD_DIM + offs_d[None, :], dk, mask=k_mask, sem="relaxed")
        tl.atomic_add(DV + key[:, None] * HEAD_DIM_V + offs_dv[None, :], dv, mask=v_mask, sem="relaxed")

    tl.store(DQ + query[:, None] * stride_qn + offs_d[None, :] * stride_qd, (dq * scale).to(DQ.dtype.element_ty),
             mask=q_mask)  # fmt: skip
