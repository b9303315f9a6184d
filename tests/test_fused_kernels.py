"""The _C.fused kernels called directly on storages/layouts, checked against torch (values and grads)."""
import math

import numpy as np
import pytest
import torch

from ember import _C
from ember.errors import EmberError

F = _C.fused
CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.float64: 3, torch.int64: 4, torch.uint8: 6,
         torch.bool: 6}
TOL = {torch.float64: (1e-10, 1e-10), torch.float32: (2e-5, 2e-5), torch.float16: (2e-2, 2e-2),
       torch.bfloat16: (5e-2, 5e-2)}
HALF = (torch.float16, torch.bfloat16)


def sto(t):
    """A torch tensor -> (CpuStorage, Layout) over a copy of its whole storage, keeping strides/offset."""
    if t.dtype == torch.bool:
        t = t.view(torch.uint8)
    flat = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage())
    arr = flat.view(torch.int16).numpy() if flat.dtype == torch.bfloat16 else flat.numpy()
    code = CODES[t.dtype]
    s = _C.CpuStorage._from_numpy_code(np.ascontiguousarray(arr), code)
    return s, _C.Layout(list(t.shape), list(t.stride()), t.storage_offset())


def tt(s, shape, dtype):
    """A dense storage -> torch tensor of `shape`."""
    a = np.array(s.numpy(), copy=True)
    if dtype == torch.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).reshape(shape)
    return torch.from_numpy(a).reshape(shape)


def close(a, b, dtype, scale=1.0):
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(a.double(), b.double(), rtol=rtol, atol=atol * scale)


def strided_rows(rows, n, dtype, kind):
    """Inputs with awkward layouts: 'dense', 'offset' (narrowed), 'colstride' (last dim strided)."""
    if kind == "dense":
        return torch.randn(rows, n, dtype=torch.float64).to(dtype)
    if kind == "offset":
        return torch.randn(rows + 2, n + 5, dtype=torch.float64).to(dtype)[1:-1, 3:3 + n]
    return torch.randn(n, rows, dtype=torch.float64).to(dtype).t()


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 3, 17, 1000])
@pytest.mark.parametrize("kind", ["dense", "offset", "colstride"])
@pytest.mark.parametrize("log", [False, True])
def test_softmax(dtype, n, kind, log):
    x = strided_rows(5, n, dtype, kind) * 3
    s, l = sto(x)
    y = tt(F.softmax_fwd(s, l, log), x.shape, dtype)
    ref = (torch.log_softmax if log else torch.softmax)(x.double(), -1)
    close(y, ref, dtype)
    g = strided_rows(5, n, dtype, kind)
    ys, yl = sto(y)
    gs, gl = sto(g)
    dx = tt(F.softmax_bwd(ys, yl, gs, gl, log), x.shape, dtype)
    xr = x.double().requires_grad_()
    yr = (torch.log_softmax if log else torch.softmax)(xr, -1)
    (ref_dx,) = torch.autograd.grad(yr, xr, g.double())
    close(dx, ref_dx, dtype)


def test_softmax_long_row_and_3d():
    x = torch.randn(2, 1_000_003, dtype=torch.float32) * 5
    s, l = sto(x)
    close(tt(F.softmax_fwd(s, l, False), x.shape, x.dtype), torch.softmax(x.double(), -1), x.dtype, 1e-3)
    close(tt(F.softmax_fwd(s, l, True), x.shape, x.dtype), torch.log_softmax(x.double(), -1), x.dtype, 10)
    x3 = torch.randn(4, 3, 6, 10).permute(1, 0, 2, 3)[:, :, 1:5]  # non-mergeable outer dims
    s, l = sto(x3)
    close(tt(F.softmax_fwd(s, l, False), x3.shape, x3.dtype), torch.softmax(x3.double(), -1), torch.float32)


