"""Module API against torch: to/half/float, apply, buffers, parameters, requires_grad_, containers, reprs."""
import numpy as np
import pytest
import torch

import ember as em
from ember import nn

from conftest import TOL, WIDE


class Net(nn.Module):
    def __init__(self, device="cpu"):
        super().__init__()
        self.fc1 = nn.Linear(6, 8, device=device)
        self.bn = nn.BatchNorm1d(8, device=device)
        self.fc2 = nn.Linear(8, 3, device=device)
        self.register_buffer("scale", em.full((3,), 0.5, device=device))
        self.register_buffer("cache", em.zeros(2, device=device), persistent=False)

    def forward(self, x):
        return self.fc2(self.bn(self.fc1(x)).relu()) * self.scale


def _np(t):
    return t.to_device("cpu").to_dtype(em.float64).numpy()


# ----------------------------------------------------------------------------- moving and casting
@pytest.mark.parametrize("method,dtype", [("half", em.float16), ("bfloat16", em.bfloat16), ("double", em.float64),
                                          ("float", em.float32)])
def test_cast_methods_in_place(method, dtype):
    m = Net()
    before = {n: (id(t), _np(t)) for n, t in list(m.named_parameters()) + list(m.named_buffers())}
    count = m.bn.num_batches_tracked
    assert getattr(m, method)() is m
    for n, t in list(m.named_parameters()) + list(m.named_buffers()):
        assert id(t) == before[n][0], n  # the same objects
        if t is count:
            assert t.dtype == em.int64  # integer buffers keep their dtype, as torch's
        else:
            assert t.dtype == dtype, n
            np.testing.assert_allclose(_np(t), before[n][1], rtol=1e-2, atol=1e-3)
    assert all(p.is_variable for p in m.parameters())


def test_to_forms_and_errors(device):
    m = Net()
    w = m.fc1.weight
    assert m.to(em.float64) is m and w.dtype == em.float64
    m.to(dtype="float32")
    assert w.dtype == em.float32
    ref = em.zeros(1, dtype=em.float16, device=device)
    m.to(ref)  # a tensor's device and dtype
    assert w.dtype == em.float16 and w.device == device
    m.to("cpu", em.float32)
    assert w.dtype == em.float32 and w.device == em.cpu
    m.to(device=str(device), dtype=em.float32)
    assert w.device == device and m.scale.device == device and m.cache.device == device
    assert m.bn.num_batches_tracked.device == device
    with pytest.raises(em.DTypeError, match=r"\[Module.to\] .*floating-point"):
        m.to(em.int64)
    with pytest.raises(em.EmberValueError, match=r"\[Module.to\] expected a device, a dtype or a tensor"):
        m.to(object())
    with pytest.raises(em.EmberValueError, match=r"\[Module.to\] got the device twice"):
        m.to("cpu", device="cpu")
    with pytest.raises(em.EmberTypeError, match=r"\[Module.to\] unexpected"):
        m.to(memory="x")


def test_to_keeps_optimizer_and_values(device):
    em.manual_seed(3)
    m = nn.Linear(4, 3, device="cpu")
    opt = em.optim.SGD(m.parameters(), lr=0.1)
    w0 = m.weight.numpy().copy()
    m.to(device)
    x = em.randn(5, 4, device=device)
    opt.backward_step((m(x) ** 2).mean())
    assert m.weight.device == device
    assert not np.allclose(_np(m.weight), w0)  # the optimizer made before still holds the moved Var


def test_trains_on_device_step_for_step_like_cpu(device):
    """A model built on the CPU and moved with .to(device) trains like the same model on the CPU."""
    em.manual_seed(11)
    a = nn.Sequential(nn.Linear(5, 16, device="cpu"), nn.GELU(), nn.LayerNorm(16, device="cpu"),
                      nn.Linear(16, 2, device="cpu"))
    b = nn.Sequential(nn.Linear(5, 16, device="cpu"), nn.GELU(), nn.LayerNorm(16, device="cpu"),
                      nn.Linear(16, 2, device="cpu"))
    b.load_state_dict(a.state_dict())
    opt_a = em.optim.AdamW(a.parameters(), lr=1e-2)
    opt_b = em.optim.AdamW(b.parameters(), lr=1e-2)
    b.to(device)
    xs = np.random.default_rng(0).standard_normal((6, 8, 5)).astype(np.float32)
    ys = np.random.default_rng(1).standard_normal((6, 8, 2)).astype(np.float32)
    for x, y in zip(xs, ys):
        la = nn.mse_loss(a(em.tensor(x, device="cpu")), em.tensor(y, device="cpu"))
        lb = nn.mse_loss(b(em.tensor(x, device=device)), em.tensor(y, device=device))
        np.testing.assert_allclose(_np(lb), _np(la), rtol=1e-4, atol=1e-5)
        opt_a.step(la.backward())
        opt_b.step(lb.backward())
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert q.device == device
        np.testing.assert_allclose(_np(q), _np(p), rtol=1e-4, atol=1e-5, err_msg=n)


