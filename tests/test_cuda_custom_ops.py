"""check_op on cuda (em.cuda.Kernel forwards and backwards compared with the CPU's) and the CUDA custom-op example
(examples/cuda_custom_ops.py: fused_mul_add, linear_relu) against numpy on random shapes and layouts, on the
emulated cuda device."""
import importlib.util
import pathlib
import runpy
import sys

import numpy as np
import pytest

import ember as em

EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "examples" / "cuda_custom_ops.py"


def _example():
    spec = importlib.util.spec_from_file_location("cuda_custom_ops_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ex = _example()


def on_device(device, dtype):
    """dtype, or float32 where the device holds no float64 (that refusal checked here instead)."""
    if dtype == np.float64 and not ex.holds_float64(device):
        with pytest.raises(em.DTypeError):
            em.tensor(np.zeros(2), device=device)
        return np.float32
    return dtype


def cpu(rng, *shape, dtype=np.float32):
    return em.tensor(rng.standard_normal(shape).astype(dtype), device="cpu")


# ----------------------------------------------------------------------------- check_op covers cuda
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_check_op_compares_cuda_with_cpu(cuda, rng, dtype):
    r = em.testing.check_op(ex.FusedMulAdd(), *(cpu(rng, 3, 7, dtype=dtype) for _ in range(3)))
    assert r.devices["cuda:0"] == "agrees with cpu" and "devices" in r.passed and "backward" in r.passed
    r = em.testing.check_op(ex.LinearRelu(), cpu(rng, 19, 18, dtype=dtype), cpu(rng, 18, 17, dtype=dtype),
                            cpu(rng, 17, dtype=dtype))
    assert r.devices["cuda:0"] == "agrees with cpu" and "on cuda:0: agrees with cpu" in repr(r)


def _with_source(monkeypatch, name, old, new):
    """The example's kernels, with `old` replaced by `new` in source `name` (compiled afresh)."""
    src = getattr(ex, name)
    assert old in src
    monkeypatch.setattr(ex, name, src.replace(old, new))
    monkeypatch.setattr(ex, "_kernels", {})


def test_check_op_names_cuda_when_its_forward_disagrees(cuda, rng, monkeypatch):
    _with_source(monkeypatch, "MUL_ADD", "out[i] = a[oa] * b[ob] + c[oc];", "out[i] = a[oa] * b[ob] - c[oc];")
    with pytest.raises(em.testing.CheckOpError, match=r"devices: cuda:0 disagrees with cpu") as e:
        em.testing.check_op(ex.FusedMulAdd(), *(cpu(rng, 2, 5) for _ in range(3)))
    assert e.value.report.devices["cuda:0"].startswith("max abs diff")


def test_check_op_names_cuda_when_its_backward_disagrees(cuda, rng, monkeypatch):
    # only the CUDA bias gradient is wrong: the forward agrees, the gradient of input 2 does not
    _with_source(monkeypatch, "LINEAR_RELU", "db[col] = part[0];", "db[col] = 2 * part[0];")
    with pytest.raises(em.testing.CheckOpError,
                       match=r"devices: cuda:0 disagrees with cpu: gradient of input 2"):
        em.testing.check_op(ex.LinearRelu(), cpu(rng, 5, 4), cpu(rng, 4, 3), cpu(rng, 3))


def test_check_op_notes_an_op_without_cuda_fwd(cuda, rng):
    class CpuOnly(em.CustomOp1):
        name = "cpu_only_double"

        def cpu_fwd(self, storage, layout):
            return em.CpuStorage.from_numpy(np.ascontiguousarray(storage.as_numpy(layout) * 2)), layout.shape

        def bwd(self, x, y, g):
            return g * 2

    r = em.testing.check_op(CpuOnly(), cpu(rng, 3, 4))
    assert r.devices["cuda:0"] == "not compared: cpu_only_double has no cuda_fwd"


def test_check_op_reports_a_cuda_forward_that_raises(cuda, rng):
    class Raises(em.CustomOp1):
        name = "raises_on_cuda"

        def cpu_fwd(self, storage, layout):
            return em.CpuStorage.from_numpy(np.ascontiguousarray(storage.as_numpy(layout))), layout.shape

        def cuda_fwd(self, storage, layout):
            raise em.EmberValueError("[raises_on_cuda] no kernel")

    with pytest.raises(em.testing.CheckOpError, match=r"cuda:0 disagrees with cpu: raised EmberValueError"):
        em.testing.check_op(Raises(), cpu(rng, 4))


# ----------------------------------------------------------------------------- the example's ops vs numpy
def _view(rng, shape, kind, dtype, device):
    """(tensor on device, numpy array) with the tensor laid out as `kind`."""
    if kind == "transposed":
        base = rng.standard_normal(shape[::-1]).astype(dtype)
        return em.tensor(base, device=device).t(), base.T
    if kind == "offset":
        base = rng.standard_normal((2,) + shape).astype(dtype)
        return em.tensor(base, device=device)[1], base[1]
    if kind == "stepped":
        base = rng.standard_normal((shape[0] * 2, shape[1] * 3)).astype(dtype)
        return em.tensor(base, device=device)[::2, 1::3], base[::2, 1::3]
    base = rng.standard_normal(shape).astype(dtype)
    return em.tensor(base, device=device), base


KINDS = ["contiguous", "transposed", "offset", "stepped"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kinds", [("contiguous",) * 3, ("transposed", "offset", "stepped"),
                                   ("stepped", "contiguous", "transposed")])