def test_softmax_extremes():
    # large maxima too (around and past 2^24): x - max must come out exact for the exp
    x = torch.tensor([[0.0, -math.inf, 1.0], [1e30, 1e30, -1e30], [-100.0, -200.0, -300.0],
                      [1e6, 1e6 - 1, 1e6 - 3], [16777216.0, 16777214.0, 16777212.0], [-3e7, -3e7 - 2, -3e7 + 4]])
    s, l = sto(x)
    close(tt(F.softmax_fwd(s, l, False), x.shape, x.dtype), torch.softmax(x.double(), -1), torch.float32)
    close(tt(F.softmax_fwd(s, l, True), x.shape, x.dtype), torch.log_softmax(x.double(), -1), torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_long_rows_combine_their_blocks(dtype, log):
    # Rows over 4096 columns are taken a 4096-column block at a time, each block against its own max,
    # and the blocks are rescaled to the row's max at the end: the row's max in any block, blocks far
    # below it (their outputs underflow to 0), blocks of -inf, and NaN/inf in one block must all come
    # out as a whole-row softmax does. 3 blocks and a 37-column tail; rows of an offset (ldx > n) view.
    n = 3 * 4096 + 37
    x = torch.randn(9, n + 3, dtype=torch.float64)[:, 2:2 + n] * 3
    x[0, -1] = 25.0                      # the max in the tail
    x[1, 5000] = 40.0                    # ... in the middle block
    x[2, :4096] = -math.inf              # a first block of -inf
    x[2, 9000:9100] = -math.inf
    x[3, 4096:8192] -= 1000.0            # a block far below the max: its outputs are 0
    x[4, 10000] = float("nan")           # NaN in one block: the whole row is NaN
    x[5, 7000] = math.inf                # +inf: inf - inf, NaN as in torch
    x[6] = -math.inf                     # nothing finite: NaN as in torch
    x[7, 8192:] = -math.inf              # the tail block (and the last whole one) all -inf
    x[8, :8192] += 60.0                  # two blocks far above the rest
    x = x.to(dtype)
    s, l = sto(x)
    got = tt(F.softmax_fwd(s, l, log), x.shape, dtype).double()
    ref = (torch.log_softmax if log else torch.softmax)(x.double(), -1)
    assert torch.equal(got.isnan(), ref.isnan())
    assert got[4].isnan().all() and got[5].isnan().all() and got[6].isnan().all()
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(got, ref, rtol=rtol, atol=atol * (1 if log else 1e-3), equal_nan=True)
    if not log:
        assert (got[3, 4096:8192] == 0).all() and (got[2, :4096] == 0).all()
        ok = ~ref.isnan().any(-1)
        close(got[ok].sum(-1), torch.ones(int(ok.sum()), dtype=torch.float64), dtype)
    # the same rows one at a time (a chunk of one row prefetches nothing after it): the same bits
    for r in (0, 3, 8):
        alone = tt(F.softmax_fwd(*sto(x[r:r + 1].clone()), log), (1, n), dtype)
        assert torch.equal(alone[0].double().nan_to_num(), got[r].nan_to_num())


@pytest.mark.parametrize("dtype", HALF)
def test_softmax_half_rows_take_their_max_from_the_bits(dtype):
    # f16/bf16 rows find their max on the raw bits (int16 max of the non-negative, uint16 min of the
    # negative) and, when |max| < 8192, take their exps as 2^(x*log2e - c) with c = max*log2e rounded.
    # 77 columns: whole vector blocks at every width, then a scalar tail. Rows all negative, of mixed
    # sign, of signed zeros, with -inf, with a negative NaN (bits 0xff../0xfe..), either side of 8192.
    n = 77
    x = torch.randn(12, n, dtype=torch.float64)
    x[0] = -(x[0].abs() * 5 + 1)             # all negative: the max is the smallest magnitude
    x[1, 70] = 6.5                            # mixed signs, the max in the tail
    x[2] = -(x[2].abs() + 2)
    x[2, 76] = -0.75                          # all negative, the max the last element
    x[3] = -0.0
    x[3, :40] = -x[3, :40].abs() - 1
    x[3, 60] = 0.0                            # +0 and -0 as the max: both give e = 1
    x[4, ::5] = -math.inf                     # -inf among negatives
    x[4] = -(x[4].abs())
    x[6] = 8100 + 30 * x[6]                   # |max| just under and well over 8192: both exp forms
    x[7] = 9000 + 30 * x[7]
    x[8] = -9000 + 30 * x[8]
    x[9, 76] = 200.0                          # far above the rest (missed, its e would overflow)
    x[10] = -30000 + 100 * x[10] if dtype == torch.bfloat16 else -30000 + 100 * x[10].clamp(-3, 3)
    x[11, 31] = -200.0
    x = x.to(dtype)
    bits = x.view(torch.int16)
    bits[5, 33] = -64 if dtype == torch.bfloat16 else -512   # a NaN with its sign bit set
    s, l = sto(x)
    got = tt(F.softmax_fwd(s, l, False), x.shape, dtype).double()
    ref = torch.softmax(x.double(), -1)
    assert torch.equal(got.isnan(), ref.isnan()) and got[5].isnan().all()
    torch.testing.assert_close(got, ref, rtol=TOL[dtype][0], atol=TOL[dtype][1], equal_nan=True)
    ok = ~ref.isnan().any(-1)
    assert (got[ok] <= 1).all() and (got[ok] >= 0).all()
    assert (got[4, ::5] == 0).all()
    logs = tt(F.softmax_fwd(s, l, True), x.shape, dtype).double()
    torch.testing.assert_close(logs, torch.log_softmax(x.double(), -1), rtol=TOL[dtype][0], atol=TOL[dtype][1],
                               equal_nan=True)
    for r in (0, 3, 6, 7):  # a row alone: the same bits
        assert torch.equal(tt(F.softmax_fwd(*sto(x[r:r + 1].clone()), False), (1, n), dtype)[0].double(), got[r])


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_one_column_rows_are_exactly_one(dtype):
    x = (torch.randn(9, 1, dtype=torch.float64) * torch.tensor([1, 10, 1e3, 8000, 9000, -8000, -9e3, 1e-3, 0.0],
                                                                dtype=torch.float64)[:, None]).to(dtype)
    got = tt(F.softmax_fwd(*sto(x), False), x.shape, dtype).double()
    assert (got == 1).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_softmax_nan_rows_stay_nan_in_every_store_path(dtype):
    # 40 columns: vector pairs, a single vector and a partial tail; rows with a NaN or an inf - inf
    # take the NaN-keeping rounding, the others the fast one.
    x = torch.randn(4, 40, dtype=torch.float64).to(dtype)
    x[1, 5] = float("nan")
    x[2, 0] = x[2, 33] = float("inf")
    s, l = sto(x)
    for log in (False, True):
        got = tt(F.softmax_fwd(s, l, log), x.shape, dtype).double()
        ref = (torch.log_softmax if log else torch.softmax)(x.double(), -1)
        torch.testing.assert_close(got, ref, rtol=TOL[dtype][0], atol=TOL[dtype][1], equal_nan=True)
        assert torch.isnan(got[1]).all() and torch.isnan(got[2]).sum() == torch.isnan(ref[2]).sum()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 3, 17, 1000])
