"""A PyTorch user's first hour (issue 18): 0-d masks, strict view, index errors naming the right dim,
the names torch users type (to, float, stride, mT, expand(-1), clamp(min=), the functional
namespace, nn.Sequential and activation modules), the torch gradient names ending in errors that
say where gradients are, backward without a path, needs_input_grad, and deepcopy / pickle.

Data is built in WIDE (float64 where the device holds it, else float32) and compared with float64
references within CLOSE: the float64 bounds on the CPU, float32's (TOL) on a device without float64."""
import copy
import pickle

import numpy as np
import pytest
import torch
from devcheck import gradcheck

import ember as em

from conftest import TOL, WIDE, WIDE_NP, expect_error

F64 = WIDE is em.float64
# assert_allclose bounds of a WIDE result against a float64 reference: the float64 bound rtol64 where the
# device holds float64, float32's rounding bound (TOL) where it computes in float32.
def close(rtol64=1e-7):
    return {"rtol": rtol64} if F64 else dict(zip(("rtol", "atol"), TOL["float32"]))


# ----------------------------------------------------------------------------- §1 silent wrong answers
@pytest.mark.parametrize("flag", [True, False])
def test_0d_masks_index_like_torch(flag):
    a = em.tensor([1.0, 2.0, 3.0])
    ta = torch.tensor([1.0, 2.0, 3.0])
    mask = em.tensor(1.0).gt(0) if flag else em.tensor(1.0).lt(0)
    tmask = torch.tensor(1.0) > 0 if flag else torch.tensor(1.0) < 0
    for idx, tidx in ((mask, tmask), (flag, flag), (np.bool_(flag), flag), (np.array(flag), flag)):
        got, ref = a[idx], ta[tidx]
        assert got.shape == tuple(ref.shape)
        np.testing.assert_array_equal(got.numpy(), ref.numpy())
    t2, r2 = em.tensor(np.arange(6.0, dtype=WIDE_NP).reshape(2, 3)), torch.arange(6.0).reshape(2, 3)
    assert t2[:, flag].shape == tuple(r2[:, flag].shape) and t2[..., flag].shape == tuple(r2[..., flag].shape)
    assert t2[0, flag].shape == tuple(r2[0, flag].shape)


@pytest.mark.parametrize("flag", [True, False])
def test_0d_mask_assignment_writes_all_or_nothing(flag):
    a, ta = em.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.0])
    a[em.tensor(1.0).gt(0) if flag else em.tensor(1.0).lt(0)] = 5
    ta[torch.tensor(flag)] = 5
    np.testing.assert_array_equal(a.numpy(), ta.numpy())
    a[flag] = 7
    ta[flag] = 7
    np.testing.assert_array_equal(a.numpy(), ta.numpy())


def test_0d_mask_with_index_arrays_is_refused():
    expect_error(lambda: em.zeros(3, 3)[True, [0, 1]], "index", em.UnsupportedOp)


def test_view_never_copies():
    t = em.tensor(np.arange(6.0, dtype=WIDE_NP).reshape(2, 3))
    expect_error(lambda: t.t().view(-1), "view", em.ShapeError)
    expect_error(lambda: t[:, ::2].view(4), "view", em.ShapeError)
    v = t.view(3, 2)
    v.fill_(0)
    assert t.numpy().sum() == 0  # the view wrote through to t
    r = em.tensor(np.arange(6.0, dtype=WIDE_NP).reshape(2, 3))
    flat = r.t().reshape(-1)  # reshape still copies when it must
    np.testing.assert_array_equal(flat.numpy(), np.arange(6.0).reshape(2, 3).T.reshape(-1))
    assert r.t().t().view(6).shape == (6,)  # a layout that is contiguous again views fine
    x = em.Var(np.ones((2, 3), dtype=WIDE_NP))
    gs = (x.view(6) * em.tensor(np.arange(6.0, dtype=WIDE_NP))).sum().backward()  # differentiable like reshape
    np.testing.assert_array_equal(gs[x].numpy(), np.arange(6.0).reshape(2, 3))


