"""check_op: an opcheck for custom ops — strided inputs, aliasing, dtypes, gradients, devices."""
from __future__ import annotations

import numpy as np

from . import _C
from . import custom_op as _co
from . import dtypes as _dt
from .backprop import no_grad
from .errors import EmberError, EmberTypeError, EmberValueError
from .tensor import Tensor, Var, _wrap, tensor

# strided-vs-contiguous agreement: the same math on the same values, so only reduction order may differ
_TOL = {"float64": (1e-10, 1e-12), "float32": (1e-5, 1e-6), "float16": (1e-2, 1e-3), "bfloat16": (2e-2, 1e-2)}
_MAX_FD_ELEMS = 48  # finite differences on at most this many elements per input (chosen at random)


class CheckOpError(EmberError, AssertionError):
    """Raised by check_op with one line per failed check; ``.failures`` holds (check, detail) pairs."""

    def __init__(self, op_name, failures, report=None):
        """Args: ``op_name``, the op checked; ``failures``, (check, detail) pairs; ``report``, the
        CheckOpReport of the checks that ran."""
        self.failures = list(failures)
        self.report = report
        lines = "\n".join(f"  - {check}: {detail}" for check, detail in self.failures)
        super().__init__(f"[check_op] {op_name}: {len(self.failures)} check(s) failed\n{lines}")


class CheckOpReport:
    """What check_op verified: ``passed`` check names, ``skipped`` (check, reason) pairs and the
    dtypes the op accepted (``supported_dtypes``)."""

    def __init__(self, op_name):
        """Args: ``op_name``, the name of the op the report is about."""
        self.op = op_name
        self.passed = []
        self.skipped = []
        self.supported_dtypes = []

    def __bool__(self):
        return True

    def __repr__(self):
        lines = [f"check_op({self.op}): passed {', '.join(self.passed) or '-'}"]
        lines += [f"  skipped {c}: {why}" for c, why in self.skipped]
        if self.supported_dtypes:
            lines.append(f"  dtypes accepted: {', '.join(d.name for d in self.supported_dtypes)}")
        return "\n".join(lines)


# ----------------------------------------------------------------------------- running the op
def _flat_args(ts):
    args = []
    for t in ts:
        args += (t._storage, t._layout)
    return args


def _run(op, ts):
    """Forward + output validation without recording; an InplaceOp runs on a copy of its target
    and that copy is the result."""
    with no_grad():
        if isinstance(op, (_co.InplaceOp1, _co.InplaceOp2, _co.InplaceOp3)):
            target = ts[0].copy()
            _co._inplace(op, target, tuple(ts[1:]))
            return target
        res = _co._fwd(op, ts[0]._storage)(*_flat_args(ts))
        return _co._output(op, res, tuple(ts))


def _values(t):
    return t.numpy()


