"""check_op: an opcheck for custom ops — strided inputs, aliasing, dtypes, gradients, devices."""
from __future__ import annotations

import numpy as np

from . import _C
from . import custom_op as _co
from . import custom_op_n as _con
from . import dtypes as _dt
from .backprop import no_grad
from .creation import tensor
from .errors import EmberError, EmberTypeError, EmberValueError, UnsupportedOp
from .reference import bwd_from_reference
from .tensor_type import Tensor, _wrap
from .variable import Var

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
    """What check_op verified: ``passed`` check names, ``skipped`` (check, reason) pairs, the
    dtypes the op accepted (``supported_dtypes``) and, per device other than the CPU, how it compared
    (``devices``: device name -> "agrees with cpu" or what differed)."""

    def __init__(self, op_name):
        """Args: ``op_name``, the name of the op the report is about."""
        self.op = op_name
        self.passed = []
        self.skipped = []
        self.supported_dtypes = []
        self.devices = {}

    def __bool__(self):
        return True

    def __repr__(self):
        lines = [f"check_op({self.op}): passed {', '.join(self.passed) or '-'}"]
        lines += [f"  skipped {c}: {why}" for c, why in self.skipped]
        if self.supported_dtypes:
            lines.append(f"  dtypes accepted: {', '.join(d.name for d in self.supported_dtypes)}")
        lines += [f"  on {dev}: {how}" for dev, how in self.devices.items()]
        return "\n".join(lines)


# ----------------------------------------------------------------------------- running the op
def _flat_args(ts):
    args = []
    for t in ts:
        args += (t._storage, t._layout)
    return args


def _mutated(op, n):
    return sorted({int(i) % n for i in op.mutates}) if isinstance(op, _co.CustomOp) and op.mutates else []


def _run_all(op, ts):
    """Forward + output validation without recording, as a list of outputs. An in-place op runs on
    copies of the inputs it writes, and those copies lead its results."""
    with no_grad():
        if isinstance(op, (_co.InplaceOp1, _co.InplaceOp2, _co.InplaceOp3)):
            target = ts[0].copy()
            _co._inplace(op, target, tuple(ts[1:]))
            return [target]
        if isinstance(op, _co.CustomOp):
            ts = list(ts)
            mut = _mutated(op, len(ts))
            for i in mut:
                ts[i] = ts[i].copy()
            args = [(t._storage, t._layout) for t in ts]
            res = _con._mutating_forward(op, ts, args) if mut else _co._fwd(op, ts[0]._storage)(args)
            return [ts[i] for i in mut] + _con._results(op, res, tuple(ts))
        res = _co._fwd(op, ts[0]._storage)(*_flat_args(ts))
        return [_co._output(op, res, tuple(ts))]


def _run(op, ts):
    """The first output of _run_all (the result of a one-output op)."""
    return _run_all(op, ts)[0]


def _mismatch_all(got, want):
    """None when every output agrees, else a description naming the first that differs."""
    if len(got) != len(want):
        return f"{len(got)} outputs vs {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        bad = _mismatch(_values(g), _values(w), w.dtype)
        if bad is not None:
            return bad if len(want) == 1 else f"output {i}: {bad}"
    return None


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
            ref = _run_all(op, base)
        elif isinstance(op, _co.CustomOp) and op.mutates:
            report.skipped.append(("aliasing", "the op writes the inputs it mutates by design"))
            ref = _run_all(op, base)
        elif isinstance(op, _co.CustomOp):
            with no_grad():
                res = _co._fwd(op, base[0]._storage)([(t._storage, t._layout) for t in base])
            sts = [r[0] for r in res if isinstance(r, tuple) and len(r) == 2] if isinstance(res, list) else []
            for k, st in enumerate(sts):
                for i, t in enumerate(base):
                    if isinstance(st, _C.Storage) and (st is t._storage or st.same_buffer(t._storage)):
                        fail("aliasing", f"output {k} shares memory with input {i}")
                        return None
                for j in range(k):
                    if isinstance(st, _C.Storage) and isinstance(sts[j], _C.Storage) and st.same_buffer(sts[j]):
                        fail("aliasing", f"outputs {j} and {k} share memory")
                        return None
            report.passed.append("aliasing")
            ref = _con._results(op, res, tuple(base))
        else:
            with no_grad():
                res = _co._fwd(op, base[0]._storage)(*_flat_args(base))
            st = res[0] if isinstance(res, tuple) and len(res) == 2 else None
            for i, t in enumerate(base):
                if isinstance(st, _C.Storage) and (st is t._storage or st.same_buffer(t._storage)):
                    fail("aliasing", f"the output shares memory with input {i}")
                    return None
            report.passed.append("aliasing")
            ref = [_co._output(op, res, tuple(base))]
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
    for name, ts in _variants(base):
        try:
            with np.errstate(all="ignore"):  # an op that reads the NaN filler would warn; we report it instead
                got = _run_all(op, ts)
        except Exception as e:  # noqa: BLE001
            fail("strided", f"with {name} inputs it raised {_describe(e)}")
            return
        bad = _mismatch_all(got, ref)
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