def test_index_errors_name_the_dim_of_the_tensor():
    t3 = em.randn(2, 3, 4)
    e = expect_error(lambda: t3[0, 7], "index", em.IndexOutOfRange)
    assert "dim 1 of size 3" in str(e)
    e = expect_error(lambda: t3[1, 0, 9], "index", em.IndexOutOfRange)
    assert "dim 2 of size 4" in str(e)
    e = expect_error(lambda: t3[..., -5], "index", em.IndexOutOfRange)
    assert "dim 2 of size 4" in str(e)
    e = expect_error(lambda: t3[None, 1, 3], "index", em.IndexOutOfRange)
    assert "dim 1 of size 3" in str(e)
    e = expect_error(lambda: t3[:, em.tensor(5)], "index", em.IndexOutOfRange)
    assert "dim 1 of size 3" in str(e)


# ----------------------------------------------------------------------------- §3 names
def test_to_takes_dtype_device_tensor_and_keywords(device):
    t = em.tensor([1.5, 2.5], device=device)
    assert t.to(em.float16).dtype is em.float16 and t.to("float32").dtype is em.float32
    assert t.to(np.float16).dtype is em.float16
    assert t.to(str(device)) is t and t.to(device) is t and t.to(dtype=em.float32) is t
    assert t.to(em.zeros(1, dtype=em.bfloat16)).dtype is em.bfloat16
    assert t.to(str(device), em.float16).dtype is em.float16
    assert t.to(device=str(device), dtype="float16").dtype is em.float16
    c = t.to(em.float32, copy=True)
    assert c is not t and not c.storage.same_buffer(t.storage)
    expect_error(lambda: t.to(em.float16, em.float32), "to", em.EmberValueError)
    expect_error(lambda: t.to(object()), "to", em.EmberValueError)
    x = em.Var([1.0, 2.0], device=device)
    for dt in {WIDE, em.float64 if F64 else em.float16}:  # a recorded cast, wider and (off the CPU) narrower
        gs = x.to(dt).sum().backward()
        assert gs[x].dtype is em.float32  # the gradient comes back in the input's dtype
    if not F64:
        expect_error(lambda: x.to(em.float64), "to_dtype", em.DTypeError)


def test_dtype_shortcuts_and_layout_names(device):
    t = em.tensor([[1.7, -2.7, 3.0]], device=device)
    ref = torch.tensor([[1.7, -2.7, 3.0]])
    for name in ("float", "half", "bfloat16", "double", "long"):
        if name == "double" and not F64:  # the device has no float64: the shortcut refuses, as to_dtype does
            expect_error(t.double, "to_dtype", em.DTypeError)
            continue
        got, want = getattr(t, name)(), getattr(ref, name)()
        assert got.dtype.name == str(want.dtype).replace("torch.", "")
        np.testing.assert_array_equal(got.numpy().astype(np.float64), want.double().numpy())
    r = torch.zeros(2, 3, 4)
    e = em.zeros(2, 3, 4)
    assert e.stride() == r.stride() and e.stride(1) == r.stride(1) and e.stride(-1) == r.stride(-1)
    assert e.permute(2, 0, 1).stride() == r.permute(2, 0, 1).stride()
    assert e.dim() == r.dim() and e.is_contiguous() and not e.transpose(0, 1).is_contiguous()
    assert e.mT.shape == tuple(r.mT.shape) and e.mT.stride() == r.mT.stride()
    expect_error(lambda: e.stride(3), "stride", em.IndexOutOfRange)
    expect_error(lambda: em.zeros(3).mT, "mT", em.ShapeError)