def test_fused_mul_add_matches_numpy(cuda, rng, dtype, kinds):
    dtype = on_device(cuda, dtype)
    shape = tuple(int(v) for v in rng.integers(1, 40, size=2))
    (ta, a), (tb, b), (tc, c) = (_view(rng, shape, k, dtype, cuda) for k in kinds)
    out = ex.fused_mul_add(ta, tb, tc)
    assert out.device == cuda and out.dtype == (em.float32 if dtype == np.float32 else em.float64)
    np.testing.assert_allclose(out.numpy(), a * b + c, rtol=1e-6, atol=1e-6)
    # any rank: 0-d and 4-d
    for sh in [(), (2, 3, 1, 4)]:
        a, b, c = (rng.standard_normal(sh).astype(dtype) for _ in range(3))
        got = ex.fused_mul_add(*(em.tensor(v, device=cuda) for v in (a, b, c)))
        np.testing.assert_allclose(got.numpy(), a * b + c, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mnk", [(1, 1, 1), (16, 16, 16), (33, 17, 40), (5, 47, 3)])
def test_linear_relu_and_its_gradients_match_numpy(cuda, rng, dtype, mnk):
    m, n, k = mnk
    dtype = on_device(cuda, dtype)
    tx, x = _view(rng, (m, k), KINDS[m % 4], dtype, cuda)
    tw, w = _view(rng, (k, n), KINDS[(n + 1) % 4], dtype, cuda)
    b = rng.standard_normal(n).astype(dtype)
    xv, wv = em.Var(tx), em.Var(tw)
    bv = em.Var(em.tensor(b, device=cuda))
    y = ex.linear_relu(xv, wv, bv)
    z = x.astype(np.float64) @ w + b
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(y.numpy(), np.maximum(z, 0), **tol)
    g = rng.standard_normal((m, n)).astype(dtype)
    grads = (y.to("cpu") * em.tensor(g, device="cpu")).sum().backward()
    gz = np.where(z > 0, g, 0)
    np.testing.assert_allclose(grads[xv].numpy(), gz @ w.T, **tol)
    np.testing.assert_allclose(grads[wv].numpy(), x.T @ gz, **tol)
    np.testing.assert_allclose(grads[bv].numpy(), gz.sum(0), **tol)
    assert grads[xv].device == cuda and grads[wv].device == cuda


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_mul_add_gradients_match_numpy(cuda, rng, dtype):
    dtype = on_device(cuda, dtype)
    a, b, c, g = (rng.standard_normal((4, 6)).astype(dtype) for _ in range(4))
    va, vb, vc = (em.Var(em.tensor(v, device=cuda)) for v in (a, b, c))
    grads = (ex.fused_mul_add(va, vb, vc).to("cpu") * em.tensor(g, device="cpu")).sum().backward()
    assert all(grads[v].device == cuda for v in (va, vb, vc))
    np.testing.assert_allclose(grads[va].numpy(), g * b, rtol=1e-6)
    np.testing.assert_allclose(grads[vb].numpy(), g * a, rtol=1e-6)
    np.testing.assert_array_equal(grads[vc].numpy(), g)


@pytest.mark.parametrize("float64_on_device", [True, False])
def test_gradcheck_on_cuda(cuda, rng, monkeypatch, float64_on_device):
    # both of the example's routes: float64 on the device, or float32 there from float64 inputs on the CPU
    if not float64_on_device:
        monkeypatch.setattr(ex, "holds_float64", lambda device: False)
    elif not ex.holds_float64(cuda):
        on_device(cuda, np.float64)  # the device holds no float64: its refusal is the check
        return
    assert ex.gradcheck_on(cuda, ex.fused_mul_add, [rng.standard_normal((2, 3)) for _ in range(3)])
    assert ex.gradcheck_on(cuda, ex.linear_relu, [rng.standard_normal((3, 4)), rng.standard_normal((4, 2)),
                                                   rng.standard_normal(2)])
    # a wrong backward (a's and b's gradients swapped, by the same kernel) fails it on either route
    monkeypatch.setattr(ex.FusedMulAdd, "bwd", lambda self, a, b, c, res, g: em.apply_op(ex.MulAddGrad(), b, a, g))
    with pytest.raises(em.testing.GradcheckError, match=r"^\[gradcheck\] input [01]"):
        ex.gradcheck_on(cuda, ex.fused_mul_add, [rng.standard_normal((2, 3)) for _ in range(3)])


def test_example_errors(cuda, rng):
    for dev in ("cpu", cuda):
        a, b = em.ones((2, 3), device=dev), em.ones((3, 2), device=dev)
        with pytest.raises(em.ShapeError, match=r"^\[fused_mul_add\] a, b and c must have one shape"):
            ex.fused_mul_add(a, b, a)
        with pytest.raises(em.DTypeError, match=r"^\[fused_mul_add\] takes float32 or float64, got float16"):
            h = em.ones((2, 3), dtype=em.float16, device=dev)
            ex.fused_mul_add(h, h, h)
        if ex.holds_float64(dev):
            with pytest.raises(em.DTypeError, match=r"^\[fused_mul_add\] the operands must share a dtype"):
                ex.fused_mul_add(a, a, a.to(dtype=em.float64))
        else:  # the op's own check is then unreachable on the device: it refuses the float64 operand first
            with pytest.raises(em.DTypeError, match=r"float64 is not supported on"):
                a.to(dtype=em.float64)
        with pytest.raises(em.ShapeError, match=r"^\[linear_relu\] expected x \(m, k\), w \(k, n\) and b \(n,\)"):
            ex.linear_relu(a, a, em.ones(3, device=dev))
    with pytest.raises(em.DeviceError):
        ex.fused_mul_add(em.ones(2, device=cuda), em.ones(2, device="cpu"), em.ones(2, device=cuda))


def test_example_script_runs_on_cuda(cuda, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE)])
    em.set_default_device(em.cpu)  # as in a fresh interpreter; the conftest fixture restores the session's
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    assert "on cpu: ok" in out and "fused_mul_add and linear_relu on cuda: ok" in out