def _diff_outputs(op, outs):
    """Indices of the outputs a gradient can flow from (float, not declared non-differentiable)."""
    nd = getattr(op, "non_differentiable", ())
    return [k for k, o in enumerate(outs) if o.dtype.is_float and k not in nd]


def _loss(op, ts, ws):
    with no_grad():
        outs = _run_all(op, ts)
        return float(sum((_values(outs[k]).astype(np.float64) * w).sum() for k, w in ws.items()))


def _apply(op, vs):
    """Runs op recorded; the outputs as a list."""
    if isinstance(op, _co.CustomOp):
        res = _con.apply_op(op, *vs)
        return [res] if isinstance(res, Tensor) else list(res)
    return [getattr(vs[0], f"apply_op{len(vs)}")(*vs[1:], op)]


def _analytic(op, ts, floats, ws):
    """The recorded backward's gradient of sum(out_k * w_k) per float input (None where it gave none)."""
    vs = [Var(t) if i in floats else t for i, t in enumerate(ts)]
    outs = _apply(op, vs)
    loss = None
    for k, w in ws.items():
        # The weighted sum runs on the CPU (to_device is differentiable): on another device the check
        # then tests the op's own forward and bwd there, not the device's mul and sum.
        o = outs[k] if outs[k].device == _dt.cpu else outs[k].to_device(_dt.cpu)
        term = (o * tensor(w, dtype=o.dtype, device=_dt.cpu)).sum()
        loss = term if loss is None else loss + term
    grads = loss.backward()
    return {i: grads.get(vs[i]) for i in floats}


def _backward_setup(op, base, report, eps, atol, rtol, rng):
    """(ts, floats, ws, dt, e, at, rt) for the gradient checks, or None (a skip noted in report)."""
    if not isinstance(op, (_co.CustomOp1, _co.CustomOp2, _co.CustomOp3, _co.CustomOp)):
        report.skipped.append(("backward", "in-place ops record no backward"))
        return None
    if isinstance(op, _co.CustomOp) and op.mutates:
        report.skipped.append(("backward", "the op mutates inputs (their gradients are not differentiated)"))
        return None
    if not op._has_bwd:
        report.skipped.append(("backward", "the op defines no bwd"))
        return None
    floats = [i for i, t in enumerate(base) if t.dtype.is_float]
    if not floats:
        report.skipped.append(("backward", "no float input"))
        return None
    # the first dtype the op accepts; its step and tolerances are used after the loop
    for dt, e, at, rt in ((_dt.float64, eps, atol, rtol), (_dt.float32, 1e-3, 1e-2, 1e-2)):  # noqa: B007
        ts = [t.to_dtype(dt).copy().detach() if t.dtype.is_float else t for t in base]
        try:
            outs = _run_all(op, ts)
            break
        except EmberError:
            continue
    else:
        report.skipped.append(("backward", "the op accepts neither float64 nor float32"))
        return None
    diff = _diff_outputs(op, outs)
    if not diff:
        report.skipped.append(("backward", "no output is a differentiable float"))
        return None
    ws = {k: rng.standard_normal(outs[k].shape) for k in diff}
    return ts, floats, ws, dt, e, at, rt