def test_expand_with_minus_one_and_broadcast_to():
    x = em.tensor([[1.0], [2.0]])
    tx = torch.tensor([[1.0], [2.0]])
    for args in ((4, -1, 3), (-1, 5), (2, 2, 1)):
        np.testing.assert_array_equal(x.expand(*args).numpy(), tx.expand(*args).numpy())
    np.testing.assert_array_equal(em.broadcast_to(x, (3, 2, 4)).numpy(), torch.broadcast_to(tx, (3, 2, 4)).numpy())
    np.testing.assert_array_equal(em.broadcast_to(np.ones(3, WIDE_NP), (2, 3)).numpy(), np.ones((2, 3)))
    expect_error(lambda: x.expand(-1, 2, 3), "expand", em.ShapeError)
    expect_error(lambda: x.expand(3), "expand", em.ShapeError)
    v = em.Var([[1.0], [2.0]])
    np.testing.assert_array_equal(v.expand(-1, 3).sum().backward()[v].numpy(), [[3.0], [3.0]])


def test_clamp_keywords_match_torch(rng):
    a = rng.standard_normal(20).astype(np.float32)
    t, r = em.tensor(a), torch.tensor(a)
    for kw in ({"min": -0.5}, {"max": 0.5}, {"min": -0.5, "max": 0.5}, {"min": 1.0, "max": -1.0}):
        np.testing.assert_array_equal(t.clamp(**kw).numpy(), r.clamp(**kw).numpy())
        np.testing.assert_array_equal(em.clamp(t, **kw).numpy(), torch.clamp(r, **kw).numpy())
    np.testing.assert_array_equal(t.clamp(-0.5, 0.5).numpy(), r.clamp(-0.5, 0.5).numpy())
    expect_error(lambda: t.clamp(0.0, min=1.0), "clamp", em.EmberValueError)


UNARY_REF = {"exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "sqrt": np.sqrt,
             "abs": np.abs, "neg": np.negative, "relu": lambda v: np.maximum(v, 0), "ceil": np.ceil,
             "floor": np.floor, "sign": np.sign, "sigmoid": lambda v: 1 / (1 + np.exp(-v))}


@pytest.mark.parametrize("name", sorted(UNARY_REF))
def test_functional_unary_takes_tensors_arrays_and_scalars(rng, name):
    a = rng.uniform(0.5, 2.0, (3, 4)).astype(WIDE_NP)
    fn = getattr(em, name)
    np.testing.assert_allclose(fn(em.tensor(a)).numpy(), UNARY_REF[name](a.astype(np.float64)), **close(1e-12))
    out = fn(a)  # a numpy array keeps its dtype
    assert isinstance(out, em.Tensor) and out.dtype is WIDE
    np.testing.assert_allclose(fn(1.5).item(), UNARY_REF[name](np.float32(1.5)), rtol=1e-6)
    assert (name in em.__all__ or name == "abs") and fn.__doc__ and "Returns:" in fn.__doc__


def test_functional_binary_reduction_and_friends(rng):
    a, b = rng.standard_normal((3, 4)).astype(WIDE_NP), rng.standard_normal(4).astype(WIDE_NP)
    ta, tb = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)  # float64 references
    for name in ("add", "sub", "mul", "div", "maximum", "minimum", "lt", "ge", "eq"):
        ours = getattr(em, name)(em.tensor(a), b)
        ref = getattr(torch, name)(ta, tb)
        np.testing.assert_allclose(ours.numpy().astype(np.float64), ref.double().numpy(), **close())
        rev = getattr(em, name)(b, em.tensor(a))  # a non-tensor first operand
        np.testing.assert_allclose(rev.numpy().astype(np.float64), getattr(torch, name)(tb, ta).double().numpy(),
                                   **close())
    assert em.sub(1.0, em.tensor([3.0])).item() == -2.0 and em.div(1.0, em.tensor([4.0])).item() == 0.25
    assert abs(em.pow(2.0, em.tensor([3.0])).item() - 8.0) <= np.spacing(np.float32(8.0))  # pow: 1 ulp (MSL)
    for name in ("sum", "mean", "max", "min", "argmax", "argmin", "logsumexp"):
        for dim in (None, 1, (0, 1)):
            ours = getattr(em, name)(em.tensor(a), dim) if dim is not None else getattr(em, name)(em.tensor(a))
            tf = getattr(torch, name)
            if dim is None:
                ref = tf(ta) if name != "logsumexp" else tf(ta, (0, 1))
            elif name in ("max", "min"):
                ref = tf(ta, dim).values if isinstance(dim, int) else getattr(torch, "a" + name)(ta, dim)
            elif name in ("argmax", "argmin") and isinstance(dim, tuple):
                continue
            else:
                ref = tf(ta, dim)
            np.testing.assert_allclose(ours.numpy().astype(np.float64), ref.double().numpy(), **close(1e-12))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(em.sum(a, 0).numpy(), a64.sum(0), **close())
    np.testing.assert_allclose(em.matmul(em.tensor(a), em.tensor(b)).numpy(), a64 @ b64, **close(1e-12))
    np.testing.assert_allclose(em.softmax(em.tensor(a), 0).numpy(), torch.softmax(ta, 0).numpy(), **close(1e-12))
    np.testing.assert_allclose(em.log_softmax(em.tensor(a), -1).numpy(), torch.log_softmax(ta, -1).numpy(),
                               **close(1e-12))
    assert em.transpose(em.tensor(a), 0, 1).shape == (4, 3) and em.reshape(em.tensor(a), 12).shape == (12,)
    assert em.permute(em.tensor(a), 1, 0).shape == (4, 3) and em.flatten(em.tensor(a)).shape == (12,)
    assert em.unsqueeze(em.tensor(a), 0).shape == (1, 3, 4) and em.squeeze(em.zeros(1, 3)).shape == (3,)
    expect_error(lambda: em.exp("x"), "exp", em.EmberTypeError)
    expect_error(lambda: em.add("x", 1), "add", em.EmberTypeError)


