"""Convolutions against torch: unfold/fold, conv1d/conv2d and their transposes (values and every
gradient, strided inputs, every float dtype), the kernels' tiled and 1x1 paths at shapes that split
images into several tiles, the layers, and each bad argument (also at the C++ entry points)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from devcheck import gradcheck
from nn_check import KINDS, compare

import ember as em

from conftest import FLOATS, TOL, WIDE, WIDE_NP, expect_error, npdt

# torch warns that it copies for padding="same" with an even kernel: that is torch's business here.
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same':UserWarning")

# (kwargs, weight-channels divisor): stride, padding (ints, pairs, "same", "valid"), dilation, groups.
CONV2D_CASES = [
    dict(),
    dict(stride=2, padding=1),
    dict(stride=(2, 3), padding=(1, 0), dilation=(1, 2)),
    dict(padding="same", dilation=2),
    dict(padding="same", groups=2),
    dict(padding="valid", groups=3, stride=2),
    dict(padding=2, dilation=(2, 1), groups=6),
]
CONVT2D_CASES = [
    dict(),
    dict(stride=2, padding=1, output_padding=1),
    dict(stride=(2, 1), padding=(0, 1), dilation=(1, 2), groups=2),
    dict(stride=3, groups=3, output_padding=(2, 0)),
]


def _t(a, grad=False):
    t = torch.tensor(np.asarray(a).astype(WIDE_NP), dtype=torch.float64)  # the values ember holds, in float64
    return t.requires_grad_(grad)


def _close(got, want, dt=WIDE):
    rtol, atol = TOL[dt.name]
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=rtol * 20, atol=atol * 50)


def _check_against_torch(em_fn, torch_fn, x, w, b, kw):
    """Values and the gradients of a random weighting of the output, for input, weight and bias."""
    x, w, b = (None if a is None else np.asarray(a).astype(WIDE_NP) for a in (x, w, b))
    xv, wv, bv = em.Var(x), em.Var(w), (em.Var(b) if b is not None else None)
    out = em_fn(xv, wv, bv, **kw)
    xt, wt, bt = _t(x, True), _t(w, True), (_t(b, True) if b is not None else None)
    ref = torch_fn(xt, wt, bt, **kw)
    assert out.shape == tuple(ref.shape)
    _close(out.numpy(), ref.detach().numpy())
    g = np.random.default_rng(0).standard_normal(ref.shape).astype(WIDE_NP)
    grads = (out * em.tensor(g)).sum().backward()
    (ref * _t(g)).sum().backward()
    _close(grads[xv].numpy(), xt.grad.numpy())
    _close(grads[wv].numpy(), wt.grad.numpy())
    if b is not None:
        _close(grads[bv].numpy(), bt.grad.numpy())


@pytest.mark.parametrize("kw", CONV2D_CASES, ids=str)
def test_conv2d_matches_torch_values_and_gradients(kw, rng):
    g = kw.get("groups", 1)
    x = rng.standard_normal((2, 6, 9, 11))
    w = rng.standard_normal((6, 6 // g, 3, 2))
    _check_against_torch(em.nn.conv2d, F.conv2d, x, w, rng.standard_normal(6), kw)


@pytest.mark.parametrize("kw", CONVT2D_CASES, ids=str)
def test_conv_transpose2d_matches_torch_values_and_gradients(kw, rng):
    g = kw.get("groups", 1)
    x = rng.standard_normal((2, 6, 5, 4))
    w = rng.standard_normal((6, 4 // g if g < 3 else 2, 3, 2))
    _check_against_torch(em.nn.conv_transpose2d, F.conv_transpose2d, x, w, rng.standard_normal(w.shape[1] * g), kw)


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=3, dilation=2), dict(padding="same", groups=2)],
                         ids=str)
def test_conv1d_matches_torch(kw, rng):
    g = kw.get("groups", 1)
    x = rng.standard_normal((3, 4, 17))
    w = rng.standard_normal((6, 4 // g, 5))
    _check_against_torch(em.nn.conv1d, F.conv1d, x, w, rng.standard_normal(6), kw)


@pytest.mark.parametrize("kw", [dict(), dict(stride=3, padding=1, output_padding=2), dict(groups=2, dilation=2)],
                         ids=str)
def test_conv_transpose1d_matches_torch(kw, rng):
    g = kw.get("groups", 1)
    x = rng.standard_normal((2, 4, 7))
    w = rng.standard_normal((4, 6 // g, 3))
    _check_against_torch(em.nn.conv_transpose1d, F.conv_transpose1d, x, w, None, kw)


def test_unfold_and_fold_match_torch(rng):
    x = rng.standard_normal((2, 3, 8, 7)).astype(WIDE_NP)
    kw = dict(kernel_size=(3, 2), dilation=(1, 2), padding=(1, 2), stride=(2, 1))
    xv = em.Var(x)
    cols = em.nn.unfold(xv, **kw)
    xt = _t(x, True)
    ref = F.unfold(xt, **kw)
    _close(cols.numpy(), ref.detach().numpy())
    gc = rng.standard_normal(ref.shape).astype(WIDE_NP)
    grads = (cols * em.tensor(gc)).sum().backward()
    (ref * _t(gc)).sum().backward()
    _close(grads[xv].numpy(), xt.grad.numpy())
    back = em.nn.fold(em.tensor(gc), (8, 7), **kw)
    _close(back.numpy(), F.fold(_t(gc), (8, 7), **kw).numpy())


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_conv2d_every_float_dtype_and_strided_inputs(dt, rng):
    # A transposed (non-contiguous) input and weight, in each dtype; halves accumulate in f32.
    x = rng.standard_normal((2, 10, 9, 4)).astype(np.float32)  # (N, W, H, C) in memory
    w = rng.standard_normal((3, 2, 4, 5)).astype(np.float32)  # (kw, kh, C, O) in memory
    xe = em.tensor(x).to_dtype(dt).permute(0, 3, 2, 1)
    we = em.tensor(w).to_dtype(dt).permute(3, 2, 1, 0)
    assert not xe.layout.is_contiguous() and not we.layout.is_contiguous()
    out = em.nn.conv2d(xe, we, stride=(1, 2), padding=1)
    xr = torch.tensor(xe.numpy().astype(np.float64))
    wr = torch.tensor(we.numpy().astype(np.float64))
    ref = F.conv2d(xr, wr, stride=(1, 2), padding=1).numpy()
    assert out.dtype is dt and out.numpy().dtype == npdt(dt)
    rtol, atol = TOL[dt.name]
    scale = np.abs(ref).max()
    np.testing.assert_allclose(out.numpy().astype(np.float64), ref, rtol=rtol * 10, atol=atol * 10 + rtol * scale)


def test_gradcheck_float64_conv2d_and_transpose(rng):
    x = em.tensor(rng.standard_normal((1, 2, 5, 4)).astype(WIDE_NP))
    w = em.tensor(rng.standard_normal((3, 2, 2, 3)).astype(WIDE_NP))
    b = em.tensor(rng.standard_normal(3).astype(WIDE_NP))
    assert gradcheck(lambda x, w, b: em.nn.conv2d(x, w, b, stride=(2, 1), padding=(1, 2)), [x, w, b])
    wt = em.tensor(rng.standard_normal((2, 3, 3, 2)).astype(WIDE_NP))
    assert gradcheck(lambda x, w: em.nn.conv_transpose2d(x, w, stride=2, output_padding=1), [x, wt])


def test_conv2d_second_order(rng):
    # The backward is itself tensor ops (matmul, unfold, fold), so a gradient of a gradient works.
    x = em.Var(rng.standard_normal((1, 2, 4, 4)).astype(WIDE_NP))
    w = em.Var(rng.standard_normal((2, 2, 3, 3)).astype(WIDE_NP))
    g = (em.nn.conv2d(x, w, padding=1) ** 2).sum().backward(create_graph=True)
    gg = (g[x] ** 2).sum().backward()
    xt, wt = _t(x.numpy(), True), _t(w.numpy(), True)
    (gx,) = torch.autograd.grad((F.conv2d(xt, wt, padding=1) ** 2).sum(), xt, create_graph=True)
    (gx ** 2).sum().backward()
    _close(gg[w].numpy(), wt.grad.numpy())
    _close(gg[x].numpy(), xt.grad.numpy())


def test_unbatched_input(rng):
    x = rng.standard_normal((3, 6, 5)).astype(WIDE_NP)
    w = rng.standard_normal((2, 3, 3, 3)).astype(WIDE_NP)
    out = em.nn.conv2d(em.tensor(x), em.tensor(w), padding=1)
    _close(out.numpy(), F.conv2d(_t(x), _t(w), padding=1).numpy())
    x1 = np.ascontiguousarray(x[:, 0])  # (C, L)
    out1 = em.nn.conv1d(em.tensor(x1), em.tensor(w[:, :, 0]))
    _close(out1.numpy(), F.conv1d(_t(x1), _t(w[:, :, 0])).numpy())


def test_layers_parameters_and_forward(rng):
    conv = em.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
    names = dict(conv.named_parameters())
    assert set(names) == {"weight", "bias"}
    assert conv.weight.shape == (6, 2, 3, 3) and conv.bias.shape == (6,)
    bound = 1 / np.sqrt(2 * 9)  # torch's init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    assert np.abs(conv.weight.numpy()).max() <= bound and np.abs(conv.weight.numpy()).max() > bound / 2
    x = em.tensor(rng.standard_normal((2, 4, 8, 8)).astype(np.float32))
    assert conv(x).shape == (2, 6, 4, 4)
    tconv = em.nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1, bias=False)
    assert tconv.weight.shape == (6, 4, 3, 3) and tconv.bias is None
    assert tconv(conv(x)).shape == (2, 4, 8, 8)
    c1 = em.nn.Conv1d(3, 5, 4, padding="same", dtype=WIDE)
    assert c1.weight.dtype is WIDE and c1(em.randn(2, 3, 9, dtype=WIDE)).shape == (2, 5, 9)
    t1 = em.nn.ConvTranspose1d(5, 3, 4, stride=2)
    assert t1(em.randn(2, 5, 9)).shape == (2, 3, 20)
    # The layer is trainable end to end: one SGD step lowers a simple loss.
    y = em.tensor(rng.standard_normal((2, 6, 4, 4)).astype(np.float32))
    opt = em.optim.SGD(conv.parameters(), lr=0.05)
    before = ((conv(x) - y) ** 2).mean().item()
    for _ in range(3):
        opt.backward_step(((conv(x) - y) ** 2).mean())
    assert ((conv(x) - y) ** 2).mean().item() < before


def test_bad_arguments():
    x, w = em.randn(1, 4, 6, 6), em.randn(2, 4, 3, 3)
    expect_error(lambda: em.nn.conv2d(x, em.randn(2, 3, 3, 3)), "conv2d", em.ShapeError)
    expect_error(lambda: em.nn.conv2d(x, w, groups=3), "conv2d", em.ShapeError)
    expect_error(lambda: em.nn.conv2d(x, w, groups=0), "conv2d", em.EmberValueError)
    expect_error(lambda: em.nn.conv2d(x, w, stride=0), "conv2d", em.EmberValueError)
    expect_error(lambda: em.nn.conv2d(x, w, padding=-1), "conv2d", em.EmberValueError)
    expect_error(lambda: em.nn.conv2d(x, w, padding="same", stride=2), "conv2d", em.EmberValueError)
    expect_error(lambda: em.nn.conv2d(x, w, padding="full"), "conv2d", em.EmberValueError)
    expect_error(lambda: em.nn.conv2d(x, w, stride=1.5), "conv2d", em.DTypeError)
    expect_error(lambda: em.nn.conv2d(x, em.randn(2, 4, 7, 3)), "conv2d", em.ShapeError)  # kernel > input
    expect_error(lambda: em.nn.conv2d(x, w.to_dtype(em.float16)), "conv2d", em.DTypeError)
    expect_error(lambda: em.nn.conv2d(x.to_dtype(em.int64), w), "conv2d", em.DTypeError)
    expect_error(lambda: em.nn.conv2d(x, w, em.randn(3)), "conv2d", em.ShapeError)
    expect_error(lambda: em.nn.conv2d(em.randn(6, 6), w), "conv2d", em.ShapeError)
    expect_error(lambda: em.nn.conv2d(x, em.randn(2, 4, 3)), "conv2d", em.ShapeError)
    expect_error(lambda: em.nn.conv_transpose2d(x, em.randn(3, 2, 3, 3)), "conv_transpose2d", em.ShapeError)
    expect_error(lambda: em.nn.conv_transpose2d(x, em.randn(4, 2, 3, 3), output_padding=1), "conv_transpose2d",
                 em.EmberValueError)
    expect_error(lambda: em.nn.conv1d(em.randn(1, 4, 5), em.randn(2, 4, 3, 3)), "conv1d", em.ShapeError)
    expect_error(lambda: em.nn.unfold(em.randn(4, 6, 6), 3), "unfold", em.ShapeError)
    expect_error(lambda: em.nn.fold(em.randn(1, 10, 16), (6, 6), 3), "fold", em.ShapeError)
    expect_error(lambda: em.nn.fold(em.randn(1, 9, 15), (6, 6), 3), "fold", em.ShapeError)
    expect_error(lambda: em.nn.Conv2d(4, 6, 3, groups=4), "Conv2d", em.ShapeError)
    expect_error(lambda: em.nn.Conv2d(0, 6, 3), "Conv2d", em.EmberValueError)
    # the C++ entry points check the geometry themselves, before allocating
    expect_error(lambda: em._C.im2col(x.storage, x.layout, (1, 4, 6, 6, 3, 3, 1, 1, 0, 0, 1, 1, 0, 4)), "unfold",
                 em.ShapeError)
    expect_error(lambda: em._C.im2col(x.storage, x.layout, (1, 4, 6, 6, 3, 3, 0, 1, 0, 0, 1, 1, 4, 4)), "unfold",
                 em.EmberValueError)
    expect_error(lambda: em._C.im2col(x.storage, x.layout, (1, 4, 6, 5, 3, 3, 1, 1, 0, 0, 1, 1, 4, 4)), "unfold",
                 em.ShapeError)
    expect_error(lambda: em._C.im2col(x.storage, x.layout, (1, 4, 6, 6, 3, 3, 1, 1, 0, 0, 1, 1, 2**40, 2**40)),
                 "unfold", em.ShapeError)


# Shapes that exercise each path of the conv kernels: several position tiles per image (tiles ending
# mid-row), the 1x1 kernel read without columns, groups, stride, and one image spread over the pool.
KERNEL_CASES = {
    "3x3 tiles": ((2, 8, 23, 37), (12, 8, 3, 3), dict(padding=1)),
    "3x3 s2 groups": ((2, 8, 23, 37), (12, 4, 3, 3), dict(stride=2, padding=1, groups=2)),
    "5x3 dilated": ((1, 3, 29, 41), (4, 3, 5, 3), dict(padding=(2, 3), dilation=(2, 1))),
    "1x1": ((3, 16, 9, 13), (8, 16, 1, 1), dict()),
    "1x1 groups": ((2, 16, 9, 13), (8, 4, 1, 1), dict(groups=4)),
    "1x1 s2": ((2, 16, 9, 13), (8, 16, 1, 1), dict(stride=2)),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", list(KERNEL_CASES))
def test_conv2d_kernel_paths_match_torch(name, kind, rng, device):
    xs, ws, kw = KERNEL_CASES[name]
    compare(lambda x, w, b: em.nn.conv2d(x, w, b, **kw), lambda x, w, b: F.conv2d(x, w, b, **kw),
            [xs, ws, (ws[0],)], em.float64, kind, rng, device)


@pytest.mark.parametrize("kind", ["contiguous", "transposed"])
def test_conv1d_long_sequence_one_image(kind, rng, device):
    # whisper's front-end in miniature: one long sequence, so its positions are what spreads over threads
    for kw in (dict(padding=1), dict(stride=2, padding=1)):
        compare(lambda x, w, b, kw=kw: em.nn.conv1d(x, w, b, **kw), lambda x, w, b, kw=kw: F.conv1d(x, w, b, **kw),
                [(1, 6, 1300), (10, 6, 3), (10,)], em.float64, kind, rng, device)


def test_conv_transpose2d_tiles_match_torch(rng, device):
    kw = dict(stride=2, padding=1, output_padding=1)
    compare(lambda x, w, b: em.nn.conv_transpose2d(x, w, b, **kw), lambda x, w, b: F.conv_transpose2d(x, w, b, **kw),
            [(2, 6, 17, 19), (6, 4, 4, 4), (4,)], em.float64, "offset", rng, device)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_conv2d_kernel_dtypes(dt, rng, device):
    # halves run in float32 and round once: within a few of their ulps of the float64 result
    compare(lambda x, w: em.nn.conv2d(x, w, padding=1), lambda x, w: F.conv2d(x, w, padding=1),
            [(2, 5, 19, 23), (6, 5, 3, 3)], dt, "stepped", rng, device, lo=-1, hi=1, scale=(40, 400))
    compare(lambda x, w: em.nn.conv2d(x, w), lambda x, w: F.conv2d(x, w), [(2, 8, 7, 5), (3, 8, 1, 1)], dt,
            "transposed", rng, device, lo=-1, hi=1, scale=(40, 400))


def test_conv_second_order_through_every_direction(rng):
    # The backward of each kernel is the other two, so gradients of gradients hold for x, w and the transpose.
    x = em.Var(rng.standard_normal((2, 3, 6, 5)).astype(WIDE_NP))
    w = em.Var(rng.standard_normal((4, 3, 3, 2)).astype(WIDE_NP))
    xt, wt = _t(x.numpy(), True), _t(w.numpy(), True)
    g = (em.nn.conv2d(x, w, stride=2, padding=1) ** 2).sum().backward(create_graph=True)
    gg = ((g[w] ** 2).sum() + (g[x] ** 2).sum()).backward()
    gx, gw = torch.autograd.grad((F.conv2d(xt, wt, stride=2, padding=1) ** 2).sum(), (xt, wt), create_graph=True)
    ((gw ** 2).sum() + (gx ** 2).sum()).backward()
    _close(gg[x].numpy(), xt.grad.numpy())
    _close(gg[w].numpy(), wt.grad.numpy())
    y = em.Var(rng.standard_normal((2, 4, 3, 3)).astype(WIDE_NP))
    yt = _t(y.numpy(), True)
    wt.grad = None
    g = (em.nn.conv_transpose2d(y, em.tensor(w.numpy()).reshape(4, 3, 3, 2) * w, stride=2) ** 2).sum()
    gg = (g.backward(create_graph=True)[y] ** 2).sum().backward()
    (gy,) = torch.autograd.grad((F.conv_transpose2d(yt, wt.detach() * wt, stride=2) ** 2).sum(), yt,
                                create_graph=True)
    (gy ** 2).sum().backward()
    _close(gg[y].numpy(), yt.grad.numpy())
    _close(gg[w].numpy(), wt.grad.numpy())


def test_conv_constant_operand_gets_no_gradient(rng):
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    wv = em.Var(w)
    grads = em.nn.conv2d(em.tensor(x), wv, padding=1).sum().backward()
    assert len(grads) == 1 and wv in grads
    wt = torch.tensor(w, requires_grad=True)
    F.conv2d(torch.tensor(x), wt, padding=1).sum().backward()
    np.testing.assert_allclose(grads[wv].numpy(), wt.grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.cpu_only("the CPU pool's thread count")
def test_conv_kernels_same_bits_on_any_thread_count(rng):
    x = em.Var(rng.standard_normal((3, 8, 31, 29)).astype(np.float32))
    w = em.Var(rng.standard_normal((16, 8, 3, 3)).astype(np.float32))
    before = em.get_num_threads()
    runs = []
    try:
        for n in (1, 2, 3):
            em.set_num_threads(n)
            y = em.nn.conv2d(x, w, padding=1, stride=(1, 2))
            g = (y * y).sum().backward()
            runs.append([y.numpy(), g[x].numpy(), g[w].numpy()])
    finally:
        em.set_num_threads(before)
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            np.testing.assert_array_equal(a, b)


def test_conv_kernel_entry_points_check_their_arguments(device):
    x, w = em.randn(1, 4, 6, 6), em.randn(2, 4, 3, 3)
    gy = em.randn(1, 2, 4, 4)
    geom = (1, 4, 6, 6, 3, 3, 1, 1, 0, 0, 1, 1, 4, 4)
    C = em._C
    expect_error(lambda: C.conv2d_fwd(x.storage, x.layout, w.storage, w.layout, None, None, geom, 3), "conv2d",
                 em.ShapeError)
    expect_error(lambda: C.conv2d_fwd(x.storage, x.layout, w.storage, w.layout, None, None, geom, 0), "conv2d",
                 em.ShapeError)
    bad = em.randn(2, 4, 3, 2)
    expect_error(lambda: C.conv2d_fwd(x.storage, x.layout, bad.storage, bad.layout, None, None, geom, 1), "conv2d",
                 em.ShapeError)
    wh = w.to_dtype(em.float16)
    expect_error(lambda: C.conv2d_fwd(x.storage, x.layout, wh.storage, wh.layout, None, None, geom, 1), "conv2d",
                 em.DTypeError)
    xi = x.to_dtype(em.int64)
    expect_error(lambda: C.conv2d_fwd(xi.storage, xi.layout, w.storage, w.layout, None, None, geom, 1), "conv2d",
                 em.DTypeError)
    b = em.randn(3)
    expect_error(lambda: C.conv2d_fwd(x.storage, x.layout, w.storage, w.layout, b.storage, b.layout, geom, 1),
                 "conv2d", em.ShapeError)
    wrong = (1, 4, 6, 5, 3, 3, 1, 1, 0, 0, 1, 1, 4, 4)  # the input is (6, 6)
    expect_error(lambda: C.conv2d_fwd(x.storage, x.layout, w.storage, w.layout, None, None, wrong, 1), "conv2d",
                 em.ShapeError)
    expect_error(lambda: C.conv2d_bwd_input(x.storage, x.layout, w.storage, w.layout, geom, 1), "conv2d_bwd_input",
                 em.ShapeError)  # x given where the (1, 2, 4, 4) gradient belongs
    expect_error(lambda: C.conv2d_bwd_weight(x.storage, x.layout, x.storage, x.layout, geom, 1),
                 "conv2d_bwd_weight", em.ShapeError)
    gh = gy.to_dtype(em.float16)
    expect_error(lambda: C.conv2d_bwd_weight(x.storage, x.layout, gh.storage, gh.layout, geom, 1),
                 "conv2d_bwd_weight", em.DTypeError)
    huge = (1, 4, 6, 6, 3, 3, 1, 1, 0, 0, 1, 1, 2**40, 2**40)
    expect_error(lambda: C.conv2d_fwd(x.storage, x.layout, w.storage, w.layout, None, None, huge, 1), "conv2d",
                 em.ShapeError)