# ----------------------------------------------------------------------------- registration, traversal
def test_buffers_and_state_dict_keys_like_torch():
    class TNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(6, 8)
            self.bn = torch.nn.BatchNorm1d(8)
            self.fc2 = torch.nn.Linear(8, 3)
            self.register_buffer("scale", torch.full((3,), 0.5))
            self.register_buffer("cache", torch.zeros(2), persistent=False)

    m, t = Net(), TNet()
    assert list(m.state_dict()) == list(t.state_dict())
    assert [n for n, _ in m.named_buffers()] == [n for n, _ in t.named_buffers()]
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert len(m.buffers()) == len(list(t.buffers()))
    assert [n for n, _ in m.named_buffers(recurse=False)] == ["scale", "cache"]
    m2 = Net()
    m2.load_state_dict(m.state_dict())  # non-persistent buffers are neither expected nor missing
    np.testing.assert_array_equal(m2.scale.numpy(), m.scale.numpy())


def test_register_errors():
    m = nn.Module()
    m.register_parameter("w", nn.Parameter(em.ones(2)))
    m.register_parameter("b", None)
    m.register_buffer("r", em.zeros(2))
    m.register_buffer("nothing", None)
    assert [n for n, _ in m.named_parameters()] == ["w"]
    assert [n for n, _ in m.named_buffers()] == ["r"]
    with pytest.raises(em.EmberTypeError, match=r"\[register_parameter\]"):
        m.register_parameter("x", em.ones(2))
    with pytest.raises(em.EmberValueError, match=r"\[register_parameter\] 'r' is already a buffer"):
        m.register_parameter("r", nn.Parameter(em.ones(2)))
    with pytest.raises(em.EmberValueError, match=r"\[register_buffer\] 'w' is already a parameter"):
        m.register_buffer("w", em.ones(2))
    with pytest.raises(em.EmberValueError, match=r"\[register_buffer\] the name must be non-empty"):
        m.register_buffer("a.b", em.ones(2))
    with pytest.raises(em.EmberTypeError, match=r"\[register_buffer\]"):
        m.register_buffer("q", [1, 2])
    with pytest.raises(em.EmberTypeError, match=r"\[add_module\]"):
        m.add_module("lin", 3)
    m.add_module("lin", nn.Linear(2, 2))
    assert m.get_submodule("lin") is m.lin
    with pytest.raises(em.EmberValueError, match=r"\[get_submodule\]"):
        m.get_submodule("nope")


def test_register_buffer_var_is_detached():
    m = nn.Module()
    m.register_buffer("r", em.Var(em.ones(2)))
    assert not m.r.is_variable and m.parameters() == []


def test_apply_order_like_torch():
    seen, tseen = [], []
    m = nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.ReLU(), nn.Linear(3, 1)))
    t = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(3, 1)))
    assert m.apply(lambda mod: seen.append(type(mod).__name__)) is m
    t.apply(lambda mod: tseen.append(type(mod).__name__))
    assert seen == tseen


def test_apply_init_changes_weights():
    m = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))

    def init(mod):
        if isinstance(mod, nn.Linear):
            nn.init.constant_(mod.weight, 0.25)
            nn.init.zeros_(mod.bias)

    m.apply(init)
    for p in m.parameters():
        assert set(p.numpy().ravel().tolist()) <= {0.0, 0.25}


def test_requires_grad_freezes_and_unfreezes():
    em.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 1))
    opt = em.optim.SGD(m.parameters(), lr=0.5)
    x = em.randn(5, 3)
    w_frozen = m[0].weight
    storage = w_frozen.storage
    m[0].requires_grad_(False)
    assert not w_frozen.is_variable and not w_frozen.requires_grad
    assert w_frozen in m.parameters() and isinstance(w_frozen, nn.Parameter)
    g = (m(x) ** 2).sum().backward()
    assert g.get(w_frozen) is None and g.get(m[1].weight) is not None
    before = w_frozen.numpy().copy()
    opt.step(g)
    np.testing.assert_array_equal(w_frozen.numpy(), before)  # the optimizer skips it
    assert "frozen" not in repr(m)
    m.requires_grad_(True)
    assert w_frozen.is_variable and w_frozen.storage.same_buffer(storage)
    g = (m(x) ** 2).sum().backward()
    assert g.get(w_frozen) is not None
    with pytest.raises(em.DTypeError, match=r"\[requires_grad_\]"):
        em.Var(em.tensor([1, 2])).requires_grad_(True)