def test_sequential_takes_modules_and_activations_match_torch(rng):
    seq = em.nn.Sequential(em.nn.Linear(4, 8), em.nn.GELU(), em.nn.Linear(8, 8), em.nn.SiLU(),
                           em.nn.Linear(8, 8), em.nn.Tanh(), em.nn.Linear(8, 8), em.nn.Sigmoid(),
                           em.nn.Linear(8, 3), em.nn.ReLU(), em.nn.Identity())
    tseq = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 8), torch.nn.SiLU(),
                               torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8), torch.nn.Sigmoid(),
                               torch.nn.Linear(8, 3), torch.nn.ReLU(), torch.nn.Identity()).double()
    assert [n for n, _ in seq.named_parameters()] == [n for n, _ in tseq.named_parameters()]
    with torch.no_grad():
        for (_, p), (_, tp) in zip(seq.named_parameters(), tseq.named_parameters()):
            tp.copy_(torch.tensor(p.numpy().astype(np.float64)))
    x = rng.standard_normal((5, 4))
    np.testing.assert_allclose(seq(em.tensor(x.astype(np.float32))).numpy(), tseq(torch.tensor(x)).detach().numpy(),
                               rtol=1e-4, atol=1e-5)
    assert len(em.nn.Sequential([em.nn.ReLU(), em.nn.Tanh()])) == 2  # the list form still works
    expect_error(lambda: em.nn.Sequential(em.nn.ReLU(), 3), "Sequential", em.EmberTypeError)


def test_mlp_errors_name_its_arguments():
    expect_error(lambda: em.nn.MLP(0, 4), "MLP", em.ShapeError)
    e = expect_error(lambda: em.nn.MLP(4, -1), "MLP", em.ShapeError)
    assert "hidden" in str(e)
    expect_error(lambda: em.nn.MLP(4.5, 4), "MLP", em.EmberTypeError)
    expect_error(lambda: em.nn.MLP(4, 4, activation="tanhh"), "MLP", em.EmberValueError)
    expect_error(lambda: em.nn.GatedMLP(4, 0), "GatedMLP", em.ShapeError)


