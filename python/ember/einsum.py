"""em.einsum: Einstein summation as diagonals, sums, permutes and one batched matmul per operand pair."""
from __future__ import annotations

import math

from .creation import tensor
from .errors import EmberTypeError, EmberValueError, ShapeError
from .promotion import result_type
from .tensor_type import Tensor

__all__ = ["einsum"]


def _parse_term(term, op_ndim, which):
    """One input's (or the output's) labels: letters, with "..." once (returned as None there)."""
    if term.count("...") > 1:
        raise EmberValueError(f"[einsum] {which} has more than one ellipsis")
    labels = []
    rest = term.replace("...", ".")
    for c in rest:
        if c == ".":
            labels.append(None)
        elif c.isascii() and c.isalpha():
            labels.append(c)
        else:
            raise EmberValueError(f"[einsum] invalid subscript {c!r} in {which}: use letters a-z, A-Z and '...'")
    if op_ndim is not None:
        named = len(labels) - (None in labels)
        if (None in labels and named > op_ndim) or (None not in labels and named != op_ndim):
            raise ShapeError(f"[einsum] {which} has {named} subscripts for an operand with {op_ndim} dims")
    return labels


def _expand(labels, n_ell, width):
    """labels with the ellipsis replaced by its dims' labels (ints: the last ``n_ell`` of ``width``)."""
    if None not in labels:
        return list(labels)
    i = labels.index(None)
    return labels[:i] + list(range(width - n_ell, width)) + labels[i + 1:]


def _diagonal(t, labels):
    """Takes the diagonal over repeated labels of one operand (``ii`` -> ``i``), through index_select."""
    while len(set(labels)) != len(labels):
        seen = {}
        for a, lab in enumerate(labels):
            if lab in seen:
                b = a
                a = seen[lab]
                break
            seen[lab] = a
        n, m = t.shape[a], t.shape[b]
        if n != m:
            raise ShapeError(f"[einsum] subscript {lab!r} repeated in one operand over dims of sizes {n} and {m}")
        rest = [d for d in range(t.ndim) if d not in (a, b)]
        t = t.permute(*rest, a, b).reshape(*[t.shape[d] for d in rest], n * n)
        t = t.index_select(tensor([i * (n + 1) for i in range(n)], device=t.device), t.ndim - 1)
        labels = [labels[d] for d in rest] + [lab]
    return t, labels


def _name(lab):
    """A label for messages: a letter, or an ellipsis dim (an int internally)."""
    return f"subscript {lab!r}" if isinstance(lab, str) else f"ellipsis dim {lab}"


def _sum_out(t, labels, keep):
    """Sums over the labels of t not in ``keep``."""
    dims = tuple(d for d, lab in enumerate(labels) if lab not in keep)
    if not dims:
        return t, labels
    return t.sum(dims), [lab for lab in labels if lab in keep]


def _contract(a, la, b, lb, keep):
    """a (labels la) times b (labels lb), summed over the shared labels not in ``keep``: one matmul
    with the shared kept labels as batch dims (size-1 ones broadcast, as torch's einsum)."""
    sa, sb = dict(zip(la, a.shape)), dict(zip(lb, b.shape))
    batch = [lab for lab in la if lab in sb and lab in keep]
    contr = [lab for lab in la if lab in sb and lab not in keep]
    # A contracted label of size 1 on one side: sum the other side over it first (broadcasting).
    for lab in contr:
        if sa[lab] != sb[lab]:
            if sa[lab] == 1:
                b = b.sum(lb.index(lab), keepdim=True)
                sb[lab] = 1
            elif sb[lab] == 1:
                a = a.sum(la.index(lab), keepdim=True)
                sa[lab] = 1
            else:
                raise ShapeError(f"[einsum] {_name(lab)} has sizes {sa[lab]} and {sb[lab]}")
    for lab in batch:
        if sa[lab] != sb[lab] and 1 not in (sa[lab], sb[lab]):
            raise ShapeError(f"[einsum] {_name(lab)} has sizes {sa[lab]} and {sb[lab]}")
    only_a = [lab for lab in la if lab not in sb]
    only_b = [lab for lab in lb if lab not in sa]
    m = math.prod(sa[lab] for lab in only_a)
    k = math.prod(sa[lab] for lab in contr)
    n = math.prod(sb[lab] for lab in only_b)
    a = a.permute(*[la.index(lab) for lab in batch + only_a + contr])
    b = b.permute(*[lb.index(lab) for lab in batch + contr + only_b])
    a = a.reshape(*[sa[lab] for lab in batch], m, k)
    b = b.reshape(*[sb[lab] for lab in batch], k, n)
    out = a @ b  # batch dims of size 1 broadcast
    sizes = [max(sa[lab], sb[lab]) for lab in batch] + [sa[lab] for lab in only_a] + [sb[lab] for lab in only_b]
    return out.reshape(*sizes), batch + only_a + only_b


