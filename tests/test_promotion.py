"""Type promotion: one rule (torch.result_type's) for tensor pairs, 0-d tensors, Python scalars and
numpy arrays, in every binary op, comparisons, where, cat and stack; gradients in each input's dtype;
the table in docs/promotion.md is generated from the rule and checked here."""
import itertools
import pathlib

import numpy as np
import pytest
import torch

import ember as em

from conftest import ALL, WIDE, expect_error, npdt, rand_np

TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
         "int64": torch.int64, "uint32": torch.uint32, "uint8": torch.uint8, "int32": torch.int32, "bool": torch.bool}
FROM_TORCH = {v: k for k, v in TORCH.items()}
# torch refuses uint32 with every other integer dtype; ember takes numpy's lossless answer there
# (docs/promotion.md)
TORCH_REFUSES = {frozenset(("uint32", o)) for o in ("uint8", "int64", "int32", "bool")}
PAIRS = list(itertools.product(ALL, ALL))
DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "promotion.md"


def torch_promote(a, b):
    if frozenset((a.name, b.name)) in TORCH_REFUSES and a is not b:
        with pytest.raises(RuntimeError):
            torch.promote_types(TORCH[a.name], TORCH[b.name])
        return None  # no torch answer
    return getattr(em, FROM_TORCH[torch.promote_types(TORCH[a.name], TORCH[b.name])])


@pytest.mark.parametrize("a,b", PAIRS, ids=lambda d: d.name)
def test_promote_types_matches_torch(a, b):
    ours = em.promote_types(a, b)
    ref = torch_promote(a, b)
    if ref is None:
        assert ours is getattr(em, np.promote_types(npdt(a), npdt(b)).name)  # numpy's answer
    else:
        assert ours is ref
    assert em.promote_types(a.name, b.name) is ours and em.promote_types(b, a) is ours


def _t(dt, shape):
    return em.tensor(np.ones(shape, dtype=npdt(dt)) * 2)


def _torch(dt, shape):
    return torch.ones(shape, dtype=TORCH[dt.name]) * 2


@pytest.mark.parametrize("a,b", PAIRS, ids=lambda d: d.name)
@pytest.mark.parametrize("shapes", [((3,), (3,)), ((3,), ()), ((), (3,)), ((), ())], ids=str)
def test_result_type_of_tensors_matches_torch(a, b, shapes):
    if frozenset((a.name, b.name)) in TORCH_REFUSES and a is not b:
        # no torch answer: the pair promotes as numpy's when both have dims or both are 0-d; otherwise
        # (both ints) the dimensioned one decides, by the category rule
        want = em.promote_types(a, b) if len(shapes[0]) == len(shapes[1]) else (a if shapes[0] else b)
        assert em.result_type(_t(a, shapes[0]), _t(b, shapes[1])) is want
        return
    ref = torch.result_type(_torch(a, shapes[0]), _torch(b, shapes[1]))
    assert em.result_type(_t(a, shapes[0]), _t(b, shapes[1])).name == FROM_TORCH[ref]


@pytest.mark.parametrize("a", ALL, ids=lambda d: d.name)
@pytest.mark.parametrize("scalar", [2, 2.5, True, np.float64(1.5), np.int64(3)], ids=repr)
@pytest.mark.parametrize("shape", [(3,), ()], ids=str)
def test_result_type_with_scalars_matches_torch(a, scalar, shape):
    ref = torch.result_type(_torch(a, shape), scalar)
    assert em.result_type(_t(a, shape), scalar).name == FROM_TORCH[ref]
    assert em.result_type(scalar, _t(a, shape)).name == FROM_TORCH[ref]


@pytest.mark.parametrize("a,b", PAIRS, ids=lambda d: d.name)
def test_numpy_array_counts_as_a_tensor_of_its_dtype(a, b):
    arr = np.ones(3, dtype=npdt(b))
    assert em.result_type(_t(a, (3,)), arr) is em.promote_types(a, b)
    assert em.result_type(_t(a, (3,)), np.ones((), dtype=npdt(b))) is em.result_type(_t(a, (3,)), _t(b, ()))