def test_torch_gradient_names_say_where_gradients_are():
    v = em.Var([1.0, 2.0])
    model = em.nn.Linear(2, 2)
    opt = em.optim.SGD(model.parameters(), lr=0.1)
    calls = [lambda: v.grad, lambda: setattr(v, "requires_grad", True), lambda: em.ones(2).requires_grad_(),
             lambda: v.retain_grad(), lambda: opt.zero_grad(), lambda: opt.step(), lambda: model.zero_grad(),
             lambda: em.tensor([1.0], requires_grad=True), lambda: em.zeros(2, requires_grad=True),
             lambda: em.randn(2, requires_grad=True)]
    for fn in calls:
        with pytest.raises(em.GradientsInStore) as ei:
            fn()
        msg = str(ei.value)
        assert msg.startswith("[") and "backward()" in msg and ("g[" in msg or "opt.step(g)" in msg), msg
        assert isinstance(ei.value, AttributeError) and isinstance(ei.value, em.EmberError)
    # on a Var (a parameter) requires_grad_ is torch's freeze switch, in place
    assert v.requires_grad_(False) is v and not v.is_variable and v.requires_grad_().is_variable
    assert v.requires_grad and not em.tensor([1.0]).requires_grad and (v * 2).requires_grad
    assert em.Var([1.0], requires_grad=True).is_variable  # torch's spelling is accepted where it holds
    with pytest.raises(em.GradientsInStore, match=r"^\[Var\] .*em\.tensor"):
        em.Var([1.0], requires_grad=False)
    assert not hasattr(v, "grad")  # hasattr-based duck typing sees no .grad


def test_backward_without_a_path_raises():
    x = em.Var([1.0, 2.0])
    with em.no_grad():
        y = (x * 3).sum()
    expect_error(y.backward, "backward", em.NoGradientPath)
    expect_error(lambda: (em.tensor([1.0, 2.0]) * 3).sum().backward(), "backward", em.NoGradientPath)
    expect_error(lambda: x.argmax().to_dtype(em.float32).backward(), "backward", em.NoGradientPath)
    assert isinstance(em.NoGradientPath("x"), RuntimeError)  # torch raises RuntimeError here


def test_backward_computes_only_gradients_that_lead_to_a_variable(monkeypatch, rng):
    from ember import elementwise  # mul's backward rule lives beside mul

    calls = []
    orig = elementwise._sum_to
    monkeypatch.setattr(elementwise, "_sum_to", lambda g, shape: calls.append(shape) or orig(g, shape))
    x = em.Var(rng.standard_normal((3, 4)).astype(WIDE_NP))
    up = em.tensor(rng.standard_normal((3, 4)).astype(WIDE_NP))
    gs = (x * up).sum().backward()
    assert calls == [(3, 4)] and list(gs.ids()) == [x.id]  # the constant's side is never computed
    calls.clear()
    c = em.tensor(rng.standard_normal(4).astype(WIDE_NP))
    h = c * 2.0 + 1.0  # an intermediate built from constants only
    gs = (x * h).sum().backward()
    assert calls == [(3, 4)] and h not in gs and c not in gs
    np.testing.assert_allclose(gs[x].numpy(), np.broadcast_to(h.numpy(), (3, 4)))


@pytest.mark.parametrize("dtype", [em.float32, em.bfloat16, em.int64, em.uint8])
def test_deepcopy_and_pickle_of_tensors_and_vars(rng, dtype):
    base = em.tensor(rng.uniform(-3, 3, (3, 4)).astype(WIDE_NP)).to_dtype(dtype)
    view = base.t()[1:]  # strided, offset
    for t in (base, view, em.Var(base) if dtype.is_float else base):
        for c in (copy.deepcopy(t), pickle.loads(pickle.dumps(t))):
            assert type(c) is type(t) and c.is_variable == t.is_variable and c.dtype is t.dtype
            np.testing.assert_array_equal(c.numpy(), t.numpy())
            assert not c.storage.same_buffer(t.storage) and c.op is None
    x = em.Var([1.0, 2.0])
    y = x * 3
    assert copy.deepcopy(y).op is None  # the graph does not travel
    pair = copy.deepcopy([x, x])
    assert pair[0] is pair[1]  # shared references stay shared


