"""em.einsum against numpy (and torch where they differ) over a table of equations; gradients by gradcheck."""
import numpy as np
import pytest
import torch

import ember as em
from ember.testing import gradcheck

from conftest import TOL, WIDE, WIDE_NP

# (equation, operand shapes)
TABLE = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),  # implicit output
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bij,jk->bik", [(2, 3, 4), (4, 5)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),  # elementwise
    ("ij,ij->", [(3, 4), (3, 4)]),  # dot of matrices
    ("i,i", [(5,), (5,)]),  # inner product
    ("i,j->ij", [(3,), (4,)]),  # outer product
    ("i,j", [(3,), (4,)]),
    ("ij->ji", [(3, 4)]),  # transpose
    ("ij", [(3, 4)]),
    ("ji", [(3, 4)]),  # implicit: sorted, so a transpose
    ("ij->", [(3, 4)]),
    ("ij->j", [(3, 4)]),
    ("ii", [(4, 4)]),  # trace
    ("ii->i", [(4, 4)]),  # diagonal
    ("iij->j", [(3, 3, 2)]),
    ("iii->i", [(3, 3, 3)]),
    ("bii->b", [(2, 3, 3)]),  # batched trace
    ("ij,jj->i", [(2, 3), (3, 3)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),  # ellipsis broadcasting, implicit output
    ("...i,...i->...", [(2, 3, 4), (3, 4)]),
    ("i...->...", [(3, 2, 2)]),
    ("a...b,b...->a...", [(2, 3, 4), (4, 3)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),  # attention scores
    ("bhqk,bhkd->bhqd", [(2, 3, 4, 6), (2, 3, 6, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),  # chain
    ("ab,bc,ca->", [(2, 3), (3, 4), (4, 2)]),  # trace of a product
    ("ijk,jkl->il", [(2, 3, 4), (3, 4, 5)]),  # two contracted dims
    ("ijk,ikl->ijl", [(2, 3, 4), (2, 4, 5)]),
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 2)]),
    ("ab,cd->abcd", [(2, 3), (4, 2)]),
    ("ij,kj->ikj", [(2, 3), (4, 3)]),  # a batch dim not first
    ("ijk,k->ij", [(2, 3, 4), (4,)]),
    ("i,i,i->i", [(4,), (4,), (4,)]),
    ("ij,j,i->", [(3, 4), (4,), (3,)]),
    (",i->i", [(), (3,)]),  # a scalar operand
    (",->", [(), ()]),
    ("Ab,bA->A", [(3, 4), (4, 3)]),  # upper case
    ("aB,Bc", [(2, 3), (3, 4)]),
    ("ij,jk->ik", [(0, 4), (4, 5)]),  # empty
    ("ij,jk->ik", [(3, 0), (0, 5)]),  # empty contraction: zeros
]