OPS = [("add", lambda x, y: x + y), ("sub", lambda x, y: x - y), ("mul", lambda x, y: x * y),
       ("div", lambda x, y: x / y), ("maximum", lambda x, y: em.maximum(x, y) if isinstance(x, em.Tensor) else
                                     torch.maximum(x, y)),
       ("lt", lambda x, y: x < y), ("eq", lambda x, y: x == y), ("ge", lambda x, y: x >= y)]


@pytest.mark.parametrize("a,b", [p for p in PAIRS if frozenset((p[0].name, p[1].name)) not in TORCH_REFUSES
                                 or p[0] is p[1]], ids=lambda d: d.name)
@pytest.mark.parametrize("name,fn", OPS, ids=[o[0] for o in OPS])
def test_binary_ops_promote_like_torch(rng, a, b, name, fn):
    xa, xb = rand_np(rng, (2, 3), a, 1, 4), rand_np(rng, (3,), b, 1, 4)
    if name == "sub" and not a.is_float and not b.is_float and "uint" in a.name + b.name:
        xa = xa + 5  # no unsigned wraparound to compare
    # torch's CPU kernels lack uint32 arithmetic: compute its values in int64 and take the dtype from
    # torch.result_type (which knows uint32) with the same op-specific rules (comparisons, true division)
    ta = torch.from_numpy(xa.astype(np.float64)).to(TORCH["int64" if a is em.uint32 else a.name])
    tb = torch.from_numpy(xb.astype(np.float64)).to(TORCH["int64" if b is em.uint32 else b.name])
    ref = fn(ta, tb)
    out = fn(em.tensor(xa), em.tensor(xb))
    want = FROM_TORCH[ref.dtype]  # comparisons give bool, as torch's
    if em.uint32 in (a, b) and want == "int64":
        want = FROM_TORCH[torch.result_type(torch.zeros(1, dtype=TORCH[a.name]), torch.zeros(1, dtype=TORCH[b.name]))]
    assert out.dtype.name == want
    np.testing.assert_allclose(out.numpy().astype(np.float64), ref.to(torch.float64).numpy(), rtol=1e-2)
    # a numpy array operand is a tensor of its dtype, on either side
    assert fn(em.tensor(xa), xb).dtype.name == want


@pytest.mark.parametrize("a", ALL, ids=lambda d: d.name)
@pytest.mark.parametrize("scalar", [3, 0.5, True], ids=repr)
def test_scalar_operands_follow_torch(a, scalar):
    t = _t(a, (3,))
    for fn in (lambda x: x + scalar, lambda x: scalar * x, lambda x: x < scalar, lambda x: x / scalar):
        ref = fn(_torch(em.int64 if a is em.uint32 else a, (3,)))  # no uint32 arithmetic in torch's CPU kernels
        want = FROM_TORCH[ref.dtype]  # comparisons give bool, as torch's
        if a is em.uint32 and want == "int64":
            want = FROM_TORCH[torch.result_type(torch.zeros(3, dtype=torch.uint32), scalar)]
        out = fn(t)
        assert out.dtype.name == want
        np.testing.assert_allclose(out.numpy().astype(np.float64), ref.to(torch.float64).numpy(), rtol=1e-2)


def test_issue_example_numpy_float64_operand(device):
    t = em.tensor([1.0, 2.0, 3.0], device=device)
    if WIDE is not em.float64:  # the result would be float64: the device refuses it, whichever side numpy is
        for fn, op in ((lambda: t + np.ones(3), "add"), (lambda: t + em.tensor(np.ones(3), device=device), "tensor"),
                       (lambda: np.ones(3) + t, "add")):
            expect_error(fn, op, em.DTypeError)  # named by the function the user called
        return
    assert (t + np.ones(3)).dtype is em.float64
    assert (t + em.tensor(np.ones(3), device=device)).dtype is em.float64  # the same answer either way, no error
    assert (np.ones(3) + t).dtype is em.float64


@pytest.mark.parametrize("a,b", [p for p in [(em.float16, em.float32), (em.bfloat16, em.float16), (em.float32, em.float64),
                                              (em.int64, em.float16), (em.uint8, em.bfloat16)]
                                 if p[0] in ALL and p[1] in ALL], ids=str)
