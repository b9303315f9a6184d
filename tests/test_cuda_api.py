"""The user-facing pieces of Python that name devices, on the emulated cuda device: Tensor.to / Module.to /
Module.cuda, DeviceError for tensors on two devices, Python values following their tensor operand to cuda, the
memory API and the profiler with cuda, and conv's custom ops dispatching to cuda."""

import numpy as np
import pytest

import ember as em
from ember import nn, operands


def holds(device, dtype):
    return em._C.device_supports(device.kind, device.index, em.dtypes.to_dtype(dtype).code)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int64", "int32", "uint32", "uint8",
                                   "bool"])
def test_tensor_to_forms(cuda, rng, dtype):
    a = (rng.standard_normal((4, 3)) * 5).astype(np.float32)
    t = em.tensor(a, device="cpu").to(dtype=dtype)
    if not holds(cuda, dtype):  # a backend without float64: the move is refused, naming the dtype
        with pytest.raises(em.DTypeError, match=dtype):
            t.to("cuda")
        return
    for target in ("cuda", "cuda:0", cuda, em.Device("cuda", 0)):
        c = t.to(target)
        assert c.device == cuda and c.dtype == t.dtype
        np.testing.assert_array_equal(c.numpy(), t.numpy())
    c = t.to(cuda)
    assert c.to(cuda) is c and c.to(cuda, copy=True).storage is not c.storage
    h = t.to("cuda", em.float16)  # device and dtype at once, as torch
    assert h.device == cuda and h.dtype == em.float16
    np.testing.assert_array_equal(h.numpy(), t.numpy().astype(np.float16))
    assert c.to(em.zeros(1, dtype=em.float64, device="cpu")).device == em.cpu  # a tensor's device and dtype
    with pytest.raises(em.DeviceError, match=r"cuda:3 is not available"):
        t.to("cuda:3")


def test_to_cuda_is_differentiable(cuda, rng):
    a = rng.standard_normal((2, 5)).astype(np.float32)
    x = em.Var(em.tensor(a, device="cpu"))
    y = x.to("cuda").t().to("cpu")  # to cuda and back, through a view on the device
    g = rng.standard_normal((5, 2)).astype(np.float32)
    grads = (y * em.tensor(g, device="cpu")).sum().backward()
    np.testing.assert_array_equal(grads[x].numpy(), g.T)


def test_module_to_and_cuda(cuda, rng):
    em.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 3, device="cpu"), nn.BatchNorm1d(3, device="cpu"))
    before = {k: v.numpy().copy() for k, v in m.state_dict().items()}
    params = list(m.parameters())
    opt = em.optim.SGD(m.parameters(), lr=0.1)
    assert m.to("cuda") is m
    assert all(p.device == cuda for p in m.parameters()) and all(b.device == cuda for b in m.buffers())
    assert [id(p) for p in m.parameters()] == [id(p) for p in params]  # the same Vars: the optimizer keeps them
    assert opt.param_groups[0]["params"][0] is params[0]
    for k, v in m.state_dict().items():
        assert v.device == cuda
        np.testing.assert_array_equal(v.numpy(), before[k])
    m.cpu()
    assert all(p.device == em.cpu for p in m.parameters())
    assert m.cuda() is m and all(p.device == cuda for p in m.parameters())
    m.to(em.cpu).cuda(0)
    assert all(v.device == cuda for v in m.state_dict().values())
    m.to(device="cuda", dtype=em.float16)
    assert all(p.device == cuda and p.dtype == em.float16 for p in m.parameters())
    assert m[1].num_batches_tracked.dtype == em.int64  # only float tensors change dtype
    with pytest.raises(em.DeviceError, match=r"^\[Module.cuda\] expected a CUDA device, got cpu"):
        m.cuda("cpu")
    with pytest.raises(em.DeviceError, match=r"cuda:2 is not available"):
        m.cuda(2)


def test_tensors_on_two_devices_raise_device_error(cuda, rng):
    a, c = em.ones((2, 3), device=cuda), em.ones((2, 3), device="cpu")
    for fn, op in [(lambda: a + c, "add"), (lambda: c * a, "mul"), (lambda: a @ c.t(), "matmul"),
                   (lambda: em.where(c.gt(0), a, a), "where"), (lambda: em.cat([a, c]), "cat"),
                   (lambda: a.index_select(em.tensor([0], device="cpu"), 0), "index_select")]:
        with pytest.raises(em.DeviceError, match=rf"^\[{op}\]"):
            fn()

    class Add(em.CustomOp2):
        name = "add2"

        def cpu_fwd(self, s1, l1, s2, l2):
            return em.CpuStorage.from_numpy(s1.as_numpy(l1) + s2.as_numpy(l2)), l1.shape

    with pytest.raises(em.DeviceError, match=r"^\[add2\] inputs on different devices: cuda:0 and cpu"):
        a.apply_op2(c, Add())


