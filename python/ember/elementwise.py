"""Elementwise ops: the unary family (exp, log, ..., affine, powf, clamp), the binary family with
promotion (add, ..., pow, comparisons) and the Python operators that reach them."""
from __future__ import annotations

import math
import numbers

from . import _C
from . import dtypes as _dt
from .activation import act_bwd
from .args import float_arg
from .backprop import _check_versions, is_grad_enabled, record, rule, wanted
from .creation import full
from .errors import EmberValueError
from .grad_rules import _mask
from .multi import maximum as _maximum
from .multi import minimum as _minimum
from .multi import where
from .operands import _operands, _true_div_operands
from .reduce import _sum_to
from .tensor_type import (
    _CMP_CODES,
    _PRUNED,
    BINARY,
    UNARY,
    _big_int,
    _broadcast_shape,
    _contig,
    _is_float_scalar,
    _wrap,
)


def _unary(self, name, p0=0.0, p1=0.0, saved=None):
    shape = self.shape
    s = _C.unary(UNARY[name], self._storage, self._layout, p0, p1)
    out = _wrap(s, _contig(shape), self._dtype, self._device, None, shape)
    if name in _PRUNED:
        return out
    return record(out, name, (self,), saved)

def exp(self): return self._unary("exp")
def log(self): return self._unary("log")
def sin(self): return self._unary("sin")
def cos(self): return self._unary("cos")
def tanh(self): return self._unary("tanh")
def sqrt(self): return self._unary("sqrt")
def sqr(self): return self._unary("sqr")
def _abs(self): return self._unary("abs")
def neg(self): return self._unary("neg")
def recip(self): return self._unary("recip")
def relu(self): return self._unary("relu")
def gelu(self): return self._unary("gelu")
def silu(self): return self._unary("silu")
def erf(self): return self._unary("erf")
def ceil(self): return self._unary("ceil")
def floor(self): return self._unary("floor")
def _round(self): return self._unary("round")
def sign(self): return self._unary("sign")
def sigmoid(self): return self._unary("sigmoid")

def affine(self, mul, add):
    mul, add = float_arg(mul, "affine", "mul"), float_arg(add, "affine", "add")
    shape = self.shape
    s = _C.unary(UNARY["affine"], self._storage, self._layout, mul, add)
    out = _wrap(s, _contig(shape), self._dtype, self._device, None, shape)
    return out if mul == 0.0 else record(out, "affine", (self,), (mul, add))

def powf(self, e):
    e = float_arg(e, "powf", "exponent")
    return self._unary("powf", e, 0.0, e)

def clamp(self, lo=None, hi=None, *, min=None, max=None):  # noqa: A002  (torch's keyword names)
    if min is not None or max is not None:
        if lo is not None or hi is not None:
            raise EmberValueError("[clamp] give the bounds as lo/hi or as min=/max=, not both")
        lo, hi = min, max
    if not self._dtype.is_float and any(_is_float_scalar(b) for b in (lo, hi)):
        # a float bound promotes an integer tensor to float32, as `t + 0.5` does here and clamp does
        # in torch: u8.clamp(0.5, 2.5) is [0.5, ..., 2.5], not a silently truncated bound
        return self.to_dtype(_dt.float32).clamp(lo, hi)
    if self._dtype is _dt.int64 and any(_big_int(b) for b in (lo, hi)):
        # a double cannot hold this bound exactly: compare in int64 (hi wins when lo > hi, as below)
        out = self
        for b, f in ((lo, _maximum), (hi, _minimum)):
            if b is not None:  # past int64 a bound saturates: clamp(hi=2**70) changes nothing
                b = -(2**63) if int(b) < -(2**63) else 2**63 - 1 if int(b) > 2**63 - 1 else int(b)
                out = f(out, full((), b, dtype=_dt.int64, device=self._device))
        return out
    lo = -float("inf") if lo is None else float_arg(lo, "clamp", "lo")
    hi = float("inf") if hi is None else float_arg(hi, "clamp", "hi")
    return self._unary("clamp", lo, hi, (lo, hi))