def _check_backward(op, setup, report, fail, rng):
    """bwd against central finite differences of sum_k sum(out_k * w_k) for random w_k (every
    differentiable output, every float input), in float64 when the op accepts it (else float32
    with a coarser step and tolerance)."""
    ts, floats, ws, dt, e, at, rt = setup
    try:
        grads = _analytic(op, ts, floats, ws)
    except Exception as ex:  # noqa: BLE001
        fail("backward", f"backward raised {_describe(ex)}")
        return
    worst = None
    for i in floats:
        g = grads[i]
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
                num += sign * _loss(op, tp, ws)
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


def _check_reference(op, base, ref, setup, report, fail):
    """Forward against ``op.reference`` on the CPU and every other device the op has a forward for;
    a hand-written ``bwd`` against the reference's gradients."""
    if op.reference is None or ref is None:
        return
    bad = None
    for dev in [_dt.cpu] + _devices_with_forward(op):
        try:
            ins = base if dev == _dt.cpu else _device_inputs(base, dev)
            with no_grad():
                try:
                    want = op.reference(*ins)
                except UnsupportedOp:
                    if dev == _dt.cpu:
                        raise
                    # ember has no kernel on this device for an op the reference uses: the reference
                    # runs on the CPU, on the same values, and the device's forward is compared with it
                    want = op.reference(*[t.to_device(_dt.cpu) for t in ins])
            want = [want] if isinstance(want, Tensor) else list(want)
            got = ref if dev == _dt.cpu else _run_all(op, ins)
            got = got[len(_mutated(op, len(base))):]  # a mutating op's written inputs lead its results
            bad = _mismatch_all(got, want)
        except Exception as e:  # noqa: BLE001
            bad = f"raised {_describe(e)}"
        if bad is not None:
            fail("reference", f"on {dev} the forward differs from the reference: {bad}")
            break
    else:
        report.passed.append("reference forward")
    if setup is None or op._bwd_is_reference:
        return
    ts, floats, ws, dt, *_ = setup
    try:
        mine = _analytic(op, ts, floats, ws)
        op.bwd = _ref_bwd(op)  # on the instance, for this one call
        try:
            theirs = _analytic(op, ts, floats, ws)
        finally:
            del op.bwd  # back to the class's bwd
    except Exception as e:  # noqa: BLE001
        fail("reference", f"the reference's gradients raised {_describe(e)}")
        return
    for i in floats:
        a, b = mine[i], theirs[i]
        if a is None and b is None:
            continue
        av = np.zeros(ts[i].shape) if a is None else _values(a)
        bv = np.zeros(ts[i].shape) if b is None else _values(b)
        bad = _mismatch(av, bv, dt)
        if bad is not None:
            fail("reference", f"bwd's gradient of input {i} differs from the reference's: {bad}")
            return
    report.passed.append("reference backward")


def _ref_bwd(op):
    """A bwd (in op's calling convention) computing the reference's gradients, set on the instance."""
    return bwd_from_reference(op._arity).__get__(op)


def _device_inputs(base, dev):
    """base on ``dev``; a dtype the device lacks (float64 on Metal) goes as float32."""
    ins = base
    if any(not _C.device_supports(dev.kind, dev.index, t.dtype.code) for t in base):
        ins = [t.to_dtype(_dt.float32) if t.dtype == _dt.float64 else t for t in base]
    return [t.to_device(dev) for t in ins]


def _devices_with_forward(op):
    return [d for d in _other_devices()
            if getattr(type(op), f"{d.type}_fwd") is not getattr(_co._OpBase, f"{d.type}_fwd")]


def _other_devices():
    """cuda:0 and metal:0 where this process has them (the emulators' included)."""
    return ([_dt.Device("metal", 0)] if _dt.metal_is_available() else []) + \
        ([_dt.Device("cuda", 0)] if _dt.cuda_is_available() else [])


