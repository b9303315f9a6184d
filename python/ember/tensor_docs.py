"""Docstrings of the Tensor and Var methods, kept apart from the op modules (as torch's _tensor_docs.py
does) because most of those methods are one-line wrappers generated from the op tables.

``apply()`` attaches each text to the method that has none of its own; a method documented in
place keeps its own text, and tests/test_docstrings.py fails on an entry that no method uses.
"""
from __future__ import annotations

_VIEW = "The result is a view: it shares the storage, so writes through either are seen by both."
_ELEMENTWISE_RETURNS = """Returns:
            Tensor: a new tensor of the same shape and dtype."""


def _unary(what, grad="Differentiable.", dtypes="float dtypes; integer tensors give the same dtype"):
    return f"""{what}

        Elementwise; works on {dtypes}. {grad}

        {_ELEMENTWISE_RETURNS}"""


def _binary(what, extra="Differentiable with respect to both operands."):
    return f"""{what}

        Args:
            o: a Tensor, a Python scalar or a numpy array; broadcast against ``self`` with numpy's
                rules.

        {extra}

        Returns:
            Tensor: the broadcast result.

        Raises:
            ShapeError: the shapes do not broadcast.
            DTypeError: the dtypes cannot be combined."""


def _compare(sym):
    return f"""Elementwise ``self {sym} o``, as a bool mask (torch's dtype for comparisons).

        Args:
            o: a Tensor, a Python scalar or a numpy array; broadcast against ``self``.

        Returns:
            Tensor: bool, the broadcast shape. Not differentiable.

        Raises:
            ShapeError: the shapes do not broadcast."""


def _reduction(what, returns, grad="Differentiable; tied extremes share the gradient evenly."):
    return f"""{what}

        Args:
            dim: an int, a tuple of ints (negative counts from the end), or None for every dim.
            keepdim: keep the reduced dims with size 1.

        {grad}

        Returns:
            Tensor: {returns}

        Raises:
            IndexOutOfRange: a dim is out of range."""