def test_parameter_is_var():
    p = nn.Parameter(em.ones(2, 3))
    assert type(p) is em.Var and isinstance(p, nn.Parameter)
    assert isinstance(nn.Linear(2, 2).weight, nn.Parameter)
    assert not isinstance(em.ones(2), nn.Parameter)
    q = nn.Parameter(em.ones(2), requires_grad=False)
    assert isinstance(q, nn.Parameter) and not q.is_variable
    assert nn.Parameter().shape == (0,)


# ----------------------------------------------------------------------------- containers
def test_containers_names_like_torch():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = nn.ModuleDict({"a": nn.Linear(2, 3), "b": nn.Linear(2, 1)})
            self.plist = nn.ParameterList([em.ones(2), em.zeros(3)])
            self.pdict = nn.ParameterDict({"x": em.ones(1), "y": nn.Parameter(em.ones(2))})

    class T(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(2, 3), "b": torch.nn.Linear(2, 1)})
            self.plist = torch.nn.ParameterList([torch.ones(2), torch.zeros(3)])
            self.pdict = torch.nn.ParameterDict({"x": torch.ones(1), "y": torch.nn.Parameter(torch.ones(2))})

    m, t = M(), T()
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert list(m.state_dict()) == list(t.state_dict())
    assert list(m.heads.keys()) == ["a", "b"] and "a" in m.heads and len(m.heads) == 2
    m.heads["c"] = nn.Linear(2, 2)
    assert [n for n, _ in m.heads.items()][-1] == "c"
    assert m.heads.pop("c").out_features == 2
    m.plist.append(em.ones(4))
    assert len(m.plist) == 3 and all(p.is_variable for p in m.plist)
    assert m.pdict["x"].shape == (1,) and "y" in m.pdict
    m.to(em.float16)
    assert m.plist[2].dtype == em.float16 and m.pdict["y"].dtype == em.float16
    with pytest.raises(em.EmberTypeError, match=r"\[ModuleDict\]"):
        nn.ModuleDict({"a": 1})
    with pytest.raises(em.EmberValueError, match=r"\[ModuleDict\] no module named 'z'"):
        m.heads["z"]
    with pytest.raises(em.EmberTypeError, match=r"\[ParameterList\]"):
        nn.ParameterList([1.0])
    with pytest.raises(em.EmberTypeError, match=r"\[ParameterDict\]"):
        nn.ParameterDict([("a",)])


@pytest.mark.parametrize("start,end,shape", [(1, -1, (2, 3, 4, 5)), (0, 2, (2, 3, 4)), (2, 3, (2, 3, 4, 5)),
                                             (1, 1, (3, 4))])