@pytest.mark.parametrize("kind", ["dense", "offset", "colstride"])
def test_rms_norm(dtype, n, kind):
    x = strided_rows(6, n, dtype, kind)
    w = torch.randn(2 * n + 3, dtype=torch.float64).to(dtype)[1::2][:n]  # strided, offset weight
    g = strided_rows(6, n, dtype, kind)
    xs, xl = sto(x)
    ws, wl = sto(w)
    gs, gl = sto(g)
    ys, rs = F.rms_norm_fwd(xs, xl, ws, wl, 1e-5)
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    yr = torch.nn.functional.rms_norm(xr, (n,), wr, 1e-5)
    close(tt(ys, x.shape, dtype), yr, dtype)
    dxs, dws = F.rms_norm_bwd(xs, xl, ws, wl, rs, gs, gl)
    rdx, rdw = torch.autograd.grad(yr, (xr, wr), g.double())
    close(tt(dxs, x.shape, dtype), rdx, dtype)
    close(tt(dws, (n,), dtype), rdw, dtype, 4)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 3, 17, 1000])
@pytest.mark.parametrize("kind", ["dense", "offset", "colstride"])
def test_layer_norm(dtype, n, kind):
    x = strided_rows(6, n, dtype, kind) + 2
    w = torch.randn(n, dtype=torch.float64).to(dtype)
    b = torch.randn(n, dtype=torch.float64).to(dtype)
    g = strided_rows(6, n, dtype, kind)
    (xs, xl), (ws, wl), (bs, bl), (gs, gl) = sto(x), sto(w), sto(b), sto(g)
    ys, ms, rs = F.layer_norm_fwd(xs, xl, ws, wl, bs, bl, 1e-5)
    xr, wr, br = (t.double().requires_grad_() for t in (x, w, b))
    yr = torch.nn.functional.layer_norm(xr, (n,), wr, br, 1e-5)
    # n == 1: y = b exactly and dx = 0; half rounding of x can't change that
    close(tt(ys, x.shape, dtype), yr, dtype, 2)
    dxs, dws, dbs = F.layer_norm_bwd(xs, xl, ws, wl, ms, rs, gs, gl)
    rdx, rdw, rdb = torch.autograd.grad(yr, (xr, wr, br), g.double())
    # dx = r * (g*w - mean(g*w) - xhat * mean(g*w*xhat)): rounding x - mean in the compute type costs
    # about r * |x| ulps, so a row whose spread is tiny next to its values (r * |x| >> 1) is ill-
    # conditioned for any implementation (torch's float32 kernel errs as much); widen its bound by that.
    r = torch.from_numpy(np.asarray(rs.numpy()).astype(np.float64))  # rstd is kept in the compute type
    cond = (r * x.double().abs().amax(-1)).clamp(min=8.0)[:, None] / 8.0
    close(tt(dxs, x.shape, dtype) / cond, rdx / cond, dtype, 4)
    close(tt(dws, (n,), dtype), rdw, dtype, 4)
    close(tt(dbs, (n,), dtype), rdb, dtype, 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("n", [3, 128, 1000])
def test_forward_rows_do_not_depend_on_their_batch(dtype, n):
    # Short rows go through the kernels in groups (and half weights are widened per call): a row's
    # result must be bit-identical whether it comes alone or among others.
    x = torch.randn(11, n, dtype=torch.float64).to(dtype) * 2 + 0.5
    w = torch.randn(n, dtype=torch.float64).to(dtype)
    b = torch.randn(n, dtype=torch.float64).to(dtype)
    (ws, wl), (bs, bl) = sto(w), sto(b)
    runs = {
        "softmax": lambda s, l: [F.softmax_fwd(s, l, False)],
        "log_softmax": lambda s, l: [F.softmax_fwd(s, l, True)],
        "rms_norm": lambda s, l: list(F.rms_norm_fwd(s, l, ws, wl, 1e-5)),
        "layer_norm": lambda s, l: list(F.layer_norm_fwd(s, l, ws, wl, bs, bl, 1e-5)),
    }
    for name, run in runs.items():
        whole = [np.asarray(o.numpy()) for o in run(*sto(x))]
        for r in range(x.shape[0]):
            alone = [np.asarray(o.numpy()) for o in run(*sto(x[r:r + 1].clone()))]
            for k, (a, wv) in enumerate(zip(alone, whole)):
                per_row = wv.size // x.shape[0]
                np.testing.assert_array_equal(a.reshape(-1), wv.reshape(-1)[r * per_row:(r + 1) * per_row],
                                              err_msg=f"{name} output {k} row {r}")


@pytest.mark.parametrize("rows", [1, 5])
def test_norms_keep_every_bf16_nan_payload(rows):
    # Rows with finite statistics store bf16 without the NaN select; NaN weights/biases of every bf16
    # payload (both signs) must still come out NaN, in the widened-weights path (rows >= 4) and not.
    bits = np.concatenate([np.arange(0x7F81, 0x8000), np.arange(0xFF81, 0x10000)]).astype(np.uint16)
    n = 256
    wbits = np.full(n, 0x3F80, np.uint16)  # 1.0
    wbits[:bits.size] = bits
    x = torch.randn(rows, n, dtype=torch.float64).to(torch.bfloat16)
    xs, xl = sto(x)
    # shifted by 4 too: the kernels hold a pair's columns in two registers by groups of 4
    for shift in (0, 4):
        w = torch.from_numpy(np.roll(wbits, shift).view(np.int16).copy()).view(torch.bfloat16)
        b = torch.from_numpy(np.roll(wbits, shift + 1).view(np.int16).copy()).view(torch.bfloat16)
        check_nan_payload_rows(x, xs, xl, w, b, rows, bits.size)


def check_nan_payload_rows(x, xs, xl, w, b, rows, nnan):
    n = x.shape[1]
    (ws, wl), (bs, bl) = sto(w), sto(b)
    for got, ref in [
        (F.rms_norm_fwd(xs, xl, ws, wl, 1e-5)[0], torch.nn.functional.rms_norm(x.double(), (n,), w.double(), 1e-5)),
        (F.layer_norm_fwd(xs, xl, ws, wl, bs, bl, 1e-5)[0],
         torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)),
    ]:
        got = tt(got, x.shape, torch.bfloat16).double()
        assert ref.isnan().sum() >= rows * nnan
        assert torch.equal(got.isnan(), ref.isnan())
        torch.testing.assert_close(got, ref, rtol=5e-2, atol=5e-2, equal_nan=True)