def test_check_op_compares_cuda_with_a_reference(cuda, rng, monkeypatch):
    # fused_mul_add with a reference in tensor ops: the CUDA forward is compared with it on cuda, or, where ember
    # has no CUDA kernel for an op the reference uses, with the reference run on the CPU on the same values
    class WithReference(ex.FusedMulAdd):
        name = "fused_mul_add_ref"

        def reference(self, a, b, c):
            return a * b + c

    r = em.testing.check_op(WithReference(), *(cpu(rng, 3, 4) for _ in range(3)))
    assert "reference forward" in r.passed and "reference backward" in r.passed
    assert r.devices["cuda:0"] == "agrees with cpu"

    class WrongReference(WithReference):
        name = "fused_mul_add_wrong_ref"

        def reference(self, a, b, c):
            return a * b - c

    with pytest.raises(em.testing.CheckOpError, match=r"reference: on cpu the forward differs from the reference"):
        em.testing.check_op(WrongReference(), *(cpu(rng, 3, 4) for _ in range(3)))
    # a wrong CUDA kernel: the CPU agrees with the reference, cuda does not
    _with_source(monkeypatch, "MUL_ADD", "out[i] = a[oa] * b[ob] + c[oc];", "out[i] = a[oa] + c[oc];")
    with pytest.raises(em.testing.CheckOpError,
                       match=r"reference: on cuda:0 the forward differs from the reference: max abs diff"):
        em.testing.check_op(WithReference(), *(cpu(rng, 3, 4) for _ in range(3)))
