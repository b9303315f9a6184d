"""Lists, numpy arrays and scalars in ops go to the device of the tensor operands, whatever the default device."""
import numpy as np
import pytest

import ember as em
from ember.nn import ops

from conftest import ON_CPU, WIDE_NP, expect_error

F = em.nn.functional


@pytest.fixture(autouse=True)
def _default_on_cpu():
    # The user's normal setup: the default device stays on the CPU, the tensors are put on the device.
    em.set_default_device("cpu")


def _on(t, device):
    assert isinstance(t, em.Tensor) and t.device == device, (t.device, device)
    return t.numpy()


def test_indexing_with_lists_and_arrays(device, rng):
    a = rng.standard_normal((6, 7)).astype(np.float32)
    t = em.tensor(a, device=device)
    np.testing.assert_array_equal(_on(t[[4, 0, 4]], device), a[[4, 0, 4]])
    np.testing.assert_array_equal(_on(t[np.array([1, 3])], device), a[np.array([1, 3])])
    np.testing.assert_array_equal(_on(t[:, [5, 0, 2]], device), a[:, [5, 0, 2]])
    np.testing.assert_array_equal(_on(t[[0, 5], [1, 6]], device), a[[0, 5], [1, 6]])
    m = a > 0
    np.testing.assert_array_equal(_on(t[m], device), a[m])
    rows = np.array([True, False, True, True, False, False])
    np.testing.assert_array_equal(_on(t[rows, 2:], device), a[rows, 2:])


def test_setitem_with_lists_arrays_and_scalars(device, rng):
    a = rng.standard_normal((5, 4)).astype(np.float32)
    for idx, value in [([0, 1], 0.0), (np.array([3]), np.ones(4, np.float32)), ((slice(None), [1, 2]), -2.0),
                       (([0, 4], [3, 0]), [5.0, 6.0]), (a > 0, 7.0), (a < 0, np.arange(int((a < 0).sum()), dtype=np.float32))]:
        t, ref = em.tensor(a, device=device), a.copy()
        t[idx] = value
        ref[idx] = value
        np.testing.assert_array_equal(_on(t, device), ref)


def test_where_masked_fill_and_index_ops(device, rng):
    a = rng.standard_normal((3, 5)).astype(np.float32)
    t = em.tensor(a, device=device)
    cond = a > 0
    np.testing.assert_array_equal(_on(em.where(cond, t, 0.0), device), np.where(cond, a, 0))
    np.testing.assert_array_equal(_on(em.where(t.gt(0), np.zeros((3, 5), np.float32), t), device),
                                  np.where(cond, 0, a))
    np.testing.assert_array_equal(_on(em.where(cond.tolist(), [1.0] * 5, t), device), np.where(cond, 1.0, a))
    np.testing.assert_array_equal(_on(t.masked_fill(cond, 0), device), np.where(cond, 0, a))
    np.testing.assert_array_equal(_on(em.masked_fill(t, cond.tolist(), 1.5), device), np.where(cond, 1.5, a))
    np.testing.assert_array_equal(_on(t.index_select([4, 0], 1), device), a[:, [4, 0]])
    ids = [[0, 4], [1, 1], [2, 0]]
    np.testing.assert_array_equal(_on(t.gather(ids, 1), device), np.take_along_axis(a, np.array(ids), 1))
    np.testing.assert_array_equal(_on(em.scatter(t, 1, ids, value=9.0), device),
                                  _put(a, np.array(ids), 9.0))
    got = t.scatter_reduce(1, ids, em.ones(3, 2, device=device), "sum")
    ref = a.copy()
    np.add.at(ref, (np.arange(3)[:, None], np.array(ids)), 1.0)
    np.testing.assert_allclose(_on(got, device), ref, rtol=1e-6)
    np.testing.assert_array_equal(_on(t.index_add([2, 0], em.ones(3, 2, device=device), 1), device),
                                  a + np.array([1, 0, 1, 0, 0], np.float32))


def _put(a, ids, v):
    out = a.copy()
    np.put_along_axis(out, ids, v, 1)
    return out


def test_losses_attention_and_embedding(device, rng):
    logits = rng.standard_normal((4, 6)).astype(np.float32)
    lt = em.tensor(logits, device=device)
    target = [0, 5, 2, 2]
    want = F.cross_entropy(em.tensor(logits), em.tensor(target)).item()
    assert np.isclose(_on(F.cross_entropy(lt, target), device), want, rtol=1e-5)
    assert np.isclose(_on(F.cross_entropy(lt, np.array(target)), device), want, rtol=1e-5)
    assert np.isclose(_on(F.nll_loss(lt.log_softmax(-1), target), device), want, rtol=1e-5)
    q = rng.standard_normal((1, 2, 4, 8)).astype(np.float32)
    qt = em.tensor(q, device=device)
    keep = np.tril(np.ones((4, 4), bool))
    ref = ops.sdpa(qt, qt, qt, causal=True).numpy()
    np.testing.assert_allclose(_on(ops.sdpa(qt, qt, qt, mask=keep), device), ref, rtol=1e-5, atol=1e-6)
    bias = np.where(keep, 0.0, -np.inf).astype(np.float32)
    np.testing.assert_allclose(_on(ops.sdpa(qt, qt, qt, mask=bias), device), ref, rtol=1e-5, atol=1e-6)
    emb = em.nn.Embedding(10, 3, device=device)
    np.testing.assert_array_equal(_on(emb([[1, 9], [0, 1]]), device), emb.weight.numpy()[[[1, 9], [0, 1]]])


def test_arithmetic_with_arrays_and_scalars(device, rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    t = em.tensor(a, device=device)
    b = np.full((2, 3), 2.0, np.float32)
    for got, ref in [(t + b, a + b), (b - t, b - a), (t * [1.0, 2.0, 3.0], a * [1, 2, 3]), (t @ b.T, a @ b.T),
                     (em.maximum(b, t), np.maximum(a, b)), (em.add([1.0, 2.0, 3.0], t), a + [1, 2, 3])]:
        np.testing.assert_allclose(_on(got, device), ref, rtol=1e-6)
    i = em.tensor(np.arange(6).reshape(2, 3), device=device)
    np.testing.assert_array_equal(_on(i // [1, 2, 4], device), np.arange(6).reshape(2, 3) // [1, 2, 4])
    assert _on(t.eq(a.tolist()), device).all()


def test_tensors_on_two_devices_raise(device):
    if ON_CPU:  # one device in this session: tensors on it mix freely with lists and arrays (above)
        a = em.tensor(np.ones(3, WIDE_NP), device=device)
        assert (a + em.tensor([1.0, 2.0, 3.0], dtype=a.dtype)).device == device
        return
    a, c = em.ones(3, device=device), em.ones(3, device="cpu")
    for fn, op in [(lambda: a + c, "add"), (lambda: em.where(c.gt(0), a, 0.0), "where"),
                   (lambda: a.index_select(em.tensor([0], device="cpu"), 0), "index_select"),
                   (lambda: a[em.tensor([0, 1], device="cpu")], "index")]:
        expect_error(fn, op, em.DeviceError)
    expect_error(lambda: a.masked_fill(c.gt(0), 0.0), "where", em.DeviceError)