def test_layer_norm_no_affine_and_long_offset_rows():
    x = torch.randn(2, 1_000_003, dtype=torch.float32) * 0.01 + 1000.0  # catastrophic for E[x^2]-E[x]^2
    xs, xl = sto(x)
    ys, ms, rs = F.layer_norm_fwd(xs, xl, None, None, None, None, 1e-5)
    ref = torch.nn.functional.layer_norm(x.double(), (x.shape[1],), eps=1e-5)
    torch.testing.assert_close(tt(ys, x.shape, x.dtype).double(), ref, rtol=1e-3, atol=2e-3)
    var = x.double().var(-1, unbiased=False)
    torch.testing.assert_close(tt(rs, (2,), torch.float32).double(), 1 / torch.sqrt(var + 1e-5), rtol=1e-4, atol=0)
    g = torch.randn_like(x)
    dxs, _, _ = F.layer_norm_bwd(xs, xl, None, None, ms, rs, *sto(g))
    xr = x.double().requires_grad_()
    (rdx,) = torch.autograd.grad(torch.nn.functional.layer_norm(xr, (x.shape[1],), eps=1e-5), xr, g.double())
    torch.testing.assert_close(tt(dxs, x.shape, x.dtype).double(), rdx, rtol=1e-3, atol=1e-2)


def test_rms_norm_long_row():
    x = torch.randn(1, 1_000_003, dtype=torch.float64)
    w = torch.rand(1_000_003, dtype=torch.float64)
    ys, _ = F.rms_norm_fwd(*sto(x), *sto(w), 1e-6)
    close(tt(ys, x.shape, x.dtype), torch.nn.functional.rms_norm(x, (x.shape[1],), w, 1e-6), x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["sigmoid", "silu", "gelu"])