def _check_devices(op, base, ref, setup, report, fail):
    """Every output on every other device the op has a forward for agrees with the CPU's, and so do
    the gradients of every float input (when the op has a backward)."""
    devs = _other_devices()
    if not devs:
        report.skipped.append(("devices", "no device other than cpu is available"))
        return
    # An op that defines no forward for a device makes no claim about it: nothing to compare.
    mine = _devices_with_forward(op)
    for d in devs:
        if d not in mine:
            report.devices[str(d)] = f"not compared: {op.name} has no {d.type}_fwd"
    if not mine:
        report.skipped.append(("devices", f"{op.name} defines no forward for a device other than cpu"))
        return
    ok = True
    for dev in mine:
        # A dtype the device lacks (float64 on Metal) is compared in float32, on both sides.
        try:
            ins = _device_inputs(base, dev)
            cpu_ins = [t.to_device(_dt.cpu) for t in ins]
            want = ref if all(a.dtype == b.dtype for a, b in zip(cpu_ins, base)) else _run_all(op, cpu_ins)
            bad = _mismatch_all(_run_all(op, ins), want)
            if bad is None and setup is not None:
                bad = _grads_on(op, cpu_ins, ins, setup)
        except Exception as e:  # noqa: BLE001
            bad = f"raised {_describe(e)}"
        report.devices[str(dev)] = "agrees with cpu" if bad is None else bad
        if bad is not None:
            fail("devices", f"{dev} disagrees with cpu: {bad}")
            ok = False
    if ok:
        report.passed.append("devices")


def _grads_on(op, cpu_ins, dev_ins, setup):
    """None when the backward on the device gives the CPU's gradients, else what differs."""
    floats, ws = setup[1], setup[2]
    want = _analytic(op, cpu_ins, floats, ws)
    got = _analytic(op, dev_ins, floats, ws)
    for i in floats:
        a, b = got[i], want[i]
        if (a is None) != (b is None):
            return f"the gradient of input {i} is {'missing' if a is None else 'present'} on the device only"
        if a is not None:
            bad = _mismatch(_values(a), _values(b), b.dtype)
            if bad is not None:
                return f"gradient of input {i}: {bad}"
    return None


# ----------------------------------------------------------------------------- entry point
def check_op(op, *inputs, eps=1e-6, atol=1e-5, rtol=1e-3, seed=0):
    """Checks a custom op on ``inputs``: forward on contiguous vs strided/offset inputs agrees, the
    output shares no memory with an input (and inputs stay unchanged), unsupported dtypes raise an
    EmberError, ``bwd`` matches finite differences (float64), every available device the op defines
    a forward for (``metal_fwd``, ``cuda_fwd``) agrees with cpu (outputs and gradients). Returns a CheckOpReport
    when all pass, else raises CheckOpError listing each failure.

    An ``em.CustomOp`` is checked on every output (and no two outputs may share memory) and every
    input's gradient, with ``sum_k sum(out_k * w_k)`` over its differentiable outputs. An op with a
    ``reference`` has its forward compared with it on every device, and a hand-written ``bwd``
    compared with the reference's gradients.

    A ``bwd`` that returns None where the true gradient is nonzero counts as a failure here.

    Args:
        op: a CustomOp, CustomOp1/2/3 or InplaceOp1/2/3 instance.
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
    kinds = (_co.CustomOp1, _co.CustomOp2, _co.CustomOp3, _co.CustomOp, _co.InplaceOp1, _co.InplaceOp2,
             _co.InplaceOp3)
    if not isinstance(op, kinds):
        raise EmberTypeError(f"[check_op] expected a CustomOp, CustomOp1/2/3 or InplaceOp1/2/3, got "
                             f"{type(op).__name__}")
    if (len(inputs) != op._arity) if op._arity > 0 else not inputs:
        want = f"{op._arity} input(s)" if op._arity > 0 else "at least one input"
        raise EmberValueError(f"[check_op] {op.name} takes {want}, got {len(inputs)}")
    with no_grad():
        # Built on the CPU whatever the default device (which may lack float64): the reference runs there.
        base = [(t if isinstance(t, Tensor) else tensor(t, device="cpu")).to_device("cpu").copy().detach()
                for t in inputs]
    report = CheckOpReport(op.name)
    failures = []

    def fail(check, detail):
        failures.append((check, detail))

    rng = np.random.default_rng(seed)
    ref = _check_forward(op, base, report, fail)
    setup = _backward_setup(op, base, report, eps, atol, rtol, rng)
    if ref is not None:
        _check_strided(op, base, ref, report, fail)
        _check_devices(op, base, ref, setup, report, fail)
    _check_dtypes(op, base, report, fail)
    if setup is not None:
        _check_backward(op, setup, report, fail, rng)
    _check_reference(op, base, ref, setup, report, fail)
    if failures:
        raise CheckOpError(op.name, failures, report)
    return report
