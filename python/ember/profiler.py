"""em.profiler: per-op wall and self time, calls, shapes, devices and bytes allocated; a table and a Chrome trace."""
from __future__ import annotations

import inspect
import json
import threading
import time

from . import _C, backprop, custom_op_n, grad_rules
from . import dtypes as _dt
from .errors import EmberError, EmberValueError
from .tensor_type import Tensor

__all__ = ["profile"]

# Tensor methods that are not ops (metadata, conversions to Python): never wrapped.
_SKIP = frozenset(("dim", "size", "stride", "numel", "is_contiguous", "element_size", "nelement", "tolist",
                   "item", "__repr__", "__str__", "__len__", "__bool__", "__iter__", "__hash__", "__eq__",
                   "__ne__", "__format__", "__index__", "__int__", "__float__", "__array__", "__dlpack__",
                   "__dlpack_device__", "__init__", "__new__", "__init_subclass__", "__getattr__", "__setattr__",
                   "__reduce__", "__reduce_ex__", "__sizeof__", "__dir__", "__class_getitem__", "numpy", "id",
                   "as_tensor", "__contains__", "__deepcopy__", "__copy__", "__getstate__", "__setstate__"))
_DUNDER_OPS = frozenset(("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
                         "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__neg__", "__abs__",
                         "__pow__", "__rpow__", "__matmul__", "__rmatmul__", "__getitem__", "__setitem__",
                         "__lt__", "__le__", "__gt__", "__ge__", "__and__", "__or__", "__xor__", "__invert__",
                         "__iadd__", "__isub__", "__imul__", "__itruediv__"))
_CUSTOM = {"apply_op1": 0, "apply_op2": 1, "apply_op3": 2, "apply_op1_no_bwd": 0, "apply_op2_no_bwd": 1,
           "apply_op3_no_bwd": 2, "inplace_op1": 0, "inplace_op2": 1, "inplace_op3": 2}
_lock = threading.Lock()
_active = None  # the profile being recorded (one at a time)
_ASYNC = ("metal", "cuda")  # devices whose kernels run asynchronously: their times are host-side


class _Event:
    __slots__ = ("bytes", "children", "device", "end", "kind", "name", "parent", "shapes", "start", "tid")


def _allocated():
    return sum(_C.memory_stats(d.kind, d.index)[0] for d in [_dt.cpu] + _dt._accelerators())


def _tensors(args):
    for a in args:
        if isinstance(a, Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, Tensor):
                    yield b


