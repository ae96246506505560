#!/usr/bin/env python3
"""Lane-level model of kernels/flash_attention.cu's register kernels, for checking their index logic
without a GPU.

block_forward_registers_kernel and block_backward_registers_kernel are written out here statement by
statement over the 32 lanes of each warp, with mma.m16n8k16's fragment layouts (PTX ISA, "Matrix
Fragments for mma.m16n8k16": A, B and C as the lanes hold them; ldmatrix's results taken as those
layouts, which the shared-memory kernels' element-by-element loads confirmed on an H200), in float64
without bf16 rounding, and compared with plain causal attention (GQA, dropout, padded head_dim, and a
context-parallel rank's two blocks). What it checks: which score, probability, key and query each
register holds, the C-to-A fragment reuse, the masks and the running statistics. What it cannot: the
CUDA itself (barriers, shared-memory layout, alignment), which only a GPU run of
GpuBackendOps.FlashBlocksOnOneRankAndAContextParallelRank checks. Keep it in step with the kernels.

    python3 scripts/flash_fragments_emu.py      # needs numpy; exits 1 on a difference over 1e-12
"""
import numpy as np
LANES = np.arange(32)
G = LANES // 4          # quad_row
T2 = (LANES % 4) * 2

def load_a(Amat):  # Amat 16x16 -> regs [32][4][2]
    r = np.zeros((32, 4, 2))
    r[:, 0] = np.stack([Amat[G, T2], Amat[G, T2 + 1]], 1)
    r[:, 1] = np.stack([Amat[G + 8, T2], Amat[G + 8, T2 + 1]], 1)
    r[:, 2] = np.stack([Amat[G, T2 + 8], Amat[G, T2 + 9]], 1)
    r[:, 3] = np.stack([Amat[G + 8, T2 + 8], Amat[G + 8, T2 + 9]], 1)
    return r

def load_b(Bmat):  # Bmat 16x8 (k, n) -> regs [32][2][2]
    r = np.zeros((32, 2, 2))
    r[:, 0] = np.stack([Bmat[T2, G], Bmat[T2 + 1, G]], 1)
    r[:, 1] = np.stack([Bmat[T2 + 8, G], Bmat[T2 + 9, G]], 1)
    return r

def a_to_mat(a):
    M = np.full((16, 16), np.nan)
    M[G, T2] = a[:, 0, 0]; M[G, T2 + 1] = a[:, 0, 1]
    M[G + 8, T2] = a[:, 1, 0]; M[G + 8, T2 + 1] = a[:, 1, 1]
    M[G, T2 + 8] = a[:, 2, 0]; M[G, T2 + 9] = a[:, 2, 1]
    M[G + 8, T2 + 8] = a[:, 3, 0]; M[G + 8, T2 + 9] = a[:, 3, 1]
    assert not np.isnan(M).any()
    return M

def b_to_mat(b):
    M = np.full((16, 8), np.nan)
    M[T2, G] = b[:, 0, 0]; M[T2 + 1, G] = b[:, 0, 1]
    M[T2 + 8, G] = b[:, 1, 0]; M[T2 + 9, G] = b[:, 1, 1]
    assert not np.isnan(M).any()
    return M

def c_to_mat(c):  # c [32][4]
    M = np.zeros((16, 8))
    M[G, T2] = c[:, 0]; M[G, T2 + 1] = c[:, 1]; M[G + 8, T2] = c[:, 2]; M[G + 8, T2 + 1] = c[:, 3]
    return M

def mat_to_c(M):
    return np.stack([M[G, T2], M[G, T2 + 1], M[G + 8, T2], M[G + 8, T2 + 1]], 1)

def mma(c, a, b):  # c [32][4] += A·B
    return mat_to_c(c_to_mat(c) + a_to_mat(a) @ b_to_mat(b))

def pack(x0, x1):
    return np.stack([x0, x1], 1)

def cp_pos(t, seq, cp, rank):
    if cp == 1: return t
    chunk = seq // 2; half = t // chunk
    return (rank if half == 0 else 2 * cp - 1 - rank) * chunk + t - half * chunk