def _binary(self, other, name, reverse=False):
    a, b = _operands(self, other, name)
    if reverse:
        a, b = b, a
    code = BINARY[name]
    if (name == "floor_divide" or name == "remainder") and not a._dtype.is_float and a._dtype is not _dt.bool \
            and b.numel() \
            and bool(b.eq(0).any().item()):  # as torch: an integer has no value for x // 0 (nor x % 0)
        raise EmberValueError(f"[{name}] integer division by zero")
    s = _C.binary(code, a._storage, a._layout, b._storage, b._layout)
    shape = _broadcast_shape(a.shape, b.shape)
    if code in _CMP_CODES:  # bool masks (the storage says: a device may still give uint8 ones)
        return _wrap(s, _contig(shape), _dt.BY_CODE[s.dtype_code], a._device, None, shape)
    out = _wrap(s, _contig(shape), a._dtype, a._device, None, shape)
    if (a._op is None and b._op is None and not a.is_variable and not b.is_variable) or name in _PRUNED:
        return out  # nothing to record (the common inference case, checked inline for speed)
    return record(out, name, (a, b))

def __add__(self, o): return self._binary(o, "add")
def __radd__(self, o): return self._binary(o, "add", True)
def __sub__(self, o): return self._binary(o, "sub")
def __rsub__(self, o): return self._binary(o, "sub", True)
def __mul__(self, o): return self._binary(o, "mul")
def __rmul__(self, o): return self._binary(o, "mul", True)
def __floordiv__(self, o): return self._binary(o, "floor_divide")
def __rfloordiv__(self, o): return self._binary(o, "floor_divide", True)
def __mod__(self, o): return self._binary(o, "remainder")
def __rmod__(self, o): return self._binary(o, "remainder", True)
def __neg__(self): return self.neg()
def __pos__(self): return self
def __abs__(self): return self.abs()

def __invert__(self): return self.bitwise_not()

def __truediv__(self, o):
    a, o = _true_div_operands(self, o)
    return a._binary(o, "div")

def __rtruediv__(self, o):
    a, o = _true_div_operands(self, o)
    return a._binary(o, "div", True)

def __pow__(self, e):
    if isinstance(e, numbers.Real) and not isinstance(e, bool):
        return self.powf(e)
    return self._binary(e, "pow")

def __rpow__(self, base):
    return self._binary(base, "pow", True)

def add(self, o): return self._binary(o, "add")
def sub(self, o): return self._binary(o, "sub")
def mul(self, o): return self._binary(o, "mul")
def div(self, o): return self / o
def floor_divide(self, o): return self // o  # rounds toward -inf (Python's //); no gradient
def remainder(self, o): return self % o  # the divisor's sign (Python's %)
def maximum(self, o): return self._binary(o, "maximum")
def minimum(self, o): return self._binary(o, "minimum")
def _pow(self, o): return self ** o

def eq(self, o): return self._binary(o, "eq")
def ne(self, o): return self._binary(o, "ne")
def lt(self, o): return self._binary(o, "lt")
def le(self, o): return self._binary(o, "le")
def gt(self, o): return self._binary(o, "gt")
def ge(self, o): return self._binary(o, "ge")
__eq__ = eq  # type: ignore[assignment]
__ne__ = ne  # type: ignore[assignment]
__lt__ = lt
__le__ = le
__gt__ = gt
__ge__ = ge


# ----------------------------------------------------------------------------- backward rules
# ----- unary
@rule("exp", (), out=True)
def _exp_bwd(n, out, g):
    return (g * out,)


@rule("log", (0,))
def _log_bwd(n, out, g):
    return (g / n.inputs[0],)


@rule("sin", (0,))
def _sin_bwd(n, out, g):
    return (g * n.inputs[0].cos(),)


@rule("cos", (0,))
def _cos_bwd(n, out, g):
    return (g * n.inputs[0].sin().neg(),)


@rule("tanh", (), out=True)
def _tanh_bwd(n, out, g):
    return (g * out.sqr().affine(-1.0, 1.0),)


@rule("sqrt", (), out=True)
def _sqrt_bwd(n, out, g):
    return (g / out.affine(2.0, 0.0),)


@rule("sqr", (0,))
def _sqr_bwd(n, out, g):
    return (g * n.inputs[0].affine(2.0, 0.0),)