def test_python_values_go_to_the_tensor_operands_device(cuda, monkeypatch):
    em.set_default_device("cpu")  # the user's normal setup: values must follow the tensor, not the default
    t = em.ones((2, 3), device=cuda)
    for value in (2, 2.5, True, np.float32(3), [1.0, 2.0, 3.0], np.arange(3, dtype=np.float32), [[1, 2, 3]] * 2):
        x, y = operands._operands(t, value, "add")
        assert x.device == cuda and y.device == cuda, value
    x, y = operands._true_div_operands(t, [1.0, 2.0, 4.0])
    assert y.device == cuda and y.dtype == em.float32
    np.testing.assert_array_equal(y.numpy(), [1, 2, 4])
    assert operands._as_index([1, 0], "index_select", device=cuda).device == cuda
    # the same through the op: either it runs on cuda, or (before ember's CUDA kernels) the op is refused on
    # cuda:0; a value left on the CPU would raise a DeviceError instead
    try:
        out = t + [1.0, 2.0, 3.0]
    except em.UnsupportedOp as e:
        assert str(e) == "[add] is not implemented on device cuda:0"
    else:
        assert out.device == cuda
        np.testing.assert_array_equal(out.numpy(), np.ones((2, 3)) + [1, 2, 3])


def test_memory_api_counts_cuda(cuda):
    st = em.memory_stats("cuda")
    assert set(st) == {"allocated_bytes", "cached_bytes", "peak_allocated_bytes", "cache_limit_bytes"}
    before = st["allocated_bytes"]
    t = em.zeros(1000, dtype=em.int64, device=cuda)
    assert em.memory_stats(cuda)["allocated_bytes"] >= before + 8000
    total = em.memory_stats()
    assert "cuda:0" in total["devices"]
    for k in ("allocated_bytes", "cached_bytes", "peak_allocated_bytes"):
        assert total[k] == sum(d[k] for d in total["devices"].values())
    em.reset_peak_memory_stats("cuda")
    assert em.memory_stats("cuda:0")["peak_allocated_bytes"] == em.memory_stats("cuda:0")["allocated_bytes"]
    em.empty_cache("cuda")
    em.empty_cache()  # every available device, cuda:0 included
    del t
    assert em.memory_stats("cuda")["allocated_bytes"] == before
    with pytest.raises(em.DeviceError, match=r"cuda:1 is not available"):
        em.memory_stats("cuda:1")


def test_profiler_marks_cuda_times_as_host_side(cuda):
    x = em.ones(3, device=cuda)
    with em.profiler.profile() as prof:
        x.to("cpu")
        em.ones(3, device="cpu").exp()
    rows = {r["device"]: r["timing"] for r in prof.key_averages()}
    assert rows["cuda:0"] == "host" and rows["cpu"] == "compute"


def test_conv_ops_reach_the_cuda_backend(cuda):
    # conv's custom ops hand cuda storages to the binding, which dispatches on the device: the registry answers
    # (until ember's CUDA conv kernels exist, "not implemented on device cuda:0"), never "no cuda implementation"
    x, w = em.ones((1, 2, 5, 5), device=cuda), em.ones((3, 2, 3, 3), device=cuda)
    try:
        y = nn.functional.conv2d(x, w)
    except em.UnsupportedOp as e:
        assert "no cuda implementation" not in str(e) and str(e).endswith("is not implemented on device cuda:0")
    else:
        assert y.device == cuda
        np.testing.assert_allclose(y.numpy(), np.full((1, 3, 3, 3), 18.0))
    for cls in (nn.conv._Unfold, nn.conv._Fold, nn.conv._Conv, nn.conv._ConvBias, nn.conv._ConvInput,
                nn.conv._ConvWeight):
        assert cls.cuda_fwd is cls.cpu_fwd and cls.metal_fwd is cls.cpu_fwd


def test_random_on_cuda_draws_the_cpus_values(cuda):
    # one counter-based stream on every device: a seed gives the same values on cuda as on the CPU
    for make in (lambda dev, g=None: em.rand((3, 5), device=dev, generator=g),
                 lambda dev, g=None: em.randn(17, dtype=em.float16, device=dev, generator=g),
                 lambda dev, g=None: em.randint(-4, 9, (2, 7), device=dev, generator=g)):
        em.manual_seed(11)
        c = make(cuda)
        em.manual_seed(11)
        h = make("cpu")
        assert c.device == cuda and c.dtype == h.dtype
        np.testing.assert_array_equal(c.numpy(), h.numpy())
        a = make(cuda, em.Generator("cuda").manual_seed(5))
        np.testing.assert_array_equal(a.numpy(), make("cpu", em.Generator("cpu").manual_seed(5)).numpy())