def test_flatten_like_torch(start, end, shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = nn.Flatten(start, end)(em.tensor(x))
    want = torch.nn.Flatten(start, end)(torch.tensor(x))
    assert got.shape == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("dim,sizes,shape", [(1, (2, 3), (4, 6)), (-1, (2, -1), (4, 3, 8)), (0, (1, 4), (4, 2))])
def test_unflatten_like_torch(dim, sizes, shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = nn.Unflatten(dim, sizes)(em.tensor(x))
    want = torch.nn.Unflatten(dim, sizes)(torch.tensor(x))
    assert got.shape == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_flatten_unflatten_errors():
    with pytest.raises(em.ShapeError, match=r"\[Unflatten\] cannot split"):
        nn.Unflatten(1, (4, 4))(em.ones(2, 6))
    with pytest.raises(em.EmberTypeError, match=r"\[Unflatten\]"):
        nn.Unflatten(1, 4)
    with pytest.raises(em.EmberValueError, match=r"\[Flatten\] start_dim"):
        nn.Flatten(2, 1)(em.ones(2, 3, 4))
    with pytest.raises(em.EmberTypeError, match=r"\[Flatten\]"):
        nn.Flatten()([1, 2])


# ----------------------------------------------------------------------------- repr
_REPRS = [
    ("Linear", (3, 4), {}), ("Linear", (3, 4), dict(bias=False)), ("Embedding", (10, 3), {}),
    ("LayerNorm", (4,), {}), ("LayerNorm", ((2, 4),), dict(eps=1e-6, bias=False)),
    ("LayerNorm", (4,), dict(elementwise_affine=False)), ("GroupNorm", (2, 4), {}), ("BatchNorm1d", (4,), {}),
    ("BatchNorm2d", (4,), dict(momentum=None, affine=False)), ("Dropout", (), {}), ("Dropout", (0.2,), {}),
    ("ELU", (), {}), ("LeakyReLU", (), {}), ("Softplus", (), {}), ("GELU", (), {}), ("GELU", ("tanh",), {}),
    ("ReLU", (), {}), ("ReLU", (True,), {}), ("SiLU", (), {}), ("Mish", (), {}), ("Hardswish", (), {}),
    ("Hardsigmoid", (), {}), ("Identity", (), {}), ("Tanh", (), {}), ("Sigmoid", (), {}),
    ("MaxPool2d", (2,), {}), ("MaxPool1d", (3,), dict(stride=2, padding=1)), ("AvgPool2d", (2,), {}),
    ("AvgPool1d", (3,), {}), ("AdaptiveAvgPool2d", ((2, 3),), {}), ("AdaptiveAvgPool1d", (4,), {}),
    ("Upsample", (), dict(scale_factor=2)), ("Upsample", (), dict(size=(4, 5), mode="bilinear")),
    ("Flatten", (), {}), ("Unflatten", (1, (2, 3)), {}),
    ("Conv2d", (3, 8, 3), {}), ("Conv2d", (3, 8, (3, 5)), dict(stride=2, padding=1, dilation=2, bias=False)),
    ("Conv1d", (4, 8, 3), dict(padding="same")), ("Conv2d", (4, 8, 3), dict(padding="valid", groups=2)),
    ("ConvTranspose2d", (4, 8, 3), dict(stride=2, output_padding=1)),
    ("ConvTranspose1d", (4, 8, 3), dict(stride=(2,), padding=1, dilation=2)),
]


@pytest.mark.parametrize("cls,args,kwargs", _REPRS, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(_REPRS)])
def test_repr_like_torch(cls, args, kwargs):
    assert repr(getattr(nn, cls)(*args, **kwargs)) == repr(getattr(torch.nn, cls)(*args, **kwargs))


def test_nested_repr_like_torch():
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4, 2))
    t = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4, 2))
    assert repr(m) == repr(t)


# ----------------------------------------------------------------------------- LayerNorm's arguments
def test_layer_norm_eps_zero_refuses():
    with pytest.raises(em.EmberValueError, match=r"\[layer_norm\] eps must be positive"):
        nn.LayerNorm(4, eps=0.0)
    with pytest.raises(em.EmberValueError, match=r"\[layer_norm\] eps must be positive"):
        nn.ops.layer_norm(em.ones(2, 4), em.ones(4), em.zeros(4), 0.0)
    with pytest.raises(em.EmberValueError, match=r"\[layer_norm\] eps"):
        nn.ops.layer_norm(em.ones(2, 4), None, None, -1e-5)


@pytest.mark.parametrize("shape,affine,bias", [((6,), True, True), ((3, 4), True, False), ((4,), False, False),
                                               ((2, 3), True, True)])
def test_layer_norm_args_like_torch(device, shape, affine, bias):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 5) + shape)
    m = nn.LayerNorm(shape, elementwise_affine=affine, bias=bias, dtype=WIDE, device=device)
    t = torch.nn.LayerNorm(shape, elementwise_affine=affine, bias=bias, dtype=torch.float64)
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in t.named_parameters()]
    for (_, p), (_, q) in zip(m.named_parameters(), t.named_parameters()):
        v = rng.standard_normal(p.shape)
        p.set(em.tensor(v, dtype=WIDE, device=device))
        q.data = torch.tensor(v)
    got = _np(m(em.tensor(x, dtype=WIDE, device=device)))
    np.testing.assert_allclose(got, t(torch.tensor(x)).detach().numpy(), rtol=TOL[WIDE.name][0] * 10,
                               atol=TOL[WIDE.name][1] * 10)


def test_frozen_parameters_survive_deepcopy_and_pickle():
    import copy
    import pickle

    m = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))
    m[0].requires_grad_(False)
    for c in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert len(c.parameters()) == 4
        assert [p.is_variable for p in c.parameters()] == [False, False, True, True]
        np.testing.assert_array_equal(c[0].weight.numpy(), m[0].weight.numpy())