def _describe(e):
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def _mismatch(got, want, dtype):
    """None when the arrays agree for ``dtype``, else a one-line description of the worst element."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape} vs {want.shape}"
    if got.size == 0:
        return None
    if not dtype.is_float:
        bad = got != want
        if not bad.any():
            return None
        i = np.unravel_index(np.argmax(bad), got.shape)
        return f"{int(bad.sum())} element(s) differ, e.g. at {tuple(int(j) for j in i)}: {got[i]} vs {want[i]}"
    rtol, atol = _TOL[dtype.name]
    g, w = got.astype(np.float64), want.astype(np.float64)
    if np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
        return None
    err = np.abs(g - w)
    err = np.where(np.isnan(g) != np.isnan(w), np.inf, np.nan_to_num(err, nan=0.0))
    i = np.unravel_index(np.argmax(err), got.shape)
    return f"max abs diff {err[i]:.3g} at {tuple(int(j) for j in i)}: {g[i]:.6g} vs {w[i]:.6g}"


# ----------------------------------------------------------------------------- strided variants
def _garbage(dtype, n):
    """Filler for the elements a layout does not cover: reading them shows up in the output."""
    np_dt = _dt.numpy_dtype(dtype)
    if dtype.is_float:
        return np.full(n, np.nan, dtype=np_dt)
    return np.full(n, 0xAB, dtype=np_dt)


def _strided_copy(t, order, step, offset):
    """A tensor with ``t``'s values in a fresh storage seen through a non-contiguous layout:
    ``order`` "C" or "F" (transposed memory), inner stride ``step``, ``offset`` leading elements."""
    shape = t.shape
    dims = range(len(shape)) if order == "F" else reversed(range(len(shape)))
    strides = [0] * len(shape)
    acc = step
    for d in dims:
        strides[d] = acc
        acc *= max(shape[d], 1)
    storage = _C.CpuStorage.from_numpy(_garbage(t.dtype, offset + acc), dtype=t.dtype)
    layout = _C.Layout(list(shape), strides, offset)
    storage.as_numpy(layout, writable=True)[...] = t._storage.as_numpy(t._layout)
    return _wrap(storage, layout, t.dtype, t.device)


def _variants(ts):
    """(name, inputs) pairs: the same values as ``ts`` seen through offset / strided / transposed layouts."""
    out = [("offset and inner stride 2", [_strided_copy(t, "C", 2, 3) for t in ts])]
    if any(t.ndim >= 2 for t in ts):
        out.append(("transposed memory with offset", [_strided_copy(t, "F", 1, 5) for t in ts]))
    return out


# ----------------------------------------------------------------------------- the checks
def _check_forward(op, base, report, fail):
    """Forward on contiguous inputs: runs, returns a valid output that shares no memory with an
    input, and (CustomOp) leaves the inputs unchanged."""
    before = [_values(t) for t in base]
    inplace = isinstance(op, (_co.InplaceOp1, _co.InplaceOp2, _co.InplaceOp3))
    try:
        if inplace:
            report.skipped.append(("aliasing", "an in-place op writes its target by design"))
            ref = _run(op, base)
        else:
            with no_grad():
                res = _co._fwd(op, base[0]._storage)(*_flat_args(base))
            st = res[0] if isinstance(res, tuple) and len(res) == 2 else None
            for i, t in enumerate(base):
                if isinstance(st, _C.Storage) and (st is t._storage or st.same_buffer(t._storage)):
                    fail("aliasing", f"the output shares memory with input {i}")
                    return None
            report.passed.append("aliasing")
            ref = _co._output(op, res, tuple(base))
    except Exception as e:  # noqa: BLE001  (any failure of the user's forward is a finding)
        fail("forward", f"on contiguous inputs it raised {_describe(e)}")
        return None
    for i, (t, b) in enumerate(zip(base, before)):
        if _mismatch(_values(t), b, t.dtype) is not None:
            fail("inputs unchanged", f"the forward modified input {i}")
            break
    else:
        report.passed.append("forward")
    return ref


def _check_strided(op, base, ref, report, fail):
    want = _values(ref)
    for name, ts in _variants(base):
        try:
            with np.errstate(all="ignore"):  # an op that reads the NaN filler would warn; we report it instead
                got = _run(op, ts)
        except Exception as e:  # noqa: BLE001
            fail("strided", f"with {name} inputs it raised {_describe(e)}")
            return
        bad = _mismatch(_values(got), want, ref.dtype)
        if bad is not None:
            fail("strided", f"with {name} inputs the output differs from the contiguous one: {bad}")
            return
    report.passed.append("strided")


def _cast_inputs(base, dtype):
    d0 = base[0].dtype
    with no_grad():
        return [t.to_dtype(dtype).copy().detach() if t.dtype is d0 else t for t in base]


def _check_dtypes(op, base, report, fail):
    """Every other dtype either works (a valid output) or is refused with an EmberError."""
    report.supported_dtypes.append(base[0].dtype)
    bad = []
    for dt in _dt.ALL_DTYPES:
        if dt is base[0].dtype:
            continue
        try:
            ts = _cast_inputs(base, dt)
        except EmberError:
            continue
        try:
            _run(op, ts)
            report.supported_dtypes.append(dt)
        except EmberError:
            pass
        except Exception as e:  # noqa: BLE001
            bad.append(f"{dt.name} raised {_describe(e)}")
    if bad:
        fail("dtypes", "unsupported dtypes must raise an EmberError: " + "; ".join(bad))
    else:
        report.passed.append("dtypes")


def _loss(op, ts, w):
    with no_grad():
        return float((_values(_run(op, ts)).astype(np.float64) * w).sum())


def _check_backward(op, base, report, fail, eps, atol, rtol, rng):
    """bwd against central finite differences of sum(out * w) for random w, in float64 when the
    op accepts it (else float32 with a coarser step and tolerance)."""
    if not isinstance(op, (_co.CustomOp1, _co.CustomOp2, _co.CustomOp3)):
        report.skipped.append(("backward", "in-place ops record no backward"))
        return
    if not op._has_bwd:
        report.skipped.append(("backward", "the op defines no bwd"))
        return
    floats = [i for i, t in enumerate(base) if t.dtype.is_float]
    if not floats:
        report.skipped.append(("backward", "no float input"))
        return
    # the first dtype the op accepts; its step and tolerances are used after the loop
    for dt, e, at, rt in ((_dt.float64, eps, atol, rtol), (_dt.float32, 1e-3, 1e-2, 1e-2)):  # noqa: B007
        ts = [t.to_dtype(dt).copy().detach() if t.dtype.is_float else t for t in base]
        try:
            out = _run(op, ts)
            break
        except EmberError:
            continue
    else:
        report.skipped.append(("backward", "the op accepts neither float64 nor float32"))
        return
    if not out.dtype.is_float:
        report.skipped.append(("backward", f"the output is {out.dtype.name}, not a float"))
        return
    w = rng.standard_normal(out.shape)
    vs = [Var(t) if i in floats else t for i, t in enumerate(ts)]
    try:
        res = getattr(vs[0], f"apply_op{len(vs)}")(*vs[1:], op)
        grads = (res * tensor(w, dtype=res.dtype, device=res.device)).sum().backward()
    except Exception as e:  # noqa: BLE001
        fail("backward", f"backward raised {_describe(e)}")
        return
    worst = None
    for i in floats:
        g = grads.get(vs[i])
        analytic = np.zeros(ts[i].shape) if g is None else _values(g).astype(np.float64)
        x = _values(ts[i]).astype(np.float64)
        flat = x.reshape(-1)
        picks = np.arange(flat.size)
        if flat.size > _MAX_FD_ELEMS:
            picks = rng.choice(flat.size, _MAX_FD_ELEMS, replace=False)
        for j in picks:
            num = 0.0
            for sign in (1.0, -1.0):
                xp = flat.copy()
                xp[j] += sign * e
                tp = list(ts)
                tp[i] = tensor(xp.reshape(x.shape), dtype=dt, device=ts[i].device)
                num += sign * _loss(op, tp, w)
            num /= 2 * e
            got = analytic.reshape(-1)[j]
            err = abs(got - num) - (at + rt * abs(num))
            if not err <= 0 and (worst is None or err > worst[0]):
                idx = tuple(int(k) for k in np.unravel_index(j, x.shape))
                worst = (err, i, idx, got, num, g is None)
    if worst is None:
        report.passed.append("backward" if dt is _dt.float64 else "backward (float32)")
        return
    _, i, idx, got, num, was_none = worst
    what = "bwd returned None (no gradient)" if was_none else f"bwd gives {got:.6g}"
    fail("backward", f"input {i} at {idx}: {what}, finite differences give {num:.6g} ({dt.name})")


def _other_devices():
    return [_dt.Device("metal", 0)] if _dt.metal_is_available() else []


def _check_devices(op, base, ref, report, fail):
    devs = _other_devices()
    if not devs:
        report.skipped.append(("devices", "no device other than cpu is available"))
        return
    want = _values(ref)
    for dev in devs:
        try:
            got = _run(op, [t.to_device(dev) for t in base])
            bad = _mismatch(_values(got), want, ref.dtype)
        except Exception as e:  # noqa: BLE001
            bad = f"raised {_describe(e)}"
        if bad is not None:
            fail("devices", f"{dev} disagrees with cpu: {bad}")
            return
    report.passed.append("devices")


# ----------------------------------------------------------------------------- entry point
def check_op(op, *inputs, eps=1e-6, atol=1e-5, rtol=1e-3, seed=0):
    """Checks a custom op on ``inputs``: forward on contiguous vs strided/offset inputs agrees, the
    output shares no memory with an input (and inputs stay unchanged), unsupported dtypes raise an
    EmberError, ``bwd`` matches finite differences (float64), every available device agrees with
    cpu. Returns a CheckOpReport when all pass, else raises CheckOpError listing each failure.

    A ``bwd`` that returns None where the true gradient is nonzero counts as a failure here.

    Args:
        op: a CustomOp1/2/3 or InplaceOp1/2/3 instance.
        inputs: one Tensor (or array) per input of the op.
        eps: the finite-difference step.
        atol: the absolute tolerance of the gradient check.
        rtol: its relative tolerance.
        seed: seeds the random weights and the elements the gradient check perturbs.

    Returns:
        CheckOpReport: what passed, what was skipped and why, and the dtypes the op accepted.

    Raises:
        CheckOpError: one line per failed check.
        DTypeError: ``op`` is not a custom op.
    """
    kinds = (_co.CustomOp1, _co.CustomOp2, _co.CustomOp3, _co.InplaceOp1, _co.InplaceOp2, _co.InplaceOp3)
    if not isinstance(op, kinds):
        raise EmberTypeError(f"[check_op] expected a CustomOp1/2/3 or InplaceOp1/2/3, got {type(op).__name__}")
    if len(inputs) != op._arity:
        raise EmberValueError(f"[check_op] {op.name} takes {op._arity} input(s), got {len(inputs)}")
    with no_grad():
        base = [(t if isinstance(t, Tensor) else tensor(t, device="cpu")).to_device("cpu").copy().detach() for t in inputs]
    report = CheckOpReport(op.name)
    failures = []

    def fail(check, detail):
        failures.append((check, detail))

    ref = _check_forward(op, base, report, fail)
    if ref is not None:
        _check_strided(op, base, ref, report, fail)
        _check_devices(op, base, ref, report, fail)
    _check_dtypes(op, base, report, fail)
    _check_backward(op, base, report, fail, eps, atol, rtol, np.random.default_rng(seed))
    if failures:
        raise CheckOpError(op.name, failures, report)
    return report