class profile:
    """Records every op run inside ``with em.profiler.profile() as prof:`` on any thread.

    Rows are built-in tensor ops (by method name: ``matmul``, ``add``, ...), custom and fused ops by
    their ``name`` (``rms_norm``, ``softplus``), and the backward of each op as its own row named
    ``<op>_bwd`` (``rms_norm_bwd``; ``forward_op`` names the op). Each event has its wall time, its
    self time (wall minus the ops it called), the input shapes (``record_shapes=True``), the device,
    and the bytes its results still hold (the change of ``em.memory_stats()``'s allocated bytes).

    On Metal and CUDA the times are host-side (encoding or launching and, where a result is read,
    waiting): rows say so in their ``timing`` column; the CPU's are the computation itself.

    While no profile is active nothing is wrapped, so ops cost exactly what they cost without the
    profiler. While one is, tensor methods, ``em.apply_op`` and backward rules are wrapped (all
    threads see it).

    Args:
        record_shapes: record the shapes of each op's tensor arguments.
        profile_memory: record the bytes allocated per op (reads the allocators' counters per op).
    """

    def __init__(self, record_shapes=False, profile_memory=True):
        self.record_shapes = bool(record_shapes)
        self.profile_memory = bool(profile_memory)
        self.events = []
        self._patched = []
        self._local = threading.local()
        self._t0 = None

    # ------------------------------------------------------------------ recording
    def _stack(self):
        st = getattr(self._local, "stack", None)
        if st is None:
            st = self._local.stack = []
        return st

    def _run(self, name, kind, fn, args, kwargs, shapes_of=None, forward_op=None):
        st = self._stack()
        if st and st[-1].name == name and st[-1].kind == kind:
            return fn(*args, **kwargs)  # a pass-through to the same op (em.exp -> Tensor.exp): one row
        ev = _Event()
        ev.name, ev.kind, ev.children, ev.parent = name, kind, 0.0, forward_op
        ev.tid = threading.get_ident()
        ev.device = None
        ev.shapes = None
        ts = list(_tensors(shapes_of if shapes_of is not None else args))
        if ts:
            ev.device = str(ts[0]._device)
            if self.record_shapes:
                ev.shapes = [list(t.shape) for t in ts]
        b0 = _allocated() if self.profile_memory else 0
        st.append(ev)
        out = None
        ev.start = time.perf_counter()
        try:
            out = fn(*args, **kwargs)
        finally:
            ev.end = time.perf_counter()
            st.pop()
            ev.bytes = (_allocated() - b0) if self.profile_memory else 0
            if st:
                st[-1].children += ev.end - ev.start
            if ev.device is None:
                for t in _tensors(out if isinstance(out, (list, tuple)) else (out,)):
                    ev.device = str(t._device)
                    break
            self.events.append(ev)
        return out

    def _wrap_method(self, owner, attr, fn, label):
        prof = self
        if attr in _CUSTOM:
            k = _CUSTOM[attr]

            def wrapped(*args, **kwargs):
                op = args[k + 1] if len(args) > k + 1 else kwargs.get("op")
                return prof._run(getattr(op, "name", attr), "custom op", fn, args, kwargs)
        else:
            def wrapped(*args, **kwargs):
                return prof._run(label, "op", fn, args, kwargs)
        wrapped.__name__, wrapped.__doc__, wrapped.__wrapped__ = fn.__name__, fn.__doc__, fn
        self._patched.append((owner, attr, owner.__dict__.get(attr)))
        setattr(owner, attr, wrapped)

    def _patch(self):
        done = set()
        for cls in Tensor.__mro__:
            if cls is object:
                continue
            for attr, fn in list(vars(cls).items()):
                if attr in done or attr in _SKIP or not inspect.isfunction(fn):
                    continue
                if attr.startswith("_") and attr not in _DUNDER_OPS:
                    continue
                done.add(attr)
                # patch on Tensor itself so that restoring is one setattr each
                self._patched_tensor(Tensor, attr, fn)
        prof = self
        orig_apply = custom_op_n._apply_op

        def apply_op_hook(op, tensors):
            return prof._run(getattr(op, "name", "apply_op"), "custom op", orig_apply, (op,) + tensors, {},
                             shapes_of=tensors)

        self._patched.append((vars(custom_op_n), "_profile_hook", None))
        custom_op_n._profile_hook = apply_op_hook
        rules = grad_rules.RULES
        for name, rule in list(rules.items()):
            def wrapped_rule(node, out, g, _rule=rule, _name=name):
                return prof._run(f"{_name}_bwd", "backward", _rule, (node, out, g), {}, shapes_of=(out,),
                                 forward_op=_name)
            self._patched.append((rules, name, rule))
            rules[name] = wrapped_rule
        orig_custom = backprop._custom_grads

        def custom_grads(node, out, g, rule):
            return prof._run(f"{node.name}_bwd", "backward", orig_custom, (node, out, g, rule), {},
                             shapes_of=tuple(node.inputs), forward_op=node.name)

        self._patched.append((backprop, "_custom_grads", orig_custom))
        backprop._custom_grads = custom_grads

    def _patched_tensor(self, Tensor, attr, fn):
        had = attr in Tensor.__dict__
        prev = Tensor.__dict__.get(attr)
        self._wrap_method(Tensor, attr, fn, attr.strip("_") if attr.startswith("__") else attr)
        if not had:  # an inherited method: the last entry restores by deleting the shadow
            self._patched[-1] = (Tensor, attr, None)
        else:
            self._patched[-1] = (Tensor, attr, prev)

    def _unpatch(self):
        for owner, attr, prev in reversed(self._patched):
            if isinstance(owner, dict):
                owner[attr] = prev
            elif prev is None:
                delattr(owner, attr)
            else:
                setattr(owner, attr, prev)
        self._patched = []

    def __enter__(self):
        global _active
        with _lock:
            if _active is not None:
                raise EmberError("[profiler] a profile is already being recorded; nest no second one")
            _active = self
            self._patch()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        global _active
        with _lock:
            self._unpatch()
            _active = None
        return False

    # ------------------------------------------------------------------ results
    def key_averages(self):
        """One dict per (op name, kind, device): ``name``, ``kind`` ("op", "custom op" or "backward"),
        ``forward_op`` (for a backward row), ``calls``, ``wall_time`` and ``self_time`` (seconds, summed),
        ``shapes`` (the distinct input shapes seen, with record_shapes), ``device``, ``timing`` ("host" on
        a device whose kernels run asynchronously, else "compute") and ``bytes`` (allocated, summed)."""
        rows = {}
        for ev in self.events:
            key = (ev.name, ev.kind, ev.device)
            r = rows.get(key)
            if r is None:
                r = rows[key] = {"name": ev.name, "kind": ev.kind, "forward_op": ev.parent, "calls": 0,
                                 "wall_time": 0.0, "self_time": 0.0, "shapes": [], "device": ev.device or "-",
                                 "timing": "host" if (ev.device or "").startswith(_ASYNC) else "compute",
                                 "bytes": 0}
            r["calls"] += 1
            wall = ev.end - ev.start
            r["wall_time"] += wall
            r["self_time"] += wall - ev.children
            r["bytes"] += ev.bytes
            if ev.shapes is not None and ev.shapes not in r["shapes"]:
                r["shapes"].append(ev.shapes)
        return list(rows.values())

    def table(self, sort_by="self_time", row_limit=20):
        """The rows of ``key_averages()`` as a text table, sorted by ``sort_by`` (``self_time``,
        ``wall_time``, ``calls``, ``bytes`` or ``name``), at most ``row_limit`` rows."""
        keys = ("self_time", "wall_time", "calls", "bytes", "name")
        if sort_by not in keys:
            raise EmberValueError(f"[profiler] sort_by must be one of {', '.join(keys)}, got {sort_by!r}")
        rows = sorted(self.key_averages(), key=lambda r: r[sort_by], reverse=sort_by != "name")
        if row_limit is not None:
            rows = rows[:max(0, int(row_limit))]
        total = sum(r["self_time"] for r in self.key_averages()) or 1.0
        head = ["name", "kind", "device", "timing", "calls", "self ms", "self %", "wall ms", "bytes", "shapes"]
        lines = []
        for r in rows:
            name = r["name"] if r["forward_op"] is None else f"{r['name']} (of {r['forward_op']})"
            shapes = "; ".join(str(s) for s in r["shapes"][:3]) + (" ..." if len(r["shapes"]) > 3 else "")
            lines.append([name, r["kind"], r["device"], r["timing"], str(r["calls"]),
                          f"{r['self_time'] * 1e3:.3f}", f"{100 * r['self_time'] / total:.1f}",
                          f"{r['wall_time'] * 1e3:.3f}", str(r["bytes"]), shapes])
        widths = [max(len(h), *(len(x[i]) for x in lines)) if lines else len(h) for i, h in enumerate(head)]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        out = [fmt.format(*head), fmt.format(*("-" * w for w in widths))] + [fmt.format(*x) for x in lines]
        if any(r["timing"] == "host" for r in rows):
            out.append("timing 'host': measured on the host (encoding, and waiting where a result is read); "
                       "the device's own time per command buffer is not measured by this backend")
        return "\n".join(out)

    def export_chrome_trace(self, path):
        """Writes the events in Chrome's trace-event format (JSON), which Perfetto and
        ``chrome://tracing`` open: one complete ("X") event per op, nested by time on its thread."""
        t0 = self._t0 or 0.0
        evs = []
        for ev in sorted(self.events, key=lambda e: (e.start, -(e.end - e.start))):
            args = {"kind": ev.kind, "device": ev.device or "-", "bytes": ev.bytes,
                    "self_us": round((ev.end - ev.start - ev.children) * 1e6, 3)}
            if ev.parent is not None:
                args["forward_op"] = ev.parent
            if ev.shapes is not None:
                args["shapes"] = ev.shapes
            if (ev.device or "").startswith(_ASYNC):
                args["timing"] = "host"
            evs.append({"name": ev.name, "cat": ev.kind, "ph": "X", "pid": 1, "tid": ev.tid % 2**31,
                        "ts": round((ev.start - t0) * 1e6, 3), "dur": round((ev.end - ev.start) * 1e6, 3),
                        "args": args})
        with open(path, "w") as f:
            json.dump({"traceEvents": evs, "displayTimeUnit": "ms"}, f)