@rule("abs", (0,))
def _abs_bwd(n, out, g):
    return (g * n.inputs[0].sign(),)  # sign(0) = 0: abs'(0) = 0, like torch


@rule("neg", ())
def _neg_bwd(n, out, g):
    return (g.neg(),)


@rule("recip", (), out=True)
def _recip_bwd(n, out, g):
    return (g * out.sqr().neg(),)


@rule("relu", (0,))
def _relu_bwd(n, out, g):
    return (_mask(n.inputs[0].gt(0.0), g),)  # relu'(0) = 0, like torch


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


@rule("gelu", (0,))
def _gelu_bwd(n, out, g):
    return (act_bwd("gelu", n.inputs[0], out, g),)


@rule("silu", (0,))
def _silu_bwd(n, out, g):
    return (act_bwd("silu", n.inputs[0], out, g),)


@rule("erf", (0,))
def _erf_bwd(n, out, g):
    return (g * n.inputs[0].sqr().affine(-1.0, 0.0).exp().affine(_TWO_OVER_SQRT_PI, 0.0),)


@rule("sigmoid", (), out=True)
def _sigmoid_bwd(n, out, g):
    if is_grad_enabled():  # the composite reads x, which the ordinary (kernel) backward does not
        _check_versions(n, out, ((0,), False))
    return (act_bwd("sigmoid", n.inputs[0], out, g),)


@rule("affine", ())
def _affine_bwd(n, out, g):
    return (g.affine(n.saved[0], 0.0),)


@rule("powf", (0,))
def _powf_bwd(n, out, g):
    e = n.saved
    if e == 0.0:
        return (g.affine(0.0, 0.0),)
    if e == 1.0:
        return (g,)
    return (g * n.inputs[0].powf(e - 1.0).affine(e, 0.0),)


@rule("clamp", (0,))
def _clamp_bwd(n, out, g):
    lo, hi = n.saved
    x = n.inputs[0]
    return (_mask(x.ge(lo) * x.le(hi), g),)  # inclusive bounds pass the gradient, like torch


@rule("log1p", (0,))
def _log1p_bwd(n, out, g):
    return (g / n.inputs[0].affine(1.0, 1.0),)


@rule("expm1", (), out=True)
def _expm1_bwd(n, out, g):
    return (g * out.affine(1.0, 1.0),)


@rule("rsqrt", (), out=True)
def _rsqrt_bwd(n, out, g):
    return (g * (out * out.sqr()).affine(-0.5, 0.0),)  # d/dx x^(-1/2) = -x^(-3/2) / 2


@rule("log2", (0,))
def _log2_bwd(n, out, g):
    return (g / n.inputs[0].affine(math.log(2.0), 0.0),)


@rule("log10", (0,))
def _log10_bwd(n, out, g):
    return (g / n.inputs[0].affine(math.log(10.0), 0.0),)


@rule("tan", (), out=True)
def _tan_bwd(n, out, g):
    return (g * out.sqr().affine(1.0, 1.0),)


@rule("sinh", (0,))
def _sinh_bwd(n, out, g):
    return (g * n.inputs[0].cosh(),)


@rule("cosh", (0,))
def _cosh_bwd(n, out, g):
    return (g * n.inputs[0].sinh(),)


@rule("asin", (0,))
def _asin_bwd(n, out, g):
    return (g * n.inputs[0].sqr().affine(-1.0, 1.0).rsqrt(),)


@rule("acos", (0,))
def _acos_bwd(n, out, g):
    return (g * n.inputs[0].sqr().affine(-1.0, 1.0).rsqrt().neg(),)


@rule("atan", (0,))
def _atan_bwd(n, out, g):
    return (g / n.inputs[0].sqr().affine(1.0, 1.0),)


# ----- binary (numpy broadcasting)
@rule("add", ())
def _add_bwd(n, out, g):
    a, b = n.inputs
    return (_sum_to(g, a.shape) if wanted(a) else None, _sum_to(g, b.shape) if wanted(b) else None)