def test_deepcopy_and_pickle_of_modules_make_independent_targets(rng):
    model = em.nn.Sequential(em.nn.Linear(3, 4), em.nn.ReLU(), em.nn.MLP(4, 8, activation="relu"))
    ema = copy.deepcopy(model)
    loaded = pickle.loads(pickle.dumps(model))
    x = em.tensor(rng.standard_normal((2, 3)).astype(np.float32))
    for m in (ema, loaded):
        np.testing.assert_array_equal(m(x).numpy(), model(x).numpy())
        assert all(p.is_variable for p in m.parameters())
        assert [n for n, _ in m.named_parameters()] == [n for n, _ in model.named_parameters()]
    em.optim.SGD(model.parameters(), lr=1.0).backward_step(model(x).sum())
    assert not np.array_equal(ema(x).numpy(), model(x).numpy())  # the copy did not move with the model
    layout = em.zeros(2, 3).t().layout
    back = pickle.loads(pickle.dumps(layout))
    assert back.shape == layout.shape and back.stride == layout.stride and back.start_offset == layout.start_offset


# ----------------------------------------------------------------------------- §5 smaller things
def test_assignment_drops_leading_size_one_dims():
    a, ta = em.zeros(3), torch.zeros(3)
    a[:] = em.tensor([1.0, 2.0, 3.0]).reshape(1, 1, 3)
    ta[:] = torch.tensor([1.0, 2.0, 3.0]).reshape(1, 1, 3)
    a[0] = em.tensor([[[9.0]]])
    ta[0] = torch.tensor([[[9.0]]])
    np.testing.assert_array_equal(a.numpy(), ta.numpy())
    expect_error(lambda: a.__setitem__(slice(None), em.zeros(2, 1, 3)), "setitem", em.ShapeError)


def test_integer_arange_with_a_fractional_step_is_refused():
    expect_error(lambda: em.arange(0, 3, 0.2, dtype=em.int64), "arange", em.EmberValueError)
    with pytest.raises((RuntimeError, ValueError)):
        torch.arange(0, 3, 0.2, dtype=torch.int64)  # torch refuses it too
    np.testing.assert_array_equal(em.arange(0.0, 6.0, 2.0, dtype=em.int64).numpy(), [0, 2, 4])
    np.testing.assert_allclose(em.arange(0, 3, 0.5).numpy(), np.arange(0, 3, 0.5))


def test_repr_aligns_rows_like_numpy():
    t = em.tensor([[1.0, 2.0], [3.0, 4.0]])
    lines = repr(t).splitlines()
    assert lines[0].startswith("Tensor([[") and lines[1].startswith(" " * len("Tensor([") + "[")
    assert lines[0].index("1") == lines[1].index("3")


def test_negative_step_says_to_use_flip():
    e = expect_error(lambda: em.zeros(3)[::-1], "index", em.EmberValueError)
    assert "flip" in str(e)


def test_dtype_error_only_for_dtype_problems():
    a = em.zeros(2, 3)
    for fn in (lambda: a + "x", lambda: a.sum(1.5), lambda: em.cat([a, None]), lambda: len(em.tensor(1.0)),
               lambda: em.nn.Sequential(em.nn.ReLU(), 3), lambda: a.clamp([1], 2), lambda: em.exp(None)):
        with pytest.raises(em.EmberTypeError) as ei:
            fn()
        assert isinstance(ei.value, TypeError) and not isinstance(ei.value, em.DTypeError), ei.value
    for fn in (lambda: em.tensor([1, 2]).exp(), lambda: a.index_select(em.tensor([0.0]), 0),
               lambda: em.tensor([1]).mean(), lambda: em.zeros(2, dtype="int8x")):
        with pytest.raises(em.DTypeError):
            fn()


def test_cross_entropy_names_itself_for_a_bad_target(rng):
    logits = em.tensor(rng.standard_normal((3, 4)).astype(np.float32))
    for bad in ([0, 4, 1], [0, -1, 2]):  # -1 would read the last class through gather: a silent wrong loss
        e = expect_error(lambda b=bad: em.nn.cross_entropy(logits, em.tensor(b)), "cross_entropy", em.IndexOutOfRange)
        assert "out of range for 4 classes" in str(e)
        with pytest.raises(IndexError):
            torch.nn.functional.cross_entropy(torch.tensor(logits.numpy()), torch.tensor(bad))
    ok = em.nn.cross_entropy(logits, em.tensor([0, -100, 3]))  # ignore_index is not out of range
    ref = torch.nn.functional.cross_entropy(torch.tensor(logits.numpy()), torch.tensor([0, -100, 3]))
    np.testing.assert_allclose(ok.item(), ref.item(), rtol=1e-6)


