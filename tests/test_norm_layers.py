"""GroupNorm / group_norm (the fused kernels) and BatchNorm1d/2d / batch_norm against torch: values and
every gradient on strided inputs in every float dtype, with and without each affine parameter, second
order, rows far from zero, running statistics (momentum, cumulative, unbiased variance), train/eval,
affine and track_running_stats switches, state_dict with torch's buffer names, and errors."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from devcheck import gradcheck
from nn_check import KINDS, compare, on

import ember as em

from conftest import FLOATS, WIDE_NP, expect_error


@pytest.mark.parametrize("groups", [1, 2, 6])
@pytest.mark.parametrize("kind", KINDS)
def test_group_norm_matches_torch(groups, kind, rng, device):
    compare(lambda x, w, b: em.nn.group_norm(x, groups, w, b, 1e-5),
            lambda x, w, b: F.group_norm(x, groups, w, b, 1e-5), [(3, 6, 4, 5), (6,), (6,)], em.float64, kind, rng,
            device)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_group_norm_every_dtype_and_rank(dt, rng, device):
    compare(lambda x, w, b: em.nn.group_norm(x, 2, w, b), lambda x, w, b: F.group_norm(x, 2, w, b),
            [(2, 4, 9), (4,), (4,)], dt, "transposed", rng, device)
    compare(lambda x: em.nn.group_norm(x, 3), lambda x: F.group_norm(x, 3), [(2, 6, 3, 2, 2)], dt, "offset", rng,
            device)


@pytest.mark.parametrize("kind", KINDS)
def test_group_norm_model_shape_and_parameter_combinations(kind, rng, device):
    # SD-VAE's layout in miniature (32 groups of 2 channels over a 9x11 map), each affine combination
    compare(lambda x, w, b: em.nn.group_norm(x, 32, w, b), lambda x, w, b: F.group_norm(x, 32, w, b),
            [(2, 64, 9, 11), (64,), (64,)], em.float64, kind, rng, device)
    compare(lambda x, w: em.nn.group_norm(x, 4, w), lambda x, w: F.group_norm(x, 4, w), [(3, 8, 5, 6), (8,)],
            em.float64, kind, rng, device)
    # torch's own backward fails for a bias without a weight ("tensor does not have a device"): add it after
    compare(lambda x, b: em.nn.group_norm(x, 4, None, b), lambda x, b: F.group_norm(x, 4) + b.reshape(1, 8, 1, 1),
            [(3, 8, 5, 6), (8,)], em.float64, kind, rng, device)


def test_group_norm_rows_far_from_zero(rng, device):
    # Two passes (mean, then centred squares): a large offset leaves the variance exact.
    x = (1000.0 + rng.standard_normal((2, 6, 40, 40))).astype(np.float32)
    got = em.nn.group_norm(em.tensor(x, device=device), 3).numpy()
    want = F.group_norm(torch.tensor(x.astype(np.float64)), 3).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=3e-3)


def test_group_norm_second_order(rng, device):
    dt = WIDE_NP
    x0, w0, b0 = rng.standard_normal((2, 6, 3, 4)), rng.uniform(0.5, 2, 6), rng.standard_normal(6)
    x, w, b = (em.Var(em.tensor(a.astype(dt), device=device)) for a in (x0, w0, b0))
    g = (em.nn.group_norm(x, 3, w, b) ** 3).sum().backward(create_graph=True)
    gg = ((g[x] ** 2).sum() + (g[w] ** 2).sum()).backward()
    xt, wt, bt = (torch.tensor(a.astype(dt).astype(np.float64), requires_grad=True) for a in (x0, w0, b0))
    gx, gw = torch.autograd.grad((F.group_norm(xt, 3, wt, bt) ** 3).sum(), (xt, wt), create_graph=True)
    ((gx ** 2).sum() + (gw ** 2).sum()).backward()
    tol = dict(rtol=1e-9, atol=1e-9) if dt == np.float64 else dict(rtol=2e-3, atol=2e-3)
    for mine, ref in ((x, xt), (w, wt), (b, bt)):
        np.testing.assert_allclose(gg[mine].numpy(), ref.grad.numpy(), **tol)


def test_group_norm_empty_batch(device):
    x = em.Var(em.zeros(0, 4, 3, device=device))
    w = em.Var(em.ones(4, device=device))
    y = em.nn.group_norm(x, 2, w)
    assert y.shape == (0, 4, 3)
    g = y.sum().backward()
    assert g[x].shape == (0, 4, 3) and g[w].numpy().tolist() == [0.0] * 4


def test_group_norm_kernel_entry_points_check_their_arguments(device):
    f = em._C.fused
    x, w = em.randn(2, 6, 5), em.ones(6)
    expect_error(lambda: f.group_norm_fwd(x.storage, x.layout, 4, None, None, None, None, 1e-5), "group_norm",
                 em.ShapeError)
    expect_error(lambda: f.group_norm_fwd(x.storage, x.layout, 0, None, None, None, None, 1e-5), "group_norm",
                 em.ShapeError)
    w5 = em.ones(5)
    expect_error(lambda: f.group_norm_fwd(x.storage, x.layout, 2, w5.storage, w5.layout, None, None, 1e-5),
                 "group_norm", em.ShapeError)
    xi = x.to_dtype(em.int64)
    expect_error(lambda: f.group_norm_fwd(xi.storage, xi.layout, 2, None, None, None, None, 1e-5), "group_norm",
                 em.DTypeError)
    wh = w.to_dtype(em.float16)
    expect_error(lambda: f.group_norm_fwd(x.storage, x.layout, 2, wh.storage, wh.layout, None, None, 1e-5),
                 "group_norm", em.DTypeError)
    s = em.randn(3)
    expect_error(lambda: f.group_norm_fwd(s.storage, s.layout, 1, None, None, None, None, 1e-5), "group_norm",
                 em.ShapeError)
    _, mean, rstd = f.group_norm_fwd(x.storage, x.layout, 2, None, None, None, None, 1e-5)
    expect_error(lambda: f.group_norm_bwd(x.storage, x.layout, 3, None, None, mean, rstd, x.storage, x.layout),
                 "group_norm_bwd", em.EmberValueError)  # 2 x 3 statistics needed, 2 x 2 given
    g = em.randn(2, 6, 4)
    expect_error(lambda: f.group_norm_bwd(x.storage, x.layout, 2, None, None, mean, rstd, g.storage, g.layout),
                 "group_norm_bwd", em.ShapeError)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", [(5, 3), (4, 3, 6), (2, 3, 4, 5)], ids=str)
def test_batch_norm_training_matches_torch(kind, shape, rng, device):
    rm0, rv0 = rng.standard_normal(3), rng.uniform(0.5, 2, 3)
    state = {}

    def em_fn(x, w, b):
        rm, rv = on(device, rm0), on(device, rv0)
        state["em"] = (rm, rv)
        return em.nn.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3, eps=1e-4)

    def torch_fn(x, w, b):
        rm, rv = torch.tensor(rm0), torch.tensor(rv0)
        state["torch"] = (rm, rv)
        return F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3, eps=1e-4)

    compare(em_fn, torch_fn, [shape, (3,), (3,)], em.float64, kind, rng, device)
    for mine, ref in zip(state["em"], state["torch"]):  # the running statistics, updated in place
        np.testing.assert_allclose(mine.numpy(), ref.numpy(), rtol=1e-12 if mine.dtype is em.float64 else 1e-5)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_batch_norm_eval_and_every_dtype(dt, rng, device):
    rm, rv = rng.standard_normal(4), rng.uniform(0.5, 2, 4)
    compare(lambda x, w, b: em.nn.batch_norm(x, on(device, rm), on(device, rv), w, b,
                                                   False),
            lambda x, w, b: F.batch_norm(x, torch.tensor(rm), torch.tensor(rv), w, b, False),
            [(3, 4, 5, 2), (4,), (4,)], dt, "transposed", rng, device)
    compare(lambda x: em.nn.batch_norm(x, None, None, training=True), lambda x: F.batch_norm(x, None, None, training=True),
            [(6, 4, 3)], dt, "stepped", rng, device)


def test_norm_gradcheck(rng):
    x = em.tensor(rng.standard_normal((3, 4, 2, 3)).astype(WIDE_NP))
    w, b = em.tensor(rng.uniform(0.5, 2, 4).astype(WIDE_NP)), em.tensor(rng.standard_normal(4).astype(WIDE_NP))
    rm, rv = rng.standard_normal(4).astype(WIDE_NP), rng.uniform(0.5, 2, 4).astype(WIDE_NP)

    def eval_bn(a, c, d):  # the running stats are made where fn runs (devcheck runs it on the CPU too)
        return em.nn.batch_norm(a, em.tensor(rm).to_dtype(a.dtype), em.tensor(rv).to_dtype(a.dtype), c, d, False)

    assert gradcheck(lambda a, c, d: em.nn.group_norm(a, 2, c, d), [x, w, b])
    assert gradcheck(lambda a, c, d: em.nn.batch_norm(a, None, None, c, d, True), [x, w, b])
    assert gradcheck(eval_bn, [x, w, b])


@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("cls", ["BatchNorm1d", "BatchNorm2d"])
def test_batch_norm_modules_track_like_torch(momentum, cls, rng):
    shape = (6, 3, 5) if cls == "BatchNorm1d" else (4, 3, 5, 2)
    mine, ref = getattr(em.nn, cls)(3, momentum=momentum), getattr(torch.nn, cls)(3, momentum=momentum)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(rng.uniform(0.5, 2, 3)))
        ref.bias.copy_(torch.tensor(rng.standard_normal(3)))
    mine.load_state_dict({k: em.tensor(v.numpy()) for k, v in ref.state_dict().items()})
    for step in range(3):
        x = rng.standard_normal(shape).astype(np.float32) * (step + 1) + step
        np.testing.assert_allclose(mine(em.tensor(x)).numpy(), ref(torch.tensor(x)).detach().numpy(), rtol=1e-4,
                                   atol=1e-5)
    sd = mine.state_dict()
    assert list(sd) == list(ref.state_dict())  # weight, bias, running_mean, running_var, num_batches_tracked
    for k, v in ref.state_dict().items():
        np.testing.assert_allclose(sd[k].numpy(), v.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
    assert [n for n, _ in mine.named_parameters()] == ["weight", "bias"]
    mine.eval()
    ref.eval()
    x = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(mine(em.tensor(x)).numpy(), ref(torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5)
    before = mine.running_mean.numpy().copy()
    mine(em.tensor(x))
    np.testing.assert_array_equal(mine.running_mean.numpy(), before)  # eval never updates
    mine.reset_running_stats()
    assert mine.running_mean.numpy().tolist() == [0.0] * 3 and int(mine.num_batches_tracked.item()) == 0


def test_batch_norm_switches(rng):
    x = em.tensor(rng.standard_normal((5, 3, 4)).astype(np.float32))
    t = torch.tensor(x.numpy())
    plain = em.nn.BatchNorm1d(3, affine=False, track_running_stats=False)
    assert plain.parameters() == [] and plain.state_dict() == {}
    ref = torch.nn.BatchNorm1d(3, affine=False, track_running_stats=False)
    for mode in ("train", "eval"):  # without running statistics eval mode still uses the batch's
        getattr(plain, mode)()
        getattr(ref, mode)()
        np.testing.assert_allclose(plain(x).numpy(), ref(t).numpy(), rtol=1e-4, atol=1e-5)
    bn = em.nn.BatchNorm1d(3)
    bn(x)
    bn(x)
    assert int(bn.num_batches_tracked.item()) == 2
    bn.load_state_dict({**bn.state_dict(), "num_batches_tracked": em.tensor(5)})
    bn(x)
    assert int(bn.state_dict()["num_batches_tracked"].item()) == 6
    model = em.nn.Sequential(em.nn.Conv2d(2, 3, 3), em.nn.BatchNorm2d(3), em.nn.ReLU())
    assert "1.running_var" in model.state_dict() and "1.running_var" not in dict(model.named_parameters())
    gn = em.nn.GroupNorm(2, 4)
    assert [n for n, _ in gn.named_parameters()] == ["weight", "bias"]
    np.testing.assert_allclose(gn(em.tensor(rng.standard_normal((2, 4, 3)).astype(np.float32))).numpy().mean(), 0.0,
                               atol=1e-6)
    assert em.nn.GroupNorm(2, 4, affine=False).parameters() == []


def test_norm_errors():
    x = em.randn(4, 6, 3)
    expect_error(lambda: em.nn.group_norm(x, 4), "group_norm", em.ShapeError)
    expect_error(lambda: em.nn.group_norm(x, 0), "group_norm", em.EmberValueError)
    expect_error(lambda: em.nn.group_norm(x, 2, em.ones(5)), "group_norm", em.ShapeError)
    expect_error(lambda: em.nn.group_norm(x, 2, em.ones(6, dtype="float16")), "group_norm", em.DTypeError)
    expect_error(lambda: em.nn.group_norm(em.ones(4), 2), "group_norm", em.ShapeError)
    expect_error(lambda: em.nn.group_norm(em.ones(2, 4, dtype="int64"), 2), "group_norm", em.DTypeError)
    expect_error(lambda: em.nn.batch_norm(x, em.zeros(6), None), "batch_norm", em.EmberValueError)
    expect_error(lambda: em.nn.batch_norm(x, em.zeros(5), em.ones(5)), "batch_norm", em.ShapeError)
    expect_error(lambda: em.nn.batch_norm(em.randn(1, 6), None, None, training=True), "batch_norm", em.ShapeError)
    expect_error(lambda: em.nn.GroupNorm(4, 6), "GroupNorm", em.ShapeError)
    expect_error(lambda: em.nn.BatchNorm2d(6)(x), "BatchNorm2d", em.ShapeError)
    expect_error(lambda: em.nn.BatchNorm1d(5)(x), "BatchNorm1d", em.ShapeError)
    expect_error(lambda: em.nn.BatchNorm1d(0), "BatchNorm1d", em.ShapeError)
    bn = em.nn.BatchNorm1d(6)
    expect_error(lambda: bn.load_state_dict({**bn.state_dict(), "running_mean": em.zeros(5)}), "load_state_dict",
                 em.ShapeError)
    expect_error(lambda: bn.load_state_dict({"weight": em.ones(6), "bias": em.zeros(6)}), "load_state_dict",
                 em.EmberValueError)


# ----------------------------------------------------------------------------- the fused batch_norm kernels
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
@pytest.mark.parametrize("shape", [(7, 2), (300, 3, 2), (3, 2, 4, 3, 5), (2, 1, 130, 130)], ids=str)
def test_batch_norm_kernel_paths_match_torch(training, affine, shape, rng, device):
    # (7, 2), (300, 3, 2): the rows path for few positions (one block of samples, three); (2, 1, 130, 130):
    # one channel split into pieces.
    c = shape[1]
    rm0, rv0 = rng.standard_normal(c), rng.uniform(0.5, 2, c)
    kind = "stepped" if len(shape) > 2 else "transposed"

    def em_fn(x, w, b):
        return em.nn.batch_norm(x, on(device, rm0), on(device, rv0), w if affine in ("both", "weight") else None,
                                b if affine in ("both", "bias") else None, training, 0.2, 1e-3)

    def torch_fn(x, w, b):
        return F.batch_norm(x, torch.tensor(rm0), torch.tensor(rv0), w if affine in ("both", "weight") else None,
                            b if affine in ("both", "bias") else None, training, 0.2, 1e-3)

    # dw sums 33800 products that cancel to O(1): float32 (Metal) leaves an absolute error of ~1e-8 of their size.
    scale = (20, 2000) if shape[1] == 1 else (20, 50)
    compare(em_fn, torch_fn, [shape, (c,), (c,)], em.float64, kind, rng, device, scale=scale)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_batch_norm_training_every_dtype_with_float32_running_stats(dt, rng, device):
    # Half inputs with float32 running statistics (torch's mixed mode): the update is written in place.
    rm0, rv0 = rng.standard_normal(4), rng.uniform(0.5, 2, 4)
    state = {}

    def em_fn(x, w, b):
        state["em"] = rm, rv = em.tensor(rm0.astype(np.float32), device=device), em.tensor(
            rv0.astype(np.float32), device=device)
        return em.nn.batch_norm(x, rm, rv, w, b, True, 0.25)

    def torch_fn(x, w, b):
        state["torch"] = rm, rv = torch.tensor(rm0), torch.tensor(rv0)
        return F.batch_norm(x, rm, rv, w, b, True, 0.25)

    x = compare(em_fn, torch_fn, [(3, 4, 5, 6), (4,), (4,)], dt, "offset", rng, device)
    assert x.dtype is dt
    tol = {"float16": 2e-3, "bfloat16": 2e-2}.get(dt.name, 1e-5)
    for mine, ref in zip(state["em"], state["torch"]):
        assert mine.dtype is em.float32
        np.testing.assert_allclose(mine.numpy(), ref.numpy(), rtol=tol, atol=tol)


def test_batch_norm_running_stats_through_strided_views(rng, device):
    # The running statistics may be views (every other element, at an offset) of another dtype: the
    # update lands in exactly their elements and nowhere else.
    base_m = rng.standard_normal(9).astype(WIDE_NP)
    base_v = rng.uniform(0.5, 2, 9).astype(WIDE_NP)
    em_m, em_v = em.tensor(base_m, device=device), em.tensor(base_v, device=device)
    rm, rv = em_m[1::2], em_v[1::2]
    x = rng.standard_normal((5, 4, 3)).astype(np.float32)
    em.nn.batch_norm(em.tensor(x, device=device), rm, rv, training=True, momentum=0.3)
    trm, trv = torch.tensor(base_m.astype(np.float64)), torch.tensor(base_v.astype(np.float64))
    F.batch_norm(torch.tensor(x.astype(np.float64)), trm[1::2], trv[1::2], training=True, momentum=0.3)
    np.testing.assert_allclose(em_m.numpy(), trm.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(em_v.numpy(), trv.numpy(), rtol=1e-5, atol=1e-6)
    assert em_m.numpy()[0::2].tolist() == base_m[0::2].tolist()  # the other elements are untouched
    y = em.nn.batch_norm(em.tensor(x, device=device), rm, rv, training=False).numpy()
    want = F.batch_norm(torch.tensor(x.astype(np.float64)), trm[1::2], trv[1::2], training=False).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)

def test_batch_norm_channels_far_from_zero(rng, device):
    # Two passes (mean, then centred squares): a large offset leaves the variance exact.
    x = (1e4 + rng.standard_normal((4, 3, 30, 30))).astype(np.float32)
    rm, rv = em.zeros(3, device=device), em.ones(3, device=device)
    got = em.nn.batch_norm(em.tensor(x, device=device), rm, rv, training=True).numpy()
    trm, trv = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    want = F.batch_norm(torch.tensor(x.astype(np.float64)), trm, trv, training=True).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-2)
    np.testing.assert_allclose(rv.numpy(), trv.numpy(), rtol=2e-2)


@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("dt", [em.float32, em.float16], ids=lambda d: d.name)
def test_batch_norm2d_running_stats_over_steps_on_device(momentum, dt, rng, device):
    mine = em.nn.BatchNorm2d(5, momentum=momentum, dtype=dt, device=device)
    ref = torch.nn.BatchNorm2d(5, momentum=momentum, dtype=torch.float64)
    tol = 1e-4 if dt is em.float32 else 1e-2
    for step in range(4):
        x = (rng.standard_normal((3, 5, 4, 6)) * (step + 1) + step).astype(np.float32)
        np.testing.assert_allclose(mine(em.tensor(x, dtype=dt, device=device)).numpy().astype(np.float64),
                                   ref(torch.tensor(x.astype(np.float64))).detach().numpy(), rtol=tol, atol=tol)
    for name in ("running_mean", "running_var"):
        got = getattr(mine, name)
        assert got.dtype is dt and got.device == em.Device(device)
        np.testing.assert_allclose(got.numpy().astype(np.float64), getattr(ref, name).numpy(), rtol=tol, atol=tol,
                                   err_msg=name)
    assert int(mine.num_batches_tracked.item()) == 4


def test_batch_norm_gradcheck_every_path(rng):
    # Rank 2 (channel-major), rank 5, train and eval, affine and plain: finite differences in float64.
    rm, rv = rng.standard_normal(3).astype(WIDE_NP), rng.uniform(0.5, 2, 3).astype(WIDE_NP)
    for shape in ((6, 3), (2, 3, 2, 2, 3)):
        x = em.tensor(rng.standard_normal(shape).astype(WIDE_NP))
        w, b = em.tensor(rng.uniform(0.5, 2, 3).astype(WIDE_NP)), em.tensor(rng.standard_normal(3).astype(WIDE_NP))
        assert gradcheck(lambda a, c, d: em.nn.batch_norm(a, None, None, c, d, True, eps=1e-3), [x, w, b])
        assert gradcheck(lambda a: em.nn.batch_norm(a, None, None, training=True), [x])
        assert gradcheck(lambda a, c: em.nn.batch_norm(a, em.tensor(rm).to_dtype(a.dtype),
                                                       em.tensor(rv).to_dtype(a.dtype), c, None, False), [x, w])
        assert gradcheck(lambda a: em.nn.batch_norm(a, em.tensor(rm).to_dtype(a.dtype),
                                                    em.tensor(rv).to_dtype(a.dtype), None, None, False), [x])


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_second_order(training, rng, device):
    dt = WIDE_NP
    x0, w0, b0 = rng.standard_normal((4, 3, 2, 3)), rng.uniform(0.5, 2, 3), rng.standard_normal(3)
    rm0, rv0 = rng.standard_normal(3).astype(dt), rng.uniform(0.5, 2, 3).astype(dt)
    x, w, b = (em.Var(em.tensor(a.astype(dt), device=device)) for a in (x0, w0, b0))
    y = em.nn.batch_norm(x, em.tensor(rm0, device=device), em.tensor(rv0, device=device), w, b, training)
    g = (y ** 3).sum().backward(create_graph=True)
    gg = ((g[x] ** 2).sum() + (g[w] ** 2).sum()).backward()
    xt, wt, bt = (torch.tensor(a.astype(dt).astype(np.float64), requires_grad=True) for a in (x0, w0, b0))
    yt = F.batch_norm(xt, torch.tensor(rm0.astype(np.float64)), torch.tensor(rv0.astype(np.float64)), wt, bt, training)
    gx, gw = torch.autograd.grad((yt ** 3).sum(), (xt, wt), create_graph=True)
    ((gx ** 2).sum() + (gw ** 2).sum()).backward()
    tol = dict(rtol=1e-9, atol=1e-9) if dt == np.float64 else dict(rtol=2e-3, atol=2e-3)
    for mine, ref in ((x, xt), (w, wt), (b, bt)):
        np.testing.assert_allclose(gg[mine].numpy(), ref.grad.numpy(), **tol)


def test_batch_norm_empty_batch_and_single_value(device):
    rm, rv = em.zeros(4, device=device), em.ones(4, device=device)
    x, w = em.Var(em.zeros(0, 4, 3, device=device)), em.Var(em.ones(4, device=device))
    y = em.nn.batch_norm(x, rm, rv, w, None, True)
    assert y.shape == (0, 4, 3)
    g = y.sum().backward()
    assert g[x].shape == (0, 4, 3) and g[w].numpy().tolist() == [0.0] * 4
    assert rm.numpy().tolist() == [0.0] * 4 and rv.numpy().tolist() == [1.0] * 4  # torch leaves them too
    one = em.randn(1, 4, device=device)
    for fn in (lambda: em.nn.batch_norm(one, rm, rv, training=True), lambda: em.nn.batch_norm(one, None, None),
               lambda: em.nn.BatchNorm1d(4, device=device)(one)):
        err = expect_error(fn, "batch_norm", em.ShapeError)
        assert isinstance(err, ValueError)  # torch raises ValueError
    bn = em.nn.BatchNorm1d(4, device=device)
    bn.eval()
    np.testing.assert_allclose(bn(one).numpy(), one.numpy() / np.sqrt(1 + 1e-5), rtol=1e-6)  # eval: running stats


def test_batch_norm_running_update_is_seen_by_autograd(rng, device):
    # The running statistics are written in place: a graph that saved one refuses a stale backward.
    x = em.Var(em.tensor(rng.standard_normal((4, 3)).astype(np.float32), device=device))
    rm, rv = em.zeros(3, device=device), em.ones(3, device=device)
    z = (x * rm).sum()
    em.nn.batch_norm(em.tensor(rng.standard_normal((4, 3)).astype(np.float32), device=device), rm, rv,
                     training=True)
    with pytest.raises(em.EmberError):
        z.backward()


def test_batch_norm_kernel_entry_points_check_their_arguments(device):
    f = em._C.fused
    x, w, rm, rv = em.randn(4, 3, 5), em.ones(3), em.zeros(3), em.ones(3)
    S = (lambda t: (None, None) if t is None else (t.storage, t.layout))

    def fwd(x=x, w=None, b=None, rm=rm, rv=rv, training=True, eps=1e-5):
        return f.batch_norm_fwd(x.storage, x.layout, *S(w), *S(b), *S(rm), *S(rv), training, 0.1, eps)

    expect_error(lambda: fwd(rv=None), "batch_norm", em.EmberValueError)
    expect_error(lambda: fwd(rm=None, rv=None, training=False), "batch_norm", em.EmberValueError)
    expect_error(lambda: fwd(w=em.ones(4)), "batch_norm", em.ShapeError)
    expect_error(lambda: fwd(b=em.ones(3, dtype="float16")), "batch_norm", em.DTypeError)
    expect_error(lambda: fwd(rm=em.zeros(4)), "batch_norm", em.ShapeError)
    expect_error(lambda: fwd(rv=em.ones(3, dtype="int64")), "batch_norm", em.DTypeError)
    expect_error(lambda: fwd(x=x.to_dtype(em.int64)), "batch_norm", em.DTypeError)
    expect_error(lambda: fwd(x=em.randn(3)), "batch_norm", em.ShapeError)
    expect_error(lambda: fwd(x=em.randn(1, 3)), "batch_norm", em.ShapeError)
    expect_error(lambda: fwd(eps=-1.0), "batch_norm", em.EmberValueError)
    expect_error(lambda: fwd(eps=float("nan")), "batch_norm", em.EmberValueError)
    before = rm.numpy().tolist()
    expect_error(lambda: fwd(w=em.ones(4)), "batch_norm", em.ShapeError)
    assert rm.numpy().tolist() == before  # a refused call writes nothing
    y, mean, rstd = fwd(w=w)
    g = em.randn(4, 3, 5)
    bwd = (lambda x=x, g=g, mean=mean, w=w: f.batch_norm_bwd(x.storage, x.layout, *S(w), mean, rstd, g.storage,
                                                             g.layout, True))
    expect_error(lambda: bwd(g=em.randn(4, 3, 4)), "batch_norm_bwd", em.ShapeError)
    expect_error(lambda: bwd(g=em.randn(4, 3, 5, dtype="float16")), "batch_norm_bwd", em.DTypeError)
    expect_error(lambda: bwd(mean=em.zeros(2).storage), "batch_norm_bwd", em.EmberValueError)
    expect_error(lambda: bwd(w=em.ones(2)), "batch_norm_bwd", em.ShapeError)
    xs = em.randn(4, 5, 3)
    expect_error(lambda: bwd(x=xs, g=em.randn(4, 5, 3)), "batch_norm_bwd", em.EmberValueError)  # 5 stats needed


def test_batch_norm_python_errors(device):
    x = em.randn(4, 3, 2, device=device)
    expect_error(lambda: em.nn.batch_norm(x, em.zeros(3, dtype="int64", device=device), em.ones(3, device=device)),
                 "batch_norm", em.ShapeError)
    expect_error(lambda: em.nn.batch_norm(x, None, None, em.ones(3, dtype="float16", device=device)), "batch_norm",
                 em.DTypeError)
    expect_error(lambda: em.nn.batch_norm(x, None, None, [1.0, 1.0, 1.0]), "batch_norm", em.EmberTypeError)
    expect_error(lambda: em.nn.batch_norm(x.to_dtype(em.int64), None, None), "batch_norm", em.DTypeError)
    expect_error(lambda: em.nn.batch_norm(x, None, None, momentum="a"), "batch_norm", em.EmberTypeError)