def test_activation_bwd(dtype, kind):
    x = (torch.randn(7, 37, dtype=torch.float64) * 4).to(dtype)
    g = torch.randn(37, 7, dtype=torch.float64).to(dtype).t()  # strided grad
    xr = x.double().requires_grad_()
    fn = {"sigmoid": torch.sigmoid, "silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu}[kind]
    y = fn(xr)
    (ref,) = torch.autograd.grad(y, xr, g.double())
    a = y.detach().to(dtype) if kind == "sigmoid" else x
    out = tt(getattr(F, kind + "_bwd")(*sto(a), *sto(g)), x.shape, dtype)
    close(out, ref, dtype, 2)


def causal_keep(Lq, Lk):
    """The bottom-right causal keep-mask: query i sees keys j <= i + Lk - Lq (torch's causal_lower_right)."""
    return torch.ones(Lq, Lk, dtype=torch.bool).tril(diagonal=Lk - Lq)


def sdpa_ref(q, k, v, mask, scale, causal):
    qr, kr, vr = (t.double().requires_grad_() for t in (q, k, v))
    m = mask
    if m is not None and m.dtype != torch.bool:
        m = m.double()
    if causal:  # bottom-right causal, as a mask (torch's is_causal is top-left)
        keep = causal_keep(q.shape[-2], k.shape[-2])
        m = keep if m is None else (m & keep if m.dtype == torch.bool else m.masked_fill(~keep, float("-inf")))
    gqa = q.ndim == 4 and k.shape[1] != q.shape[1]
    o = torch.nn.functional.scaled_dot_product_attention(qr, kr, vr, attn_mask=m, scale=scale, enable_gqa=gqa)
    return o, (qr, kr, vr)


def run_sdpa(q, k, v, mask=None, scale=None, causal=False):
    dtype = q.dtype
    ms, ml = sto(mask) if mask is not None else (None, None)
    o, lse = F.sdpa_fwd(*sto(q), *sto(k), *sto(v), ms, ml, scale, causal)
    shape_o = q.shape[:-1] + v.shape[-1:]
    out = tt(o, shape_o, dtype)
    g = torch.randn(shape_o, dtype=torch.float64).to(dtype)
    dq, dk, dv = F.sdpa_bwd(*sto(q), *sto(k), *sto(v), *sto(out), lse, *sto(g), ms, ml, scale, causal)
    return out, g, (tt(dq, q.shape, dtype), tt(dk, k.shape, dtype), tt(dv, v.shape, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("D", [32, 64, 128, 17])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa(dtype, D, causal):
    B, H, Lq, Lk = 2, 3, 70, 133
    q, k, v = (torch.randn(B, H, L, D, dtype=torch.float64).to(dtype) for L in (Lq, Lk, Lk))
    out, g, grads = run_sdpa(q, k, v, causal=causal)
    ro, ins = sdpa_ref(q, k, v, None, None, causal)
    close(out, ro, dtype)
    rgrads = torch.autograd.grad(ro, ins, g.double())
    for a, b in zip(grads, rgrads):
        close(a, b, dtype, 4)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_nonfinite_scores_on_whole_key_tiles(causal):
    """Scores of +-inf and NaN inside full 64-key tiles (where AVX-512 runs the softmax in the Q·Kᵀ
    registers): +inf rows and NaN rows come out NaN and -inf keys get weight 0, as in torch."""
    torch.manual_seed(1)
    B, H, Lq, Lk, D = 1, 2, 75, 192, 64
    q, k, v = torch.randn(B, H, Lq, D), torch.randn(B, H, Lk, D), torch.randn(B, H, Lk, 48)
    k[:, :, 70] = 0
    k[:, :, 70, 0] = math.inf   # key 70 scores +inf (q[..., 0] > 0) or -inf (< 0)
    q[:, 1, 40, 5] = math.nan   # a NaN query row
    k[:, 0, 100, 3] = math.nan  # a NaN key (every row sees it): head 0 is NaN
    out, lse = F.sdpa_fwd(*sto(q), *sto(k), *sto(v), None, None, None, causal)
    got = tt(out, (B, H, Lq, 48), torch.float32).double()
    ro, _ = sdpa_ref(q, k, v, None, None, causal)
    assert got.isnan().any() and not got.isnan().all()
    torch.testing.assert_close(got, ro.detach(), rtol=TOL[torch.float32][0], atol=TOL[torch.float32][1], equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("growth", ["small", "large", "mixed"])
def test_sdpa_running_max_growth(dtype, causal, growth):
    """Rows whose running max grows from key tile to key tile by less (the AVX-512 forward then keeps
    its stale max: P up to 2^8) or by much more than 8 (base-2) units, on ragged lengths: out, lse and
    the gradients (which use lse) match float64 torch."""
    torch.manual_seed(7)
    B, H, Lq, Lk, D = 2, 3, 75, 389, 64
    q = torch.randn(B, H, Lq, D, dtype=torch.float64)
    k = torch.randn(B, H, Lk, D, dtype=torch.float64)
    v = torch.randn(B, H, Lk, 40, dtype=torch.float64)
    ramp = torch.arange(Lk, dtype=torch.float64) / Lk  # later keys score higher
    gain = {"small": 1 + 0.5 * ramp, "large": 1 + 20 * ramp, "mixed": 1 + 8 * (ramp * 7).frac()}[growth]
    k = k * gain[:, None]
    q, k, v = (t.to(dtype) for t in (q, k, v))
    scale = D**-0.5
    out, g, grads = run_sdpa(q, k, v, scale=scale, causal=causal)
    ro, ins = sdpa_ref(q, k, v, None, scale, causal)
    close(out, ro, dtype, 4)
    _, lse = F.sdpa_fwd(*sto(q), *sto(k), *sto(v), None, None, scale, causal)
    s = (ins[0] @ ins[1].transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~causal_keep(Lq, Lk), float("-inf"))
    close(tt(lse, (B, H, Lq), torch.float64 if dtype == torch.float64 else torch.float32).double(),
          torch.logsumexp(s, -1).detach(), dtype, 4)
    for a, b in zip(grads, torch.autograd.grad(ro, ins, g.double())):
        close(a, b, dtype, 50)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mask_kind", ["bool", "additive", "bool_full_row"])
def test_sdpa_mask_and_layouts(dtype, mask_kind):
    B, H, Lq, Lk, D, Dv = 2, 4, 37, 45, 24, 40
    # (B, L, H, D) storage permuted to (B, H, L, D): strided batch/head/row dims; k with strided last dim.
    q = torch.randn(B, Lq, H, D, dtype=dtype).permute(0, 2, 1, 3)
    k = torch.randn(B, H, D, Lk, dtype=dtype).transpose(-1, -2)
    v = torch.randn(B, H, Lk + 3, Dv, dtype=dtype)[:, :, 2:-1]
    if mask_kind == "additive":
        mask = torch.randn(1, H, Lq, Lk, dtype=dtype)
    else:
        mask = torch.rand(Lq, Lk) > 0.3
        if mask_kind == "bool_full_row":
            mask[5] = False
    out, g, grads = run_sdpa(q, k, v, mask=mask, scale=0.3)
    ro, ins = sdpa_ref(q, k, v, mask, 0.3, False)
    if mask_kind == "bool_full_row":  # torch gives NaN for a fully masked row; ember gives 0
        assert torch.all(out[:, :, 5] == 0)
        ro = torch.nan_to_num(ro, 0.0)
        g[:, :, 5] = 0
    close(out, ro, dtype)
    rgrads = torch.autograd.grad(ro, ins, g.double())
    for a, b in zip(grads, rgrads):
        assert torch.isfinite(a).all()
        close(a, torch.nan_to_num(b, 0.0), dtype, 4)


def test_sdpa_3d_and_causal_bottom_right():
    # Lq > Lk: query i sees keys j <= i - 4, so the first 4 queries see none and give 0 (torch: NaN or 0)
    q = torch.randn(3, 10, 16)
    k = torch.randn(3, 6, 16)
    v = torch.randn(3, 6, 16)
    out, g, grads = run_sdpa(q, k, v, causal=True)
    ro, ins = sdpa_ref(q, k, v, None, None, True)
    assert torch.all(out[:, :4] == 0) and not torch.all(out[:, 4:] == 0)
    close(out, torch.nan_to_num(ro, 0.0), torch.float32)
    g[:, :4] = 0
    for a, b in zip(grads, torch.autograd.grad(ro, ins, g.double())):
        assert torch.isfinite(a).all()
        close(a, torch.nan_to_num(b, 0.0), torch.float32, 4)



# Few heads and many key tiles: the backward deals each head's key tiles to several work items and sums
# their dQ partials (see sdpa_bwd_parts in fused.cpp: BH < 32 and >= 8 tiles of 64 keys).
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("case", ["plain", "causal", "additive_mask", "bool_mask_causal"])
def test_sdpa_backward_split_over_key_tiles(dtype, case):
    B, H, Lq, Lk, D, Dv = 1, 2, 150, 1100, 17, 24  # 18 key tiles -> 4 items per head
    q = torch.randn(B, H, Lq, D, dtype=torch.float64).to(dtype)
    k = torch.randn(B, Lk, H, D, dtype=torch.float64).to(dtype).transpose(1, 2)  # strided heads/rows
    v = torch.randn(B, H, Lk, Dv, dtype=torch.float64).to(dtype)
    mask = None
    if case == "additive_mask":
        mask = torch.randn(1, H, Lq, Lk, dtype=torch.float64).to(dtype)
    elif case == "bool_mask_causal":
        mask = torch.rand(Lq, Lk) > 0.2
        mask[:, 0] = True  # no fully masked row (torch gives NaN there)
    causal = "causal" in case
    out, g, grads = run_sdpa(q, k, v, mask=mask, scale=0.2, causal=causal)
    ro, ins = sdpa_ref(q, k, v, mask, 0.2, causal)
    if causal:  # bottom-right causal with Lq < Lk: every row sees at least key 0
        assert torch.isfinite(ro).all()
    close(out, ro, dtype)
    for a, b in zip(grads, torch.autograd.grad(ro, ins, g.double())):
        close(a, b, dtype, 4)



# The backward's rowsum(dO * O) reads O and dO through their own strides (a vector path for unit column
# stride, a scalar one otherwise, and a tail past the vectors), and a whole-head item prefetches the
# next head's rows: O and dO given as strided views, grouped heads, Dv with a tail, several heads.
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("o_kind", ["dense", "rows_strided", "cols_strided"])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_backward_strided_output_and_grad(dtype, o_kind, causal):
    B, H, Hkv, Lq, Lk, D, Dv = 3, 4, 2, 75, 140, 24, 41
    q = torch.randn(B, H, Lq, D, dtype=torch.float64).to(dtype)
    k = torch.randn(B, Hkv, Lk, D, dtype=torch.float64).to(dtype)
    v = torch.randn(B, Hkv, Lk, Dv, dtype=torch.float64).to(dtype)
    o, lse = F.sdpa_fwd(*sto(q), *sto(k), *sto(v), None, None, 0.25, causal)
    out = tt(o, (B, H, Lq, Dv), dtype)
    g = torch.randn(B, H, Lq, Dv, dtype=torch.float64).to(dtype)

    def relayout(t):
        if o_kind == "rows_strided":  # (B, L, H, Dv) storage, padded rows
            return torch.zeros(B, Lq, H, Dv + 3, dtype=dtype)[..., 1:Dv + 1].copy_(t.transpose(1, 2)).transpose(1, 2)
        if o_kind == "cols_strided":  # last dim strided
            return t.transpose(-1, -2).contiguous().transpose(-1, -2)
        return t

    out_v, g_v = relayout(out), relayout(g)
    assert torch.equal(out_v, out) and (o_kind == "dense" or not out_v.is_contiguous())
    dq, dk, dv = F.sdpa_bwd(*sto(q), *sto(k), *sto(v), *sto(out_v), lse, *sto(g_v), None, None, 0.25, causal)
    ro, ins = sdpa_ref(q, k, v, None, 0.25, causal)
    close(out, ro, dtype)
    grads = (tt(dq, q.shape, dtype), tt(dk, k.shape, dtype), tt(dv, v.shape, dtype))
    for a, b in zip(grads, torch.autograd.grad(ro, ins, g.double())):
        close(a, b, dtype, 4)

# Grouped-query attention: k/v with fewer heads than q (torch's enable_gqa, MLX's implicit broadcast).
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("H,Hkv,Lk,case", [(6, 2, 45, "plain"), (4, 1, 70, "causal"), (6, 3, 37, "additive_mask"),
                                           (4, 2, 600, "bool_mask"), (2, 1, 1100, "causal")])
def test_sdpa_grouped_query_heads(dtype, H, Hkv, Lk, case):
    B, Lq, D, Dv = 2, 33, 20, 12
    q = torch.randn(B, Lq, H, D, dtype=torch.float64).to(dtype).transpose(1, 2)  # strided heads
    k = torch.randn(B, Hkv, Lk, D, dtype=torch.float64).to(dtype)
    v = torch.randn(B, Hkv, Lk + 2, Dv, dtype=torch.float64).to(dtype)[:, :, 1:-1]  # offset rows
    mask = None
    if case == "additive_mask":
        mask = torch.randn(B, H, Lq, Lk, dtype=torch.float64).to(dtype)
    elif case == "bool_mask":
        mask = torch.rand(1, H, Lq, Lk) > 0.3
        mask[..., 0] = True
    causal = case == "causal"
    out, g, grads = run_sdpa(q, k, v, mask=mask, scale=0.3, causal=causal)
    assert [t.shape for t in grads] == [q.shape, k.shape, v.shape]
    ro, ins = sdpa_ref(q, k, v, mask, 0.3, causal)
    close(out, ro, dtype)
    for a, b in zip(grads, torch.autograd.grad(ro, ins, g.double())):
        close(a, b, dtype, 4)


def test_sdpa_grouped_heads_must_divide():
    q, k = torch.randn(1, 6, 5, 8), torch.randn(1, 4, 5, 8)
    with pytest.raises(EmberError, match=r"^\[sdpa\] incompatible shapes"):
        F.sdpa_fwd(*sto(q), *sto(k), *sto(k), None, None, None, False)
    with pytest.raises(EmberError, match=r"^\[sdpa\] incompatible shapes"):  # v heads must equal k heads
        F.sdpa_fwd(*sto(q), *sto(torch.randn(1, 2, 5, 8)), *sto(torch.randn(1, 3, 5, 8)), None, None, None, False)

@pytest.mark.cpu_only
def test_sdpa_backward_same_bits_on_any_pool():
    """The split of the keys depends on the shape only, so the gradients match bit for bit."""
    q, k, v = (torch.randn(1, 3, L, 40) for L in (200, 700, 700))
    g = torch.randn(1, 3, 200, 40)
    o, lse = F.sdpa_fwd(*sto(q), *sto(k), *sto(v), None, None, None, True)
    out = tt(o, g.shape, torch.float32)
    before = _C.get_num_threads()
    runs = []
    try:
        for nt in (1, 2, 3):
            _C.set_num_threads(nt)
            runs.append([s.numpy().copy() for s in
                         F.sdpa_bwd(*sto(q), *sto(k), *sto(v), *sto(out), lse, *sto(g), None, None, None, True)])
    finally:
        _C.set_num_threads(before)
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert np.array_equal(a, b)


def test_errors():
    x = torch.randn(4, 8)
    w = torch.randn(7)
    with pytest.raises(EmberError, match=r"^\[rms_norm\] "):
        F.rms_norm_fwd(*sto(x), *sto(w), 1e-5)
    with pytest.raises(EmberError, match=r"^\[layer_norm\] "):
        F.layer_norm_fwd(*sto(x), *sto(w), None, None, 1e-5)
    with pytest.raises(EmberError, match=r"^\[rms_norm\] "):
        F.rms_norm_fwd(*sto(x), *sto(torch.randn(8, dtype=torch.float64)), 1e-5)
    with pytest.raises(EmberError, match=r"^\[softmax\] "):
        F.softmax_fwd(*sto(torch.arange(6).reshape(2, 3)), False)
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(EmberError, match=r"^\[sdpa\] "):
        F.sdpa_fwd(*sto(q), *sto(torch.randn(1, 2, 4, 9)), *sto(q), None, None, None, False)
    with pytest.raises(EmberError, match=r"^\[sdpa\] "):
        F.sdpa_fwd(*sto(q), *sto(q), *sto(q), *sto(torch.randn(3, 4)), None, False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_large_outputs_streaming_stores(dtype):
    """Outputs of several MB take the non-temporal store path; results must not change."""
    x = (torch.randn(8, 524288, dtype=torch.float64) + 0.5).to(dtype)
    w = torch.randn(x.shape[1], dtype=torch.float64).to(dtype)
    g = torch.randn(x.shape, dtype=torch.float64).to(dtype)
    (xs, xl), (ws, wl), (gs, gl) = sto(x), sto(w), sto(g)
    n = x.shape[1]
    y = tt(F.softmax_fwd(xs, xl, False), x.shape, dtype)
    close(y, torch.softmax(x.double(), -1), dtype, 1e-3)
    ys, yl = sto(y)
    xr = x.double().requires_grad_()
    (ref,) = torch.autograd.grad(torch.softmax(xr, -1), xr, g.double())
    close(tt(F.softmax_bwd(ys, yl, gs, gl, False), x.shape, dtype), ref, dtype, 1e-3)
    yr, rr = F.rms_norm_fwd(xs, xl, ws, wl, 1e-5)
    close(tt(yr, x.shape, dtype), torch.nn.functional.rms_norm(x.double(), (n,), w.double(), 1e-5), dtype, 4)
    dx, _ = F.rms_norm_bwd(xs, xl, ws, wl, rr, gs, gl)
    xr, wr = x.double().requires_grad_(), w.double()
    (ref,) = torch.autograd.grad(torch.nn.functional.rms_norm(xr, (n,), wr, 1e-5), xr, g.double())
    close(tt(dx, x.shape, dtype), ref, dtype, 4)
    yl_, m, r = F.layer_norm_fwd(xs, xl, ws, wl, None, None, 1e-5)
    close(tt(yl_, x.shape, dtype), torch.nn.functional.layer_norm(x.double(), (n,), w.double(), eps=1e-5), dtype, 4)
    dx, _, _ = F.layer_norm_bwd(xs, xl, ws, wl, m, r, gs, gl)
    (ref,) = torch.autograd.grad(torch.nn.functional.layer_norm(xr, (n,), wr, eps=1e-5), xr, g.double())
    close(tt(dx, x.shape, dtype), ref, dtype, 4)


SDPA_ISA_SCRIPT = """
import sys
import torch
sys.path.insert(0, sys.argv[1])
from test_fused_kernels import close, run_sdpa, sdpa_ref
torch.manual_seed(0)
# widths and lengths off every register tile (6 rows; 2 or 4 vectors of columns) and key tile (64)
for dtype in (torch.float32, torch.float64):
    for D, Dv, Lq, Lk in ((17, 80, 70, 133), (64, 64, 64, 64), (96, 40, 13, 200), (128, 128, 7, 65)):
        for causal in (False, True):
            q = torch.randn(2, 2, Lq, D, dtype=torch.float64).to(dtype)
            k = torch.randn(2, 2, Lk, D, dtype=torch.float64).to(dtype)
            v = torch.randn(2, 2, Lk, Dv, dtype=torch.float64).to(dtype)
            out, g, grads = run_sdpa(q, k, v, causal=causal)
            ro, ins = sdpa_ref(q, k, v, None, None, causal)
            close(out, ro, dtype)
            for a, b in zip(grads, torch.autograd.grad(ro, ins, g.double())):
                close(a, b, dtype, 4)
"""


@pytest.mark.cpu_only
def test_sdpa_every_isa_and_tile_edge():
    """Each SIMD level's attention kernels (their register tiles differ: AVX-512 adds 4-vector-wide
    tiles) match float64 torch on widths and lengths that end inside a tile."""
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    for isa in ("base", "avx2", "avx512"):
        env = dict(os.environ, EMBER_ISA=isa, PYTHONPATH=os.pathsep.join(sys.path))
        r = subprocess.run([sys.executable, "-c", SDPA_ISA_SCRIPT, here], env=env, capture_output=True, text=True,
                           timeout=300, check=False)
        assert r.returncode == 0, f"{isa}: {r.stderr[-3000:]}"


@pytest.mark.cpu_only
def test_sdpa_decode_same_bits_on_any_pool():
    """The decode path's key chunks depend on the shape only: out and lse match bit for bit on any pool."""
    q, k, v = torch.randn(1, 4, 1, 64), torch.randn(1, 2, 3000, 64), torch.randn(1, 2, 3000, 48)
    before = _C.get_num_threads()
    runs = []
    try:
        for nt in (1, 2, 3):
            _C.set_num_threads(nt)
            o, lse = F.sdpa_fwd(*sto(q), *sto(k), *sto(v), None, None, None, True)
            runs.append([tt(o, (1, 4, 1, 48), torch.float32), tt(lse, (1, 4, 1), torch.float32)])
    finally:
        _C.set_num_threads(before)
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert torch.equal(a, b)
    ro, _ = sdpa_ref(q, k, v, None, None, True)
    close(runs[0][0], ro, torch.float32)