@rule("sub", ())
def _sub_bwd(n, out, g):
    a, b = n.inputs
    return (_sum_to(g, a.shape) if wanted(a) else None, _sum_to(g.neg(), b.shape) if wanted(b) else None)


@rule("mul", (0, 1))
def _mul_bwd(n, out, g):
    a, b = n.inputs
    return (_sum_to(g * b, a.shape) if wanted(a) else None, _sum_to(g * a, b.shape) if wanted(b) else None)


@rule("div", (0, 1))
def _div_bwd(n, out, g):
    a, b = n.inputs
    ga = _sum_to(g / b, a.shape) if wanted(a) else None
    gb = _sum_to((g * a / b.sqr()).neg(), b.shape) if wanted(b) else None
    return ga, gb


@rule("remainder", (0, 1))
def _remainder_bwd(n, out, g):
    # a % b = a - b * floor(a / b): d/da = 1, d/db = -floor(a / b) (floor's own gradient is zero)
    a, b = n.inputs
    ga = _sum_to(g, a.shape) if wanted(a) else None
    gb = _sum_to(g * (a // b).neg(), b.shape) if wanted(b) else None
    return ga, gb


def _minmax_weights(a, b, first_wins):
    """Weight of a's side: 1 where a wins, 0.5 on ties (the gradient is shared evenly), else 0."""
    win = a.gt(b) if first_wins else a.lt(b)
    dt = a._dtype
    return win.to_dtype(dt) + a.eq(b).to_dtype(dt).affine(0.5, 0.0)


def _minmax(n, g, first_wins):
    a, b = n.inputs
    ga = g * _minmax_weights(a, b, first_wins)
    gb = g - ga
    return (_sum_to(ga, a.shape) if wanted(a) else None, _sum_to(gb, b.shape) if wanted(b) else None)


@rule("maximum", (0, 1))
def _maximum_bwd(n, out, g):
    return _minmax(n, g, True)


@rule("minimum", (0, 1))
def _minimum_bwd(n, out, g):
    return _minmax(n, g, False)


@rule("pow", (0, 1), out=True)
def _pow_bwd(n, out, g):
    a, b = n.inputs
    ga = gb = None
    if wanted(a):  # b * a^(b-1), zero where b == 0 (torch's convention)
        ga = _sum_to(where(b.eq(0.0), 0.0, g * b * (a ** (b - 1.0))), a.shape)
    if wanted(b):  # a^b * log(a), zero where a == 0 and b >= 0 (torch's convention)
        gb = _sum_to(where(a.eq(0.0) * b.ge(0.0), 0.0, g * out * a.log()), b.shape)
    return ga, gb


METHODS = {  # bound onto Tensor by tensor_methods.py
    "_unary": _unary, "exp": exp, "log": log, "sin": sin, "cos": cos, "tanh": tanh, "sqrt": sqrt, "sqr": sqr,
    "abs": _abs, "neg": neg, "recip": recip, "relu": relu, "gelu": gelu, "silu": silu, "erf": erf, "ceil": ceil,
    "floor": floor, "round": _round, "sign": sign, "sigmoid": sigmoid, "affine": affine, "powf": powf,
    "clamp": clamp, "_binary": _binary, "__add__": __add__, "__radd__": __radd__, "__sub__": __sub__,
    "__rsub__": __rsub__, "__mul__": __mul__, "__rmul__": __rmul__, "__floordiv__": __floordiv__,
    "__rfloordiv__": __rfloordiv__, "__mod__": __mod__, "__rmod__": __rmod__, "__neg__": __neg__,
    "__pos__": __pos__, "__abs__": __abs__, "__invert__": __invert__, "__truediv__": __truediv__,
    "__rtruediv__": __rtruediv__, "__pow__": __pow__, "__rpow__": __rpow__, "add": add, "sub": sub, "mul": mul,
    "div": div, "floor_divide": floor_divide, "remainder": remainder, "maximum": maximum, "minimum": minimum,
    "pow": _pow, "eq": eq, "ne": ne, "lt": lt, "le": le, "gt": gt, "ge": ge, "__eq__": __eq__, "__ne__": __ne__,
    "__lt__": __lt__, "__le__": __le__, "__gt__": __gt__, "__ge__": __ge__,
}