INT_MAX = 2**31 - 1

class Dims:
    def __init__(s, batch, seq, heads, kv_heads, head_dim, cp=1, cp_rank=0, kv_rank=None, dropout=0.0):
        s.batch, s.seq, s.heads, s.kv_heads, s.d = batch, seq, heads, kv_heads, head_dim
        s.cp, s.cp_rank = cp, cp_rank
        s.kv_rank = cp_rank if kv_rank is None else kv_rank
        s.dropout = dropout
        s.keep_scale = 1 / (1 - dropout) if dropout > 0 else 1.0
        s.scale = 1 / np.sqrt(head_dim)
    def keeps(s, n, h, qp, kp):
        if s.dropout <= 0: return True
        return ((n * 7919 + h * 104729 + qp * 1299709 + kp * 15485863) % 1000) >= s.dropout * 1000

def tile(src_rows, first, count, dp, d):  # src_rows: [seq][d] -> count x dp zero-padded
    T = np.zeros((count, dp))
    for r in range(count):
        i = first + r
        if i < src_rows.shape[0]: T[r, :d] = src_rows[i]
    return T

def forward_registers(acc, row_max, row_sum, Q, K, V, s):
    # Q [batch][seq][heads][d], K,V [batch][seq][kv_heads][d]; acc [batch][seq][heads][d]; stats [batch][heads][seq]
    KD = 4 if s.d <= 64 else 8; DP = 16 * KD; R = 64; C = 64; NT = DP // 8; ST = C // 8
    group = s.heads // s.kv_heads
    for n in range(s.batch):
        for h in range(s.heads):
            g = h // group
            for bx in range((s.seq + R - 1) // R):
                i0 = bx * R
                q = tile(Q[n, :, h], i0, R, DP, s.d)
                last_row = min(i0 + R, s.seq) - 1
                for warp in range(4):
                    qf = [load_a(q[warp * 16:warp * 16 + 16, kk * 16:kk * 16 + 16]) for kk in range(KD)]
                    qp = np.zeros((32, 2), int); row_in = np.zeros((32, 2), bool)
                    m_run = np.zeros((32, 2)); l_run = np.zeros((32, 2)); o = np.zeros((NT, 32, 4))
                    for half in range(2):
                        for lane in range(32):
                            i = i0 + warp * 16 + G[lane] + half * 8
                            row_in[lane, half] = i < s.seq
                            qp[lane, half] = cp_pos(i, s.seq, s.cp, s.cp_rank) if i < s.seq else -1
                            if i < s.seq:
                                m_run[lane, half] = row_max[n, h, i]; l_run[lane, half] = row_sum[n, h, i]
                    for nt in range(NT):
                        for x in range(4):
                            for lane in range(32):
                                half = x // 2; col = nt * 8 + T2[lane] + x % 2
                                i = i0 + warp * 16 + G[lane] + half * 8
                                o[nt, lane, x] = acc[n, i, h, col] / s.keep_scale if row_in[lane, half] and col < s.d else 0
                    for j0 in range(0, s.seq, C):
                        if s.cp == 1 and j0 > last_row: break
                        k = tile(K[n, :, g], j0, C, DP, s.d); v = tile(V[n, :, g], j0, C, DP, s.d)
                        sc = np.zeros((ST, 32, 4))
                        for kk in range(KD):
                            for nt in range(ST):
                                # Operand{k, trans}: B(kk, n) = k[n][kk]
                                Bm = k[nt * 8:nt * 8 + 8, kk * 16:kk * 16 + 16].T
                                sc[nt] = mma(sc[nt], qf[kk], load_b(Bm))
                        kp = np.zeros((ST, 32, 2), int)
                        for nt in range(ST):
                            for e in range(2):
                                for lane in range(32):
                                    jj = j0 + nt * 8 + T2[lane] + e
                                    kp[nt, lane, e] = cp_pos(jj, s.seq, s.cp, s.kv_rank) if jj < s.seq else INT_MAX
                        mx = np.full((32, 2), -np.inf); seen = np.zeros((32, 2), int)
                        for nt in range(ST):
                            for x in range(4):
                                half, e = x // 2, x % 2
                                sc[nt, :, x] *= s.scale
                                vis = (qp[:, half] >= 0) & (kp[nt, :, e] <= qp[:, half])
                                mx[vis, half] = np.maximum(mx[vis, half], sc[nt, vis, x]); seen[vis, half] = 1
                        # quad reduce
                        quad = LANES.reshape(8, 4)
                        mxq = np.zeros_like(mx); seenq = np.zeros_like(seen)
                        for qd in quad:
                            mxq[qd] = mx[qd].max(0); seenq[qd] = seen[qd].max(0)
                        visible = seenq != 0
                        m_new = np.where(~visible, m_run, np.where(l_run > 0, np.maximum(m_run, mxq), mxq))
                        factor = np.where(~visible, 1.0, np.where(l_run > 0, np.exp(m_run - m_new), 0.0))
                        ssum = np.zeros((32, 2))
                        for nt in range(ST):
                            for x in range(4):
                                half = x // 2
                                for lane in range(32):
                                    kpos = kp[nt, lane, x % 2]; e = 0.0
                                    if qp[lane, half] >= 0 and kpos <= qp[lane, half]:
                                        e = np.exp(sc[nt, lane, x] - m_new[lane, half]); ssum[lane, half] += e
                                        if not s.keeps(n, h, qp[lane, half], kpos): e = 0.0
                                    sc[nt, lane, x] = e
                        sq = np.zeros_like(ssum)
                        for qd in quad: sq[qd] = ssum[qd].sum(0)
                        l_run = np.where(visible, l_run * factor + sq, l_run); m_run = np.where(visible, m_new, m_run)
                        for nt in range(NT):
                            for x in range(4): o[nt, :, x] *= factor[:, x // 2]
                        for kk in range(C // 16):
                            pa = np.stack([pack(sc[2*kk][:, 0], sc[2*kk][:, 1]), pack(sc[2*kk][:, 2], sc[2*kk][:, 3]),
                                           pack(sc[2*kk+1][:, 0], sc[2*kk+1][:, 1]), pack(sc[2*kk+1][:, 2], sc[2*kk+1][:, 3])], 1)
                            for nt in range(NT):
                                Bm = v[kk * 16:kk * 16 + 16, nt * 8:nt * 8 + 8]
                                o[nt] = mma(o[nt], pa, load_b(Bm))
                    for nt in range(NT):
                        for x in range(4):
                            for lane in range(32):
                                half = x // 2; col = nt * 8 + T2[lane] + x % 2
                                i = i0 + warp * 16 + G[lane] + half * 8
                                if row_in[lane, half] and col < s.d: acc[n, i, h, col] = o[nt, lane, x] * s.keep_scale
                    for lane in range(0, 32, 4):
                        for half in range(2):
                            i = i0 + warp * 16 + G[lane] + half * 8
                            if row_in[lane, half]:
                                row_max[n, h, i] = m_run[lane, half]; row_sum[n, h, i] = l_run[lane, half]

def backward_registers(dq, dK, dV, dctx, ctx, lse, Q, K, V, s):
    KD = 4 if s.d <= 64 else 8; DP = 16 * KD; C = 64; R = 32; NT = DP // 8; QT = R // 8
    group = s.heads // s.kv_heads
    for n in range(s.batch):
        for g in range(s.kv_heads):
            for bx in range((s.seq + C - 1) // C):
                j0 = bx * C
                k = tile(K[n, :, g], j0, C, DP, s.d); v = tile(V[n, :, g], j0, C, DP, s.d)
                kp = np.zeros((4, 32, 2), int)
                for warp in range(4):
                    for half in range(2):
                        for lane in range(32):
                            j = j0 + warp * 16 + G[lane] + half * 8
                            kp[warp, lane, half] = cp_pos(j, s.seq, s.cp, s.kv_rank) if j < s.seq else INT_MAX
                dk = np.zeros((4, NT, 32, 4)); dv = np.zeros((4, NT, 32, 4))
                for h in range(g * group, (g + 1) * group):
                    for i0 in range(0, s.seq, R):
                        if s.cp == 1 and i0 + R - 1 < j0: continue
                        q = tile(Q[n, :, h], i0, R, DP, s.d); dout = tile(dctx[n, :, h], i0, R, DP, s.d)
                        dd = np.zeros(R); lse_s = np.zeros(R); qpos = np.zeros(R, int)
                        for r in range(R):
                            i = i0 + r
                            if i < s.seq:
                                dd[r] = (dctx[n, i, h] * ctx[n, i, h]).sum(); lse_s[r] = lse[n, h, i]
                                qpos[r] = cp_pos(i, s.seq, s.cp, s.cp_rank)
                            else: qpos[r] = -1
                        ds = np.zeros((R, C + 8))
                        for warp in range(4):
                            st = np.zeros((QT, 32, 4)); dpt = np.zeros((QT, 32, 4))
                            for kk in range(KD):
                                ka = load_a(k[warp*16:warp*16+16, kk*16:kk*16+16]); va = load_a(v[warp*16:warp*16+16, kk*16:kk*16+16])
                                for qt in range(QT):
                                    bq = load_b(q[qt*8:qt*8+8, kk*16:kk*16+16].T); bo = load_b(dout[qt*8:qt*8+8, kk*16:kk*16+16].T)
                                    st[qt] = mma(st[qt], ka, bq); dpt[qt] = mma(dpt[qt], va, bo)
                            for qt in range(QT):
                                for x in range(4):
                                    for lane in range(32):
                                        half = x // 2; col = qt * 8 + T2[lane] + x % 2; qp = qpos[col]
                                        kpos = kp[warp, lane, half]; dsv = 0.0; pdv = 0.0
                                        if qp >= 0 and kpos <= qp:
                                            pj = np.exp(st[qt, lane, x] * s.scale - lse_s[col])
                                            kept = s.keep_scale if s.keeps(n, h, qp, kpos) else 0.0
                                            dsv = pj * (dpt[qt, lane, x] * kept - dd[col]); pdv = pj if kept != 0 else 0.0
                                        st[qt, lane, x] = pdv; dpt[qt, lane, x] = dsv
                                        ds[col, warp * 16 + G[lane] + half * 8] = dsv
                            for kk in range(R // 16):
                                pa = np.stack([pack(st[2*kk][:, 0], st[2*kk][:, 1]), pack(st[2*kk][:, 2], st[2*kk][:, 3]),
                                               pack(st[2*kk+1][:, 0], st[2*kk+1][:, 1]), pack(st[2*kk+1][:, 2], st[2*kk+1][:, 3])], 1)
                                sa = np.stack([pack(dpt[2*kk][:, 0], dpt[2*kk][:, 1]), pack(dpt[2*kk][:, 2], dpt[2*kk][:, 3]),
                                               pack(dpt[2*kk+1][:, 0], dpt[2*kk+1][:, 1]), pack(dpt[2*kk+1][:, 2], dpt[2*kk+1][:, 3])], 1)
                                for nt in range(NT):
                                    bo = load_b(dout[kk*16:kk*16+16, nt*8:nt*8+8]); bq = load_b(q[kk*16:kk*16+16, nt*8:nt*8+8])
                                    dv[warp, nt] = mma(dv[warp, nt], pa, bo); dk[warp, nt] = mma(dk[warp, nt], sa, bq)
                        # dQ
                        for warp in range(4):
                            for t in range(warp, (R // 16) * NT, 4):
                                m0 = t // NT * 16; n0 = t % NT * 8; c = np.zeros((32, 4))
                                for kk in range(C // 16):
                                    a = load_a(ds[m0:m0+16, kk*16:kk*16+16]); b = load_b(k[kk*16:kk*16+16, n0:n0+8])
                                    c = mma(c, a, b)
                                for x in range(4):
                                    for lane in range(32):
                                        i = i0 + m0 + G[lane] + (x // 2) * 8; col = n0 + T2[lane] + x % 2
                                        if i < s.seq and col < s.d: dq[n, i, h, col] += s.scale * c[lane, x]
                for warp in range(4):
                    for nt in range(NT):
                        for x in range(4):
                            for lane in range(32):
                                j = j0 + warp * 16 + G[lane] + (x // 2) * 8; col = nt * 8 + T2[lane] + x % 2
                                if j >= s.seq or col >= s.d: continue
                                dK[n, j, g, col] += s.scale * dk[warp, nt, lane, x]
                                dV[n, j, g, col] += s.keep_scale * dv[warp, nt, lane, x]

def reference(Q, K, V, dctx, s):
    # one rank, cp = 1
    B, S, H, D = Q.shape; group = H // s.kv_heads
    O = np.zeros_like(Q); lse = np.zeros((B, H, S)); dQ = np.zeros_like(Q); dK = np.zeros_like(K); dV = np.zeros_like(V)
    for n in range(B):
        for h in range(H):
            g = h // group
            Sm = Q[n, :, h] @ K[n, :, g].T * s.scale
            mask = np.tril(np.ones((S, S), bool))
            Sm = np.where(mask, Sm, -np.inf)
            m = Sm.max(1, keepdims=True); P = np.exp(Sm - m); l = P.sum(1, keepdims=True); P /= l
            lse[n, h] = (m + np.log(l))[:, 0]
            keep = np.array([[s.keep_scale if s.keeps(n, h, i, j) else 0 for j in range(S)] for i in range(S)])
            Pd = P * keep
            O[n, :, h] = Pd @ V[n, :, g]
            dO = dctx[n, :, h]
            dV[n, :, g] += Pd.T @ dO
            dPd = dO @ V[n, :, g].T
            Dv = (dO * O[n, :, h]).sum(1, keepdims=True)
            dS = P * (dPd * keep - Dv)
            dQ[n, :, h] = dS @ K[n, :, g] * s.scale
            dK[n, :, g] += dS.T @ Q[n, :, h] * s.scale
    return O, lse, dQ, dK, dV

def run(batch, seq, heads, kv_heads, d, dropout):
    rng = np.random.default_rng(1)
    s = Dims(batch, seq, heads, kv_heads, d, dropout=dropout)
    Q = rng.standard_normal((batch, seq, heads, d)); K = rng.standard_normal((batch, seq, kv_heads, d))
    V = rng.standard_normal((batch, seq, kv_heads, d)); dctx = rng.standard_normal((batch, seq, heads, d))
    acc = np.zeros_like(Q); rmax = np.zeros((batch, heads, seq)); rsum = np.zeros((batch, heads, seq))
    forward_registers(acc, rmax, rsum, Q, K, V, s)
    ctx = acc / rsum.transpose(0, 2, 1)[..., None]
    lse = rmax + np.log(rsum)
    dq = np.zeros_like(Q); dK = np.zeros_like(K); dV = np.zeros_like(V)
    backward_registers(dq, dK, dV, dctx, ctx, lse, Q, K, V, s)
    O, lse_r, dQr, dKr, dVr = reference(Q, K, V, dctx, s)
    worst = 0.0
    for name, a, b in [("ctx", ctx, O), ("lse", lse, lse_r), ("dq", dq, dQr), ("dk", dK, dKr), ("dv", dV, dVr)]:
        print(f"  {name}: max abs diff {np.abs(a - b).max():.2e} (max |ref| {np.abs(b).max():.2f})")
        worst = max(worst, np.abs(a - b).max())
    return worst



def run_cp(seq_local, heads, kv_heads, d, dropout, cp=2, rank=1):
    rng = np.random.default_rng(3)
    S = seq_local * cp; chunk = seq_local // 2
    def local_rows(r):
        return [ (r if t // chunk == 0 else 2*cp-1-r) * chunk + t % chunk for t in range(seq_local)]
    Qg = rng.standard_normal((1, S, heads, d)); Kg = rng.standard_normal((1, S, kv_heads, d)); Vg = rng.standard_normal((1, S, kv_heads, d))
    dOg = rng.standard_normal((1, S, heads, d))
    sfull = Dims(1, S, heads, kv_heads, d, dropout=dropout)
    # keeps() is position-based in Dims, so the full reference and the blocks draw the same mask
    O, lse_r, dQr, dKr, dVr = reference(Qg, Kg, Vg, dOg, sfull)
    mine = local_rows(rank)
    Q = Qg[:, mine]; dctx = dOg[:, mine]
    acc = np.zeros_like(Q); rmax = np.zeros((1, heads, seq_local)); rsum = np.zeros((1, heads, seq_local))
    blocks = [(rank, Kg[:, mine], Vg[:, mine]), (0, Kg[:, local_rows(0)], Vg[:, local_rows(0)])]
    for kv_rank, K, V in blocks:
        s = Dims(1, seq_local, heads, kv_heads, d, cp=cp, cp_rank=rank, kv_rank=kv_rank, dropout=dropout)
        forward_registers(acc, rmax, rsum, Q, K, V, s)
    ctx = acc / rsum.transpose(0, 2, 1)[..., None]; lse = rmax + np.log(rsum)
    worst = max(np.abs(ctx - O[:, mine]).max(), np.abs(lse - lse_r[:, :, mine]).max())
    print(f"  ctx and lse: max abs diff {worst:.2e}")
    dq = np.zeros_like(Q)
    # reference dK/dV from this rank's queries only
    group = heads // kv_heads
    for kv_rank, K, V in blocks:
        s = Dims(1, seq_local, heads, kv_heads, d, cp=cp, cp_rank=rank, kv_rank=kv_rank, dropout=dropout)
        dK = np.zeros_like(K); dV = np.zeros_like(V)
        backward_registers(dq, dK, dV, dctx, ctx, lse, Q, K, V, s)
        kvrows = local_rows(kv_rank)
        # reference partial: recompute full dS for query rows `mine`
        dKp = np.zeros((S, kv_heads, d)); dVp = np.zeros((S, kv_heads, d))
        for h in range(heads):
            g = h // group
            Sm = Qg[0, :, h] @ Kg[0, :, g].T * sfull.scale
            Sm = np.where(np.tril(np.ones((S, S), bool)), Sm, -np.inf)
            P = np.exp(Sm - lse_r[0, h][:, None])
            keep = np.array([[sfull.keep_scale if sfull.keeps(0, h, i, j) else 0 for j in range(S)] for i in range(S)])
            dP = dOg[0, :, h] @ Vg[0, :, g].T
            Dv = (dOg[0, :, h] * O[0, :, h]).sum(1, keepdims=True)
            dS = P * (dP * keep - Dv)
            dKp[:, g] += dS[mine].T @ Qg[0, mine, h] * sfull.scale
            dVp[:, g] += (P * keep)[mine].T @ dOg[0, mine, h]
        diff = max(np.abs(dK[0] - dKp[kvrows]).max(), np.abs(dV[0] - dVp[kvrows]).max())
        print(f"  block of kv rank {kv_rank}: dk and dv max abs diff {diff:.2e}")
        worst = max(worst, diff)
    worst = max(worst, np.abs(dq - dQr[:, mine]).max())
    print(f"  dq: max abs diff {np.abs(dq - dQr[:, mine]).max():.2e}")
    return worst


if __name__ == "__main__":
    import sys
    worst = 0.0
    # (batch, seq, heads, kv_heads, head_dim, dropout): padded head_dim, GQA with dropout, the largest head_dim
    for args in [(1, 70, 2, 1, 40, 0.0), (1, 130, 4, 2, 64, 0.1), (1, 90, 2, 2, 128, 0.0)]:
        print("one rank", args)
        worst = max(worst, run(*args))
    # (local seq, heads, kv_heads, head_dim, dropout): CP rank 1 of 2, its own block and rank 0's
    for args in [(96, 2, 1, 64, 0.1), (70, 2, 2, 40, 0.0)]:
        print("context-parallel rank", args)
        worst = max(worst, run_cp(*args))
    print(f"worst difference {worst:.2e}")
    sys.exit(0 if worst < 1e-12 else 1)