def test_from_dlpack_warns_when_it_must_copy():
    t = torch.arange(6, dtype=torch.int16)
    with pytest.warns(em.DLPackCopyWarning, match=r"^\[from_dlpack\] ember has no int16.*int64"):
        out = em.from_dlpack(t)
    assert out.dtype is em.int64 and out.tolist() == list(range(6))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert em.tensor(t).dtype is em.int64  # em.tensor always copies: no warning there
        em.from_dlpack(torch.arange(3, dtype=torch.float32))  # a dtype ember has: shared, no warning


@pytest.mark.cpu_only
def test_bogus_isa_env_warns():
    import os
    import subprocess
    import sys

    env = dict(os.environ, EMBER_ISA="bogus", PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", "import ember"], env=env,
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode != 0 and "[EMBER_ISA] unknown value 'bogus'" in r.stderr
    env["EMBER_ISA"] = "avx2"
    r = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", "import ember"], env=env,
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr


def test_torch_spellings_of_ember_ops(rng):
    a = rng.uniform(0.5, 2.0, (3, 4)).astype(WIDE_NP)
    t, r = em.tensor(a), torch.tensor(a, dtype=torch.float64)
    for name in ("square", "reciprocal"):
        np.testing.assert_allclose(getattr(t, name)().numpy(), getattr(r, name)().numpy(), **close(1e-15))
        np.testing.assert_allclose(getattr(em, name)(t).numpy(), getattr(torch, name)(r).numpy(), **close(1e-15))
    np.testing.assert_allclose(t.softmax(0).numpy(), r.softmax(0).numpy(), **close(1e-12))
    np.testing.assert_allclose(t.log_softmax(-1).numpy(), r.log_softmax(-1).numpy(), **close(1e-12))
    gradcheck(lambda x: x.square() + x.reciprocal() + x.softmax(1), [t])


def test_functional_affine_powf_and_every_method_name_exported(rng):
    a = rng.uniform(0.5, 2.0, (2, 3)).astype(WIDE_NP)
    a64 = a.astype(np.float64)
    np.testing.assert_allclose(em.affine(a, 2.0, 1.0).numpy(), a64 * 2 + 1, **close(1e-15))
    np.testing.assert_allclose(em.powf(em.tensor(a), 1.5).numpy(), a64 ** 1.5, **close(1e-15))
    from ember import functional

    builtins_names = {"abs", "all", "any", "max", "min", "pow", "round", "sum"}
    for name in functional.UNARY_NAMES + functional.BINARY_NAMES + functional.REDUCE_NAMES:
        assert (name in em.__all__) != (name in builtins_names), name
        assert callable(getattr(em, name)) and hasattr(em.Tensor, name), name
        assert "Returns:" in getattr(em, name).__doc__ and "Raises:" in getattr(em, name).__doc__
    ns = {}
    exec("from ember import *", ns)  # the star import keeps Python's sum, max, ... intact
    assert "exp" in ns and "softmax" in ns and not builtins_names & set(ns)


@pytest.mark.cpu_only  # em.testing.gradcheck itself: float64 finite differences (docs/design/testing.md)
def test_gradcheck_of_a_function_that_ignores_its_input():
    # backward raises NoGradientPath there; gradcheck compares zero against the finite differences
    assert em.testing.gradcheck(lambda x: em.tensor([1.0, 2.0], dtype=em.float64), [em.tensor([3.0])])
    with pytest.raises(em.testing.GradcheckError):
        em.testing.gradcheck(lambda x: em.tensor(x.numpy() * 2.0), [em.tensor([3.0])])  # a hidden dependence