def _ops(shapes, dtype=WIDE_NP, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


@pytest.mark.parametrize("eq,shapes", TABLE, ids=[e for e, _ in TABLE])
def test_matches_numpy(eq, shapes):
    arrs = _ops(shapes)
    want = np.einsum(eq, *[a.astype(np.float64) for a in arrs])
    got = em.einsum(eq, *[em.tensor(a) for a in arrs])
    assert got.shape == want.shape
    rtol, atol = TOL[WIDE.name]
    np.testing.assert_allclose(got.numpy(), want, rtol=rtol, atol=atol * 10)


@pytest.mark.parametrize("eq,shapes", [t for t in TABLE if 0 not in sum(t[1], ())][::2] + [TABLE[-4]],
                         ids=lambda x: x if isinstance(x, str) else "")
def test_gradients(eq, shapes):
    arrs = _ops(shapes, np.float64, seed=1)
    gradcheck(lambda *ts: em.einsum(eq, *ts), [em.tensor(a, device="cpu") for a in arrs])


def test_size_one_dims_broadcast_as_torch():
    """torch broadcasts a letter's size-1 dim against its size elsewhere (numpy too, except in a sum)."""
    for eq, shapes in [("ij,ij->ij", [(3, 1), (3, 4)]), ("ij,jk->ik", [(2, 1), (3, 4)]),
                       ("bij,bjk->bik", [(1, 2, 3), (4, 3, 2)]), ("ij,ij->i", [(1, 4), (3, 4)])]:
        arrs = _ops(shapes)
        want = torch.einsum(eq, *[torch.tensor(a, dtype=torch.float64) for a in arrs]).numpy()
        got = em.einsum(eq, *[em.tensor(a) for a in arrs])
        np.testing.assert_allclose(got.numpy(), want, rtol=TOL[WIDE.name][0], atol=TOL[WIDE.name][1] * 10)
        gradcheck(lambda *ts, eq=eq: em.einsum(eq, *ts), [em.tensor(a.astype(np.float64), device="cpu") for a in arrs])


def test_list_of_operands_dtypes_and_ints():
    a, b = _ops([(2, 3), (3, 2)])
    np.testing.assert_allclose(em.einsum("ij,jk", [em.tensor(a), em.tensor(b)]).numpy(), a @ b,
                               rtol=TOL[WIDE.name][0], atol=1e-5)
    ia, ib = np.arange(6).reshape(2, 3), np.arange(6).reshape(3, 2)
    got = em.einsum("ij,jk->ik", em.tensor(ia), em.tensor(ib))
    assert got.dtype == em.int64
    np.testing.assert_array_equal(got.numpy(), ia @ ib)
    np.testing.assert_array_equal(em.einsum("ii", em.tensor(np.arange(9).reshape(3, 3))).numpy(), 12)
    mixed = em.einsum("i,i", em.tensor([1.0, 2.0]), em.tensor([3, 4]))  # promotes as a * b does
    assert mixed.dtype == (em.tensor([1.0]) * em.tensor([1])).dtype and mixed.item() == 11.0


@pytest.mark.parametrize("call,cls,match", [
    (lambda a: em.einsum("ij,jk", a), em.EmberValueError, r"^\[einsum\] 'ij,jk' has 2 operand terms, got 1"),
    (lambda a: em.einsum("ijk", a), em.ShapeError, r"^\[einsum\] term 0 \('ijk'\) has 3 subscripts for an operand with 2"),
    (lambda a: em.einsum("i", a), em.ShapeError, r"^\[einsum\] term 0"),
    (lambda a: em.einsum("i1", a), em.EmberValueError, r"^\[einsum\] invalid subscript '1'"),
    (lambda a: em.einsum("ij->k", a), em.EmberValueError, r"^\[einsum\] 'ij->k': output subscript 'k' is in no input"),
    (lambda a: em.einsum("ij->ii", a), em.EmberValueError, r"^\[einsum\] 'ij->ii': a subscript repeats"),
    (lambda a: em.einsum("ij->i->j", a), em.EmberValueError, r"^\[einsum\] 'ij->i->j' has more than one '->'"),
    (lambda a: em.einsum("...i...", a), em.EmberValueError, r"^\[einsum\] term 0 .* more than one ellipsis"),
    (lambda a: em.einsum("ii", a), em.ShapeError, r"^\[einsum\] subscript 'i' repeated in one operand over dims of "
                                                  r"sizes 2 and 3"),
    (lambda a: em.einsum("ij,ij", a, em.ones(3, 2)), em.ShapeError, r"^\[einsum\] subscript 'i' has sizes 2 and 3"),
    (lambda a: em.einsum("ij,jk", a, em.ones(2, 2)), em.ShapeError, r"^\[einsum\] subscript 'j' has sizes 3 and 2"),
    (lambda a: em.einsum("...i,...i", em.ones(2, 3, 2), em.ones(3, 3, 2)), em.ShapeError,
     r"^\[einsum\] ellipsis dim 0 has sizes 2 and 3"),
    (lambda a: em.einsum(5, a), em.EmberTypeError, r"^\[einsum\] equation must be a str"),
    (lambda a: em.einsum("ij", np.ones((2, 3))), em.EmberTypeError, r"^\[einsum\] operand 0 is a ndarray"),
    (lambda a: em.einsum(""), em.EmberValueError, r"^\[einsum\]"),
])
def test_errors(call, cls, match):
    with pytest.raises(cls, match=match):
        call(em.ones(2, 3))