def test_where_cat_stack_promote(rng, a, b):
    xa, xb = rand_np(rng, (2, 3), a, 1, 4), rand_np(rng, (2, 3), b, 1, 4)
    ta = torch.from_numpy(xa.astype(np.float64)).to(TORCH[a.name])
    tb = torch.from_numpy(xb.astype(np.float64)).to(TORCH[b.name])
    cond = rng.integers(0, 2, (2, 3)).astype(np.uint8)
    for ours, ref in ((em.where(em.tensor(cond), em.tensor(xa), em.tensor(xb)),
                       torch.where(torch.from_numpy(cond).bool(), ta, tb)),
                      (em.cat([em.tensor(xa), em.tensor(xb)], 1), torch.cat([ta, tb], 1)),
                      (em.stack([em.tensor(xa), em.tensor(xb)], 0), torch.stack([ta, tb], 0))):
        assert ours.dtype.name == FROM_TORCH[ref.dtype]
        np.testing.assert_allclose(ours.numpy().astype(np.float64), ref.to(torch.float64).numpy())
    assert em.where(em.tensor(cond), em.tensor([1, 2, 3]), 0.5).dtype is em.float32  # as torch.where
    assert em.where(em.tensor(cond), 1, 0).dtype is em.int64 and em.where(em.tensor(cond), 1.0, 0).dtype is em.float32


@pytest.mark.parametrize("a,b", [p for p in [(em.float16, em.float32), (em.bfloat16, em.float16), (em.float32, em.float64),
                                              (em.bfloat16, em.float64)] if p[0] in ALL and p[1] in ALL], ids=str)
def test_gradients_come_back_in_each_inputs_dtype(rng, a, b):
    x, y = em.Var(rand_np(rng, (2, 3), a, 1, 2)), em.Var(rand_np(rng, (3,), b, 1, 2))
    tx = torch.tensor(x.numpy().astype(np.float64), dtype=TORCH[a.name], requires_grad=True)
    ty = torch.tensor(y.numpy().astype(np.float64), dtype=TORCH[b.name], requires_grad=True)
    gs = ((x * y + x) / y).sum().backward()
    ((tx * ty + tx) / ty).sum().backward()
    assert gs[x].dtype is a and gs[y].dtype is b
    np.testing.assert_allclose(gs[x].numpy().astype(np.float64), tx.grad.double().numpy(), rtol=2e-2)
    np.testing.assert_allclose(gs[y].numpy().astype(np.float64), ty.grad.double().numpy(), rtol=2e-2)
    gs = em.cat([x, y.reshape(1, 3)], 0).sum().backward()
    assert gs[x].dtype is a and gs[y].dtype is b
    gs = em.where(x.gt(1.5), x, y).sum().backward()
    assert gs[x].dtype is a and gs[y].dtype is b


@pytest.mark.cpu_only  # a float32 operand mixed into float64 finite differences: only the CPU holds float64
def test_mixed_gradient_in_float64_passes_gradcheck(rng):
    y = em.tensor(rng.uniform(1, 2, 3).astype(np.float32))
    em.testing.gradcheck(lambda x: (x * y).exp() / (y + 1), [em.tensor(rng.uniform(1, 2, (2, 3)))])


def test_result_type_errors():
    with pytest.raises(em.EmberTypeError, match=r"^\[result_type\]"):
        em.result_type(1, 2.0)
    with pytest.raises(em.EmberTypeError, match=r"^\[result_type\]"):
        em.result_type(em.zeros(2), "x")
    with pytest.raises(em.DTypeError, match=r"^\[dtype\]"):
        em.promote_types(em.float32, "complex")
    with pytest.raises(em.EmberTypeError, match=r"^\[add\] got a torch tensor.*from_dlpack"):
        em.zeros(2) + torch.zeros(2)


def promotion_table():
    """The Markdown table of em.promote_types over every dtype pair (what docs/promotion.md holds)."""
    names = [d.name for d in em.ALL_DTYPES]  # the rule is device-independent: every dtype
    rows = ["| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for a in em.ALL_DTYPES:
        rows.append(f"| **{a.name}** | " + " | ".join(em.promote_types(a, b).name for b in em.ALL_DTYPES) + " |")
    return "\n".join(rows)


def test_docs_table_is_the_rule():
    text = DOC.read_text()
    start, end = "<!-- promotion-table:start -->", "<!-- promotion-table:end -->"
    assert start in text and end in text
    table = text.split(start, 1)[1].split(end, 1)[0].strip()
    assert table == promotion_table(), "docs/promotion.md is stale; paste promotion_table() from this test"