def einsum(equation, *operands):
    """Einstein summation, as ``torch.einsum`` / ``numpy.einsum``.

    ``equation`` names each operand's dims by letters, separated by commas, optionally followed by
    ``->`` and the output's letters; without ``->`` the output is the letters that appear once, in
    alphabetical order (after the ellipsis dims); ellipsis dims an explicit output leaves out are summed
    (torch's rule). A letter repeated within one operand takes its
    diagonal (``"ii->i"``, the trace ``"ii"``); ``...`` stands for the dims not named (they broadcast
    across operands); dims of size 1 broadcast against the same letter's size elsewhere. Operands are
    contracted left to right, each pair as one batched matmul after permuting and reshaping (shared
    kept letters are the batch, summed letters the inner dim), so the result is differentiable with
    respect to every float operand::

        em.einsum("bij,bjk->bik", a, b)    # batched matmul
        em.einsum("...ij,...jk", a, b)     # the same with any batch dims, implicit output
        em.einsum("ii", m)                 # trace

    Args:
        equation: the subscripts, such as ``"ij,jk->ik"``.
        *operands: the tensors, one per comma-separated term (a single list or tuple of them is
            accepted too, as torch does). Mixed dtypes promote as the arithmetic operators do.

    Returns:
        A tensor with the output's dims.

    Raises:
        EmberValueError: a malformed equation (bad characters, wrong number of operands, an output
            letter not in any input or repeated).
        ShapeError: a term whose letters do not match its operand's dims, or one letter with sizes
            that neither match nor broadcast.
        EmberTypeError: an equation that is not a string, or an operand that is not a tensor.
    """
    if not isinstance(equation, str):
        raise EmberTypeError(f"[einsum] equation must be a str, got {type(equation).__name__}")
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    for i, t in enumerate(operands):
        if not isinstance(t, Tensor):
            raise EmberTypeError(f"[einsum] operand {i} is a {type(t).__name__}, not a Tensor")
    eq = equation.replace(" ", "")
    if eq.count("->") > 1:
        raise EmberValueError(f"[einsum] {equation!r} has more than one '->'")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise EmberValueError(f"[einsum] {equation!r} has {len(terms)} operand terms, got {len(operands)} tensors")
    if not operands:
        raise EmberValueError("[einsum] needs at least one operand")
    parsed = [_parse_term(term, t.ndim, f"term {i} ({term!r})") for i, (term, t) in enumerate(zip(terms, operands))]
    n_ell = [t.ndim - (len(p) - 1) if None in p else 0 for p, t in zip(parsed, operands)]
    width = max(n_ell)
    labels = [_expand(p, k, width) for p, k in zip(parsed, n_ell)]
    counts = {}
    for ls in labels:
        for lab in ls:
            if isinstance(lab, str):
                counts[lab] = counts.get(lab, 0) + 1
    if arrow:
        out = _parse_term(rhs, None, f"the output ({rhs!r})")
        out = _expand(out, width, width)
        named = [lab for lab in out if isinstance(lab, str)]
        if len(set(named)) != len(named):
            raise EmberValueError(f"[einsum] {equation!r}: a subscript repeats in the output")
        for lab in named:
            if lab not in counts:
                raise EmberValueError(f"[einsum] {equation!r}: output subscript {lab!r} is in no input")
    else:
        out = list(range(width)) + sorted(lab for lab, c in counts.items() if c == 1)  # A-Z before a-z
    dt = result_type(*operands)
    ts = [t if t.dtype is dt else t.to_dtype(dt) for t in operands]
    items = [_diagonal(t, ls) for t, ls in zip(ts, labels)]
    keep = set(out)
    # Left to right; before each pair, each side sums away the labels that nothing after needs.
    t, ls = items[0]
    for j in range(1, len(items)):
        rest = set().union(*(set(x[1]) for x in items[j + 1:]))
        u, lu = items[j]
        t, ls = _sum_out(t, ls, keep | rest | set(lu))
        u, lu = _sum_out(u, lu, keep | rest | set(ls))
        t, ls = _contract(t, ls, u, lu, keep | rest)
    t, ls = _sum_out(t, ls, keep)
    t = t.permute(*[ls.index(lab) for lab in out]) if ls != out else t
    return t
