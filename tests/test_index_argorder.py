"""gather / index_select / index_add / scatter_add take ember's (indices, dim) order and torch's
(dim, index) order, told apart by the argument types; misuse names both signatures."""
import numpy as np
import pytest
import torch

import ember as em

from conftest import WIDE_NP


def _data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 5)).astype(WIDE_NP)
    idx = rng.integers(0, 5, (4, 3))
    rows = np.array([3, 0, 3])
    return x, idx, rows


def test_gather_both_orders_match_torch():
    x, idx, _ = _data()
    want = torch.gather(torch.tensor(x), 1, torch.tensor(idx)).numpy()
    t, i = em.tensor(x), em.tensor(idx)
    for got in (t.gather(i, 1), t.gather(1, i), t.gather(dim=1, index=i), t.gather(indices=i, dim=1),
                t.gather(1, index=i), em.gather(t, 1, i), em.gather(t, i, 1), t.gather(np.int64(1), i),
                t.gather(-1, i)):
        np.testing.assert_array_equal(got.numpy(), want)


def test_index_select_both_orders_match_torch():
    x, _, rows = _data()
    want = torch.index_select(torch.tensor(x), 0, torch.tensor(rows)).numpy()
    t = em.tensor(x)
    for got in (t.index_select(rows.tolist(), 0), t.index_select(0, em.tensor(rows)), t.index_select(0, [3, 0, 3]),
                t.index_select(dim=0, index=em.tensor(rows)), em.index_select(t, 0, rows)):
        np.testing.assert_array_equal(got.numpy(), want)


def test_index_add_and_scatter_add_both_orders_match_torch():
    x, idx, rows = _data()
    rng = np.random.default_rng(1)
    src_rows = rng.standard_normal((3, 5)).astype(WIDE_NP)
    src = rng.standard_normal((4, 3)).astype(WIDE_NP)
    tx = torch.tensor(x)
    want_ia = tx.index_add(0, torch.tensor(rows), torch.tensor(src_rows), alpha=2.5).numpy()
    want_ia1 = tx.index_add(0, torch.tensor(rows), torch.tensor(src_rows)).numpy()
    want_sa = tx.scatter_add(1, torch.tensor(idx), torch.tensor(src)).numpy()
    t, r, i = em.tensor(x), em.tensor(rows), em.tensor(idx)
    s_rows, s = em.tensor(src_rows), em.tensor(src)
    np.testing.assert_allclose(t.index_add(0, r, s_rows, alpha=2.5).numpy(), want_ia, rtol=1e-6)
    for got in (t.index_add(r, s_rows, 0), t.index_add(0, r, s_rows), t.index_add(dim=0, index=r, source=s_rows)):
        np.testing.assert_allclose(got.numpy(), want_ia1, rtol=1e-6)
    for got in (t.scatter_add(i, s, 1), t.scatter_add(1, i, s), t.scatter_add(dim=1, index=i, src=s)):
        np.testing.assert_allclose(got.numpy(), want_sa, rtol=1e-6)


def test_gradients_are_the_same_in_both_orders():
    x, idx, _ = _data()
    a, b = em.Var(x), em.Var(x)
    w = em.tensor(np.arange(12, dtype=WIDE_NP).reshape(4, 3))
    ga = (a.gather(em.tensor(idx), 1) * w).sum().backward()[a]
    gb = (b.gather(1, em.tensor(idx)) * w).sum().backward()[b]
    tx = torch.tensor(x, requires_grad=True)
    (torch.gather(tx, 1, torch.tensor(idx)) * torch.tensor(w.numpy())).sum().backward()
    np.testing.assert_array_equal(ga.numpy(), gb.numpy())
    np.testing.assert_allclose(ga.numpy(), tx.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("call,match", [
    (lambda t, i: t.gather(i, i), r"^\[gather\] expected gather\(indices, dim\) \(ember's order\) or gather\(dim, "
                                  r"index\) \(torch's\), with dim an int and the indices a tensor; got \(Tensor, Tensor\)"),
    (lambda t, i: t.gather(1, 1), r"^\[gather\] expected gather\(indices, dim\) .* got \(int, int\)"),
    (lambda t, i: t.gather(True, i), r"^\[gather\] .* got \(bool, Tensor\)"),
    (lambda t, i: t.gather(i, 1.0), r"^\[gather\] .* got \(Tensor, float\)"),
    (lambda t, i: t.gather(1), r"^\[gather\] missing indices: expected gather\(indices, dim\)"),
    (lambda t, i: t.gather(i, 1, 2), r"^\[gather\] takes 2 arguments, got 3"),
    (lambda t, i: t.gather(i, dim=1, axis=0), r"^\[gather\] unexpected keyword argument 'axis'"),
    (lambda t, i: t.index_select(i, 0, dim=0), r"^\[index_select\] got 'dim' twice: expected index_select\(indices, "
                                               r"dim\) \(ember's order\) or index_select\(dim, index\)"),
    (lambda t, i: t.scatter_add(1, i), r"^\[scatter_add\] missing source: expected scatter_add\(indices, source, "
                                       r"dim\) \(ember's order\) or scatter_add\(dim, index, src\) \(torch's\)"),
    (lambda t, i: t.index_add(i, i, i), r"^\[index_add\] expected index_add\(indices, source, dim\)"),
    (lambda t, i: em.gather(t, i, i), r"^\[gather\] expected"),
])
def test_misuse_names_both_signatures(call, match):
    x, idx, _ = _data()
    with pytest.raises(em.EmberTypeError, match=match):
        call(em.tensor(x), em.tensor(idx))


def test_the_trap_of_issue_35():
    """t.gather(1, idx), torch's order, once failed with "[item] expected a tensor with one element"."""
    t = em.tensor([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(t.gather(1, em.tensor([[0, 0], [1, 0]])).numpy(), [[1, 1], [4, 3]])
