"""em.cpu.Kernel: C++ CPU kernels written from Python, compiled at first use with the system compiler and cached on disk."""
from __future__ import annotations

import numbers
import os
import threading

import numpy as np

from . import _C
from . import dtype_core as _dt
from .errors import DTypeError, EmberTypeError, EmberValueError
from .tensor_type import Tensor

__all__ = ["Kernel"]

_ABI = "ember-cpu-kernel-1"  # the layout of the structs below; part of every cache key

# What every kernel sees before the user's source: the argument structs and helpers, header-only.
PRELUDE = r"""
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <type_traits>
namespace ember {
enum DType : int32_t { kFloat32 = %(f32)d, kFloat16 = %(f16)d, kBFloat16 = %(bf16)d, kFloat64 = %(f64)d,
                       kUInt8 = %(u8)d, kUInt32 = %(u32)d, kInt64 = %(i64)d };
// One input or output: its data, and the layout that says how to read it (any strides and offset).
struct Tensor {
  void* data; int64_t ndim; const int64_t* shape; const int64_t* strides; int64_t offset; int64_t numel;
  int32_t dtype; int32_t itemsize;
  // The storage offset of element i in row-major order (through the strides).
  int64_t index(int64_t i) const {
    int64_t at = offset;
    for (int64_t d = ndim - 1; d >= 0; --d) { at += (i %% shape[d]) * strides[d]; i /= shape[d]; }
    return at;
  }
  template <class T> T& at(int64_t i) const { return static_cast<T*>(data)[index(i)]; }
  template <class T> T* ptr() const { return static_cast<T*>(data) + offset; }  // the first element
  bool contiguous() const {
    int64_t want = 1;
    for (int64_t d = ndim - 1; d >= 0; --d) { if (shape[d] != 1 && strides[d] != want) return false; want *= shape[d]; }
    return true;
  }
};
struct Scalar { int32_t is_float; int64_t i; double f; };
using Task = void (*)(void*, int64_t, int64_t);
struct Args {
  int32_t n_inputs, n_outputs, n_scalars;
  const Tensor* inputs_; const Tensor* outputs_; const Scalar* scalars_;
  void (*pool_for_)(int64_t, int64_t, Task, void*);
  const Tensor& input(int i) const { return inputs_[i]; }
  const Tensor& output(int i) const { return outputs_[i]; }
  double f(int k) const { return scalars_[k].is_float ? scalars_[k].f : (double)scalars_[k].i; }
  int64_t i(int k) const { return scalars_[k].is_float ? (int64_t)scalars_[k].f : scalars_[k].i; }
  // Runs fn(begin, end) over [0, n) on ember's thread pool, in chunks of at least `grain`.
  template <class F> void parallel_for(int64_t n, int64_t grain, F&& fn) const {
    struct Ctx { std::remove_reference_t<F>* fn; std::exception_ptr err; } ctx{&fn, nullptr};
    pool_for_(n, grain, [](void* c, int64_t b, int64_t e) {
      auto* x = static_cast<Ctx*>(c);
      try { (*x->fn)(b, e); } catch (...) { if (!x->err) x->err = std::current_exception(); }
    }, &ctx);
    if (ctx.err) std::rethrow_exception(ctx.err);
  }
};
[[noreturn]] inline void fail(const std::string& msg) { throw std::runtime_error(msg); }
}  // namespace ember
"""

_ENTRY = r"""
#line 1 "<em.cpu.Kernel entry>"
extern "C" __attribute__((visibility("default"))) int %(entry)s(const ember::Args* a, char* err, size_t n) {
  try { %(name)s(*a); return 0; }
  catch (const std::exception& e) { std::strncpy(err, e.what(), n); return 1; }
  catch (...) { return 2; }
}
"""

_SCALAR_KINDS = ("int", "float")


def _prelude():
    codes = {k: _dt.to_dtype(n).code for k, n in (("f32", "float32"), ("f16", "float16"), ("bf16", "bfloat16"),
                                                   ("f64", "float64"), ("u8", "uint8"), ("u32", "uint32"),
                                                   ("i64", "int64"))}
    return PRELUDE % codes