DOCS = {
    # ------------------------------------------------------------------ attributes
    "shape": "The size of each dim, a tuple of ints.",
    "ndim": "The number of dims (0 for a scalar).",
    "dtype": "The element type, an ``em.DType``.",
    "device": "The device holding the data, an ``em.Device``.",
    "layout": "The ``em.Layout`` (shape, strides in elements, start offset) through which the storage is read.",
    "id": "A unique int identifying this tensor (the gradient store's key).",
    "op": "The recorded op that produced this tensor, or None for a leaf or an unrecorded result.",
    "storage": "The ``Storage`` (for example a ``CpuStorage``) holding the bytes; views share it.",
    "T": """All dims reversed (``permute(ndim-1, ..., 0)``). """ + _VIEW,
    "numel": """The number of elements, the product of the shape.

        Returns:
            int: 1 for a 0-d tensor.""",
    "dims": "The shape, as a tuple of ints (candle's name for ``shape``).",
    "size": """The shape, or the size of one dim.

        Args:
            dim: None for the whole shape, else the dim (negative counts from the end).

        Returns:
            tuple | int: the shape, or ``shape[dim]``.

        Raises:
            IndexOutOfRange: ``dim`` is out of range.""",
    # ------------------------------------------------------------------ conversions
    "tolist": """The values as (nested) Python lists of ints or floats; a 0-d tensor gives a scalar.""",
    "item": """The value of a one-element tensor as a Python int or float.

        Raises:
            ShapeError: the tensor has more than one element.""",
    "to_dtype": """A copy converted to another dtype (the tensor itself when it already has it).

        Float to float rounds to nearest even; float to int truncates toward zero; int to narrower
        int wraps, as numpy does. Differentiable from float dtypes (the gradient is cast back).

        Args:
            dtype: an ``em.DType``, its name (``"float16"``) or a numpy dtype.

        Returns:
            Tensor: the converted tensor.

        Raises:
            DTypeError: the dtype is unknown.""",
    "to_device": """The tensor on another device (the tensor itself when it is there already), else a
        dense copy there; differentiable. Reading a Metal tensor's values waits for its pending kernels.

        Args:
            device: an ``em.Device`` or a string such as ``"cpu"`` or ``"metal:0"``.

        Returns:
            Tensor: the tensor on ``device``.

        Raises:
            DeviceError: the device is not available (no Metal backend: set ``EMBER_METAL=emulate``
                for the emulator).
            DTypeError: the device lacks the dtype (float64 on Metal).""",
    "contiguous": """The tensor itself when its layout is dense row-major, else a dense copy.

        Returns:
            Tensor: a contiguous tensor with the same values; differentiable.""",
    # ------------------------------------------------------------------ views
    "transpose": """Swaps two dims. """ + _VIEW + """

        Args:
            d0: the first dim (negative counts from the end).
            d1: the second dim.

        Raises:
            IndexOutOfRange: a dim is out of range.""",
    "t": """Swaps the last two dims. """ + _VIEW + """

        Raises:
            ShapeError: the tensor has fewer than 2 dims.""",
    "permute": """Reorders the dims: dim ``i`` of the result is dim ``dims[i]`` of ``self``. """ + _VIEW + """

        Args:
            dims: a permutation of ``range(ndim)``, as separate ints or one tuple.

        Raises:
            ShapeError: ``dims`` is not a permutation of the dims.""",
    "narrow": """The slice ``[start, start + length)`` along ``dim``. """ + _VIEW + """

        Args:
            dim: the dim to narrow.
            start: the first index kept.
            length: how many indices are kept.

        Raises:
            IndexOutOfRange: the range does not lie inside the dim.""",
    "squeeze": """Removes size-1 dims. """ + _VIEW + """

        Args:
            dim: None to remove every size-1 dim, else the one dim to remove.

        Raises:
            ShapeError: ``dim`` does not have size 1.""",
    "unsqueeze": """Inserts a size-1 dim at position ``dim``. """ + _VIEW + """

        Args:
            dim: where the new dim goes, in ``[-ndim-1, ndim]``.""",
    "broadcast_as": """A stride-0 view with the given shape, as numpy's ``broadcast_to``.

        Args:
            shape: the target shape, as separate ints or one tuple; the tensor's shape must broadcast
                to it.

        Raises:
            ShapeError: the shape does not broadcast to ``shape``.""",
    "broadcast_left": """Broadcasts to ``shape + self.shape``: new leading dims of the given sizes.

        Args:
            shape: the sizes of the new leading dims.""",
    "reshape": """The same values in a new shape: a view when the layout allows it, else a copy.

        Args:
            shape: the new shape, as separate ints or one tuple; one entry may be -1 (inferred).

        Returns:
            Tensor: differentiable.

        Raises:
            ShapeError: the element counts differ.""",
    "flatten": """Merges the dims ``start_dim..end_dim`` (inclusive) into one.

        Args:
            start_dim: the first dim merged.
            end_dim: the last dim merged.

        Returns:
            Tensor: a view when the layout allows it, else a copy; a 0-d tensor gives shape (1,).""",
    "flatten_all": "All dims merged into one: ``reshape(-1)``.",
    "__getitem__": """Indexing as in numpy and torch.

        Ints, slices (step >= 1), ``None`` and ``...`` give a view. Integer arrays or tensors (any
        shape, broadcast together) and 0/1 masks give a copy; reads are differentiable.

        Args:
            idx: an index, or a tuple of them.

        Raises:
            IndexOutOfRange: an index is out of range for its dim.""",
    "__setitem__": """Writes ``value`` at ``idx`` in place, into the shared storage (every view sees it).

        Basic indices, masks (``x[x < 0] = 0``) and integer arrays are accepted; ``value`` (a Tensor, a
        scalar or an array) broadcasts to what ``idx`` selects.

        Args:
            idx: an index, or a tuple of them.
            value: the values to write.

        Raises:
            InplaceModifiedError: the tensor tracks gradients (write under ``no_grad`` or use
                ``em.where``).""",
    # ------------------------------------------------------------------ elementwise unary
    "exp": _unary("e raised to each element, ``exp(x)``."),
    "log": _unary("The natural logarithm, ``log(x)`` (``-inf`` at 0, NaN below)."),
    "sin": _unary("The sine, in radians."),
    "cos": _unary("The cosine, in radians."),
    "tanh": _unary("The hyperbolic tangent."),
    "sqrt": _unary("The square root (NaN for negative values)."),
    "sqr": _unary("The square, ``x * x``."),
    "abs": _unary("The absolute value.", dtypes="every dtype"),
    "neg": _unary("The negation, ``-x``.", dtypes="every dtype (unsigned ints wrap)"),
    "recip": _unary("The reciprocal, ``1 / x``."),
    "relu": _unary("``max(x, 0)``.", grad="Differentiable (gradient 0 at x <= 0).", dtypes="every dtype"),
    "gelu": _unary("The Gaussian error linear unit, ``x * Phi(x)`` (the exact, erf form)."),
    "silu": _unary("The sigmoid linear unit, ``x * sigmoid(x)``."),
    "erf": _unary("The error function."),
    "ceil": _unary("Rounds up to an integer value.", grad="Its gradient is zero, so it is never recorded."),
    "floor": _unary("Rounds down to an integer value.", grad="Its gradient is zero, so it is never recorded."),
    "round": _unary("Rounds to the nearest integer value, ties to even.",
                    grad="Its gradient is zero, so it is never recorded."),
    "sign": _unary("-1, 0 or 1 by the sign of each element.", grad="Its gradient is zero, so it is never recorded.",
                   dtypes="every dtype"),
    "sigmoid": _unary("The logistic function, ``1 / (1 + exp(-x))``."),
    "affine": """``x * mul + add`` in one pass (candle's ``affine``).

        Args:
            mul: the factor, a Python number.
            add: the offset, a Python number.

        Returns:
            Tensor: same shape and dtype. With ``mul == 0`` the result does not depend on ``x`` and
            is not recorded.""",
    "powf": """Each element raised to a constant power, ``x ** e``.

        Args:
            e: the exponent, a Python number (2 and 0.5 compute ``x * x`` and ``sqrt``).

        Returns:
            Tensor: same shape and dtype; differentiable.""",
    "clamp": """Limits every element to ``[lo, hi]`` (torch's ``min=`` / ``max=`` keywords work too).

        Args:
            lo: the lower bound, or None for none.
            hi: the upper bound, or None for none. Where ``lo > hi`` the result is ``hi``, as in torch.
            min: torch's name for ``lo`` (keyword only; not together with ``lo``/``hi``).
            max: torch's name for ``hi``.

        Returns:
            Tensor: same shape; a float bound makes an integer tensor float32. Differentiable (gradient
            1 inside the bounds, 0 outside).""",
    # ------------------------------------------------------------------ elementwise binary
    "add": _binary("Elementwise ``self + o``."),
    "sub": _binary("Elementwise ``self - o``."),
    "mul": _binary("Elementwise ``self * o``."),
    "div": _binary("Elementwise true division ``self / o`` (integers divide as float32)."),
    "floor_divide": _binary("Elementwise ``self // o``, rounding toward -inf as Python does.",
                            "Not differentiable (its gradient is zero)."),
    "remainder": _binary("Elementwise ``self % o``, with the sign of the divisor as Python's ``%``."),
    "maximum": _binary("The elementwise larger of ``self`` and ``o`` (NaN if either is NaN).",
                       "Differentiable; where both are equal the gradient is shared evenly."),
    "minimum": _binary("The elementwise smaller of ``self`` and ``o`` (NaN if either is NaN).",
                       "Differentiable; where both are equal the gradient is shared evenly."),
    "pow": _binary("Elementwise ``self ** o``."),
    "eq": _compare("=="),
    "ne": _compare("!="),
    "lt": _compare("<"),
    "le": _compare("<="),
    "gt": _compare(">"),
    "ge": _compare(">="),
    # ------------------------------------------------------------------ reductions
    "sum": _reduction("The sum over ``dim``.", "the sums; integer tensors sum into int64, as in torch.",
                      grad="Differentiable."),
    "max": _reduction("The largest value over ``dim`` (values only; ``argmax`` gives the indices).",
                      "the maxima, in the tensor's dtype; NaN where a NaN is reduced."),
    "min": _reduction("The smallest value over ``dim`` (values only; ``argmin`` gives the indices).",
                      "the minima, in the tensor's dtype; NaN where a NaN is reduced."),
    "argmax": _reduction("The index of the largest value over ``dim`` (the first one on ties).", "int64 indices.",
                         grad="Not differentiable."),
    "argmin": _reduction("The index of the smallest value over ``dim`` (the first one on ties).", "int64 indices.",
                         grad="Not differentiable."),
    "mean": _reduction("The mean over ``dim`` (float dtypes only).", "the means.", grad="Differentiable."),
    "logsumexp": _reduction("``log(sum(exp(x)))`` over ``dim``, computed stably (the max is subtracted first).",
                            "the results; rows of -inf give -inf.", grad="Differentiable."),
    "squeeze_dims": """Removes several size-1 dims at once.

        Args:
            dims: the dims to remove (non-negative ints).""",
    # ------------------------------------------------------------------ linear algebra, indexing
    "matmul": """The matrix product ``self @ other``, as numpy's ``matmul``.

        1-D operands are treated as a row / column vector; leading (batch) dims broadcast.

        Args:
            other: a Tensor (or a list / numpy array, converted to this tensor's dtype).

        Returns:
            Tensor: differentiable with respect to both operands.

        Raises:
            ShapeError: the inner dims differ or the batch dims do not broadcast.
            DTypeError: the dtypes differ or are not float.""",
    "index_select": """The slices at ``indices`` along ``dim`` (an embedding lookup).

        Takes ember's order ``index_select(indices, dim)`` or torch's ``index_select(dim, index)``,
        told apart by the argument types (torch's starts with the int dim); keywords too.

        Args:
            *args: ``(indices, dim)`` or ``(dim, index)``: 1-D integer indices (a Tensor, list or
                array) and the dim they select along.
            **kwargs: the same by name (``indices`` or ``index``, ``dim``).

        Returns:
            Tensor: ``shape[dim]`` replaced by ``len(indices)``; differentiable with respect to ``self``.

        Raises:
            IndexOutOfRange: an index is out of range.
            EmberTypeError: arguments that fit neither order (the message shows both).""",
    "gather": """Picks ``self[..., indices[i, j, ...], ...]`` along ``dim``, as torch's ``gather``.

        Takes ember's order ``gather(indices, dim)`` or torch's ``gather(dim, index)``, told apart by
        the argument types (torch's starts with the int dim); keywords too.

        Args:
            *args: ``(indices, dim)`` or ``(dim, index)``: integer indices with the same number of dims
                as ``self``, and the dim they pick along.
            **kwargs: the same by name (``indices`` or ``index``, ``dim``).

        Returns:
            Tensor: the shape of ``indices``; differentiable with respect to ``self``.

        Raises:
            IndexOutOfRange: an index is out of range.
            EmberTypeError: arguments that fit neither order (the message shows both).""",
    # ------------------------------------------------------------------ in place
    "zero_set": """Sets every element the layout reaches to zero, in place (every view sees it).

        Raises:
            InplaceModifiedError: only later, when ``backward`` needs a value this overwrote.""",
    "fill_": """Sets every element the layout reaches to ``value``, in place.

        Args:
            value: the value, a Python number.

        Returns:
            Tensor: ``self``.""",
    "backward": """Computes the gradients of this tensor with respect to every variable it depends on.

        The root need not be a scalar: it is seeded with ones. Calling it twice gives two equal,
        independent stores.

        Args:
            create_graph: keep the graph of the gradients, so a second ``backward`` through them gives
                second-order derivatives.

        Returns:
            GradStore: ``grads[v]`` is the gradient of each variable ``v``.

        Raises:
            BackwardNotSupported: an op on the path to a variable has no backward rule.
            InplaceModifiedError: a tensor the graph saved was modified in place after it was saved.""",
    # ------------------------------------------------------------------ Var
    "Var.as_tensor": "The variable itself (a Var is a Tensor), for candle's API.",
    "Var.as_detached_tensor": "A tensor sharing the variable's storage, with no gradient tracking.",
}


def apply(tensor_cls, var_cls):
    """Attaches each docstring to the method or property of that name that has none of its own."""
    for key, doc in DOCS.items():
        cls, name = (var_cls, key[4:]) if key.startswith("Var.") else (tensor_cls, key)
        attr = cls.__dict__.get(name)
        if attr is None:
            continue
        if isinstance(attr, property):
            if not attr.__doc__:
                setattr(cls, name, property(attr.fget, attr.fset, attr.fdel, doc))
        elif not getattr(attr, "__doc__", None):
            attr.__doc__ = doc


def unused_entries(tensor_cls, var_cls):
    """Entries that document no method: renamed, removed, or documented in place (for the tests)."""
    out = []
    for key, doc in DOCS.items():
        cls, name = (var_cls, key[4:]) if key.startswith("Var.") else (tensor_cls, key)
        attr = cls.__dict__.get(name)
        if attr is None or (getattr(attr, "__doc__", None) or "") != doc:
            out.append(key)
    return out