def _dtypes(spec, what):
    """A declared list of input/output dtypes: an int (that many, any dtype) or a sequence of dtype names /
    em.DTypes / None (any)."""
    if isinstance(spec, numbers.Integral) and not isinstance(spec, bool):
        if spec < 0:
            raise EmberValueError(f"[cpu.Kernel] {what} must be a count >= 0 or a list of dtypes, got {spec}")
        return [None] * int(spec)
    try:
        items = list(spec)
    except TypeError:
        raise EmberTypeError(f"[cpu.Kernel] {what} must be a count or a list of dtypes, got "
                             f"{type(spec).__name__}") from None
    return [None if d is None else _dt.to_dtype(d) for d in items]


class Kernel:
    """A CPU kernel written in C++, callable from Python on CPU storages: the counterpart of
    ``em.metal.Kernel`` and of torch's ``load_inline``, without a build system.

    The source defines ``void <name>(const ember::Args& a)``. ``a.input(i)`` / ``a.output(i)`` are
    ``ember::Tensor``s: ``data``, ``ndim``, ``shape``, ``strides``, ``offset`` (in elements), ``numel``,
    ``dtype``; ``t.at<float>(i)`` reads element ``i`` in row-major order through the strides and
    ``t.ptr<float>()`` is the first element (for contiguous data, ``t.contiguous()``). ``a.f(i)`` /
    ``a.i(i)`` read scalar ``i``. ``a.parallel_for(n, grain, [&](int64_t b, int64_t e) {...})`` runs on
    ember's thread pool (the threads ember's own kernels use). ``ember::fail("message")`` (or any C++
    exception) raises an ``EmberError`` naming the kernel.

    Nothing is compiled when the object is made. The first call compiles the source with the system
    compiler (``$CXX``, else ``c++``; ``-std=c++17 -O3`` plus ``options["flags"]``) and stores the
    shared object in ember's kernel cache, a directory only the user can write (``~/.cache/ember/cpu-kernel``,
    or ``$EMBER_CPU_KERNEL_CACHE``), keyed by the source, name, options and compiler; a later process
    loads it from there after verifying it. A compile error raises an ``EmberError`` carrying the
    compiler's log, its line numbers those of ``source``; without a compiler the error names the
    package to install.

    The signature is declared, and every call is checked against it before the kernel runs: the
    number of inputs, outputs and scalars, each storage's kind and dtype, and each layout against its
    storage's size. A wrong call raises; it cannot crash the process.

    Args:
        source: C++ source defining ``void name(const ember::Args&)``.
        name: the function to call.
        inputs: the inputs' dtypes (names, ``em.DType`` s, or None for any), or their number.
        outputs: the outputs' dtypes, or their number.
        scalars: the scalars' kinds, each "int" or "float".
        options: None or a dict; ``{"flags": ["-march=native", ...]}`` adds compiler flags (part of the key).
    """

    def __init__(self, source, name, inputs=1, outputs=1, scalars=(), options=None):
        if not isinstance(source, str) or not isinstance(name, str):
            raise EmberTypeError("[cpu.Kernel] source and name must be strings")
        if not name.isidentifier():
            raise EmberValueError(f"[cpu.Kernel] name must be a C++ identifier, got {name!r}")
        self.source, self.name = source, name
        self.inputs, self.outputs = _dtypes(inputs, "inputs"), _dtypes(outputs, "outputs")
        self.scalars = list(scalars)
        for s in self.scalars:
            if s not in _SCALAR_KINDS:
                raise EmberValueError(f"[cpu.Kernel] scalar kinds are 'int' or 'float', got {s!r}")
        options = dict(options or {})
        flags = options.pop("flags", [])
        if options:
            raise EmberValueError(f"[cpu.Kernel] unknown options {sorted(options)} (known: flags)")
        if isinstance(flags, str) or not all(isinstance(f, str) for f in flags):
            raise EmberTypeError("[cpu.Kernel] options['flags'] must be a list of strings")
        self.flags = ["-std=c++17", "-O3", *flags]
        self._fn = None
        self.cache_source = None  # after the first call: "built", "disk" or "memory"
        self._lock = threading.Lock()

    def __repr__(self):
        return f"<em.cpu.Kernel {self.name}>"

    def _load(self):
        with self._lock:
            if self._fn is None:
                entry = f"ember_entry_{self.name}"
                code = _prelude() + '#line 1 "kernel.cpp"\n' + self.source + "\n" + _ENTRY % {
                    "entry": entry, "name": self.name}
                fn, src = _C._cpu_kernel_load(code, entry, self.flags, os.environ.get("CXX", ""), _ABI)
                self._fn, self.cache_source = fn, src
        return self._fn

    def compile(self):
        """Compiles (or loads from the cache) now rather than at the first call; returns self."""
        self._load()
        return self

    def _pairs(self, args, want, what):
        if not isinstance(args, (list, tuple)):
            raise EmberTypeError(f"[{self.name}] {what} must be a list, got {type(args).__name__}")
        if len(args) != len(want):
            raise EmberValueError(f"[{self.name}] takes {len(want)} {what}, got {len(args)}")
        out = []
        for i, (a, dt) in enumerate(zip(args, want)):
            s, l = _storage_layout(self.name, a, what, i)
            if dt is not None and s.dtype_code != dt.code:
                raise DTypeError(f"[{self.name}] {what}[{i}] is {_dt.BY_CODE[s.dtype_code].name}, the kernel "
                                 f"declares {dt.name}")
            out.append((s, l))
        return out

    def __call__(self, inputs=(), outputs=(), scalars=()):
        """Runs the kernel (compiling it at the first call).

        Args:
            inputs: one per declared input: a ``CpuStorage`` (read whole, flat), a ``(storage, layout)``
                pair (as a ``cpu_fwd`` receives them), or a Tensor.
            outputs: likewise; written by the kernel (their version counters are bumped).
            scalars: Python or numpy numbers, one per declared scalar.

        Raises:
            EmberValueError / DTypeError / EmberTypeError / DeviceError: the call does not match the
                declared signature (nothing runs), a layout reaches past its storage, the kernel
                raised, or the source does not compile (with the compiler's log).
        """
        ins = self._pairs(inputs, self.inputs, "inputs")
        outs = self._pairs(outputs, self.outputs, "outputs")
        if not isinstance(scalars, (list, tuple)):
            raise EmberTypeError(f"[{self.name}] scalars must be a list, got {type(scalars).__name__}")
        if len(scalars) != len(self.scalars):
            raise EmberValueError(f"[{self.name}] takes {len(self.scalars)} scalars, got {len(scalars)}")
        sc = []
        for i, (v, kind) in enumerate(zip(scalars, self.scalars)):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Real, np.number)):
                raise EmberTypeError(f"[{self.name}] scalars[{i}] must be a number, got {type(v).__name__}")
            if kind == "int":
                if not isinstance(v, (numbers.Integral, np.integer)):
                    raise EmberTypeError(f"[{self.name}] scalars[{i}] is declared int, got {v!r}")
                if not -2**63 <= int(v) < 2**63:
                    raise EmberValueError(f"[{self.name}] scalars[{i}] = {v} does not fit an int64")
                sc.append((False, int(v), 0.0))
            else:
                sc.append((True, 0, float(v)))
        fn = self._load()
        _C._cpu_kernel_call(fn, ins, outs, sc, self.name)


def _storage_layout(name, a, what, i):
    if isinstance(a, Tensor):
        return a._storage, a._layout
    if isinstance(a, tuple) and len(a) == 2 and isinstance(a[1], _C.Layout):
        s, l = a
    else:
        s, l = a, None
    if not isinstance(s, _C.Storage):
        raise EmberTypeError(f"[{name}] {what}[{i}] must be a CpuStorage, a (storage, layout) pair or a Tensor, got "
                             f"{type(s).__name__}")
    if type(s) is not _C.CpuStorage:
        raise EmberTypeError(f"[{name}] {what}[{i}] is a {type(s).__name__}; em.cpu.Kernel runs on CPU storages")
    return s, (l if l is not None else _C.Layout([s.numel], [1], 0))
