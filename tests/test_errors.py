"""Bad input raises an EmberError subclass (also ValueError/TypeError/IndexError as fits) whose message starts
with [op]; a fuzz of random bad calls, run in a subprocess, never crashes or hangs."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import expect_error

import ember as em

A = em.zeros(2, 3)
I = em.zeros(2, 3, dtype=em.int64)

CASES = [
    # (call, op, class, also a builtin exception)
    (lambda: A + em.zeros(3, 2), "add", em.ShapeError, ValueError),
    (lambda: A / em.zeros(4), "div", em.ShapeError, ValueError),
    (lambda: A + em.zeros(2, 3, dtype=em.float16), "add", em.DTypeError, TypeError),
    (lambda: A.maximum(I), "maximum", em.DTypeError, TypeError),
    (lambda: A < I, "lt", em.DTypeError, TypeError),
    (lambda: I.exp(), "exp", em.DTypeError, TypeError),
    (lambda: I.sqrt(), "sqrt", em.DTypeError, TypeError),
    (lambda: I.log(), "log", em.DTypeError, TypeError),
    (lambda: I.tanh(), "tanh", em.DTypeError, TypeError),
    (lambda: I.gelu(), "gelu", em.DTypeError, TypeError),
    (lambda: I.mean(), "mean", em.DTypeError, TypeError),
    (lambda: I.powf(2.0), "powf", em.DTypeError, TypeError),
    (lambda: A.sum(2), "sum", em.IndexOutOfRange, IndexError),
    (lambda: A.sum((0, -3)), "sum", em.IndexOutOfRange, IndexError),
    (lambda: A.argmin(-3), "argmin", em.IndexOutOfRange, IndexError),
    (lambda: A.logsumexp(7), "logsumexp", em.IndexOutOfRange, IndexError),
    (lambda: A.transpose(0, 3), "transpose", em.IndexOutOfRange, IndexError),
    (lambda: A.narrow(0, 1, 5), "narrow", em.IndexOutOfRange, IndexError),
    (lambda: A.squeeze(-3), "squeeze", em.IndexOutOfRange, IndexError),
    (lambda: A.unsqueeze(3), "unsqueeze", em.IndexOutOfRange, IndexError),
    (lambda: A.flatten(0, 5), "flatten", em.IndexOutOfRange, IndexError),
    (lambda: A.reshape(4, 2), "reshape", em.ShapeError, ValueError),
    (lambda: A.broadcast_as((3, 3)), "broadcast_as", em.ShapeError, ValueError),
    (lambda: A @ em.zeros(2, 3), "matmul", em.ShapeError, ValueError),
    (lambda: A @ em.zeros(3, 2, dtype=em.float64), "matmul", em.DTypeError, TypeError),
    (lambda: A[2], "index", em.IndexOutOfRange, IndexError),
    (lambda: A[:, 3], "index", em.IndexOutOfRange, IndexError),
    (lambda: A[0.5], "index", em.IndexOutOfRange, IndexError),
    (lambda: A[:, 1.0], "index", em.IndexOutOfRange, IndexError),
    (lambda: A.index_select(em.tensor([2]), 0), "index_select", em.IndexOutOfRange, IndexError),
    (lambda: A.index_select(em.tensor([0.0]), 0), "index_select", em.DTypeError, TypeError),
    (lambda: A.gather(em.tensor([[5]]), 1), "gather", em.IndexOutOfRange, IndexError),
    (lambda: A.slice_set(em.zeros(2, 2), 1, 2), "slice_set", em.IndexOutOfRange, IndexError),
    (lambda: A.slice_set(em.zeros(2, 1, dtype=em.int64), 1, 0), "slice_set", em.DTypeError, TypeError),
    (lambda: em.cat([A, I], 0), "cat", em.DTypeError, TypeError),
    (lambda: em.cat([A, em.zeros(2, 4)], 0), "cat", em.ShapeError, ValueError),
    (lambda: em.stack([A, em.zeros(2, 4)]), "stack", em.ShapeError, ValueError),
    (lambda: em.where(A, A, A), "where", em.DTypeError, TypeError),
    (lambda: em.where(I, A, I), "where", em.DTypeError, TypeError),
    (lambda: em.zeros(-2), "full", em.ShapeError, ValueError),
    (lambda: em.rand(2, dtype=em.uint32), "rand", em.DTypeError, TypeError),
    (lambda: em.tensor([[1], [2, 3]]), "tensor", em.DTypeError, TypeError),
    (lambda: em.tensor(np.zeros(2, dtype=np.complex128)), "tensor", em.DTypeError, TypeError),
    (lambda: em.zeros(2, dtype="int8x"), "dtype", em.DTypeError, TypeError),
    (lambda: em.Device("gpu"), "device", em.DeviceError, ValueError),
    (lambda: A.item(), "item", em.ShapeError, ValueError),
]


@pytest.mark.parametrize("i", range(len(CASES)))
def test_error_class_and_message(i):
    fn, op, cls, builtin = CASES[i]
    e = expect_error(fn, op, cls)
    assert isinstance(e, builtin), (type(e).__mro__, builtin)


def test_device_mismatch_and_unavailable_device():
    if em.metal_is_available():
        m = em.zeros(2, 3, device="metal")
        expect_error(lambda: A + m, "add", em.DeviceError)
        expect_error(lambda: A @ m.t(), "matmul", em.DeviceError)
        expect_error(lambda: em.cat([A, m]), "cat", em.DeviceError)
    else:
        for fn, op in [(lambda: em.zeros(2, device="metal"), "alloc"), (lambda: em.ones(2, device="metal"), "alloc"),
                       (lambda: em.rand(2, device=em.Device("metal", 0)), "rand"),
                       (lambda: em.arange(3, device="metal"), "arange"), (lambda: A.to_device("metal"), "to_device"),
                       (lambda: em.tensor([1.0], device="metal"), "to_device")]:
            expect_error(fn, op, em.DeviceError)


def test_errors_leave_no_partial_state():
    t = em.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    with pytest.raises(em.EmberError):
        t.slice_set(em.ones(2, 2), 1, 2)
    with pytest.raises(em.EmberError):
        t.index_select(em.tensor([0, 9]), 1)
    np.testing.assert_array_equal(t.numpy(), np.arange(6).reshape(2, 3))
    assert (t + 1).numpy()[0, 0] == 1  # still usable


FUZZ = textwrap.dedent(
    """
    import random, numpy as np, ember as em
    random.seed(0)
    dts = [em.float32, em.float16, em.bfloat16, em.float64, em.int64, em.uint32, em.uint8]
    bad_ints = [-10**12, -7, -3, -1, 0, 1, 2, 5, 10**12]
    def rt():
        shape = tuple(random.choice([0, 1, 2, 3]) for _ in range(random.randint(0, 3)))
        t = em.zeros(*shape, dtype=random.choice(dts)) + 1
        if t.ndim >= 2 and random.random() < 0.5:
            t = t.t()
        return t
    calls = [
        lambda a, b: a + b, lambda a, b: a @ b, lambda a, b: em.where(b, a, a), lambda a, b: em.cat([a, b], random.choice(bad_ints)),
        lambda a, b: a.index_select(b, random.choice(bad_ints)), lambda a, b: a.gather(b, random.choice(bad_ints)),
        lambda a, b: a.slice_set(b, random.choice(bad_ints), random.choice(bad_ints)),
        lambda a, b: a.narrow(random.choice(bad_ints), random.choice(bad_ints), random.choice(bad_ints)),
        lambda a, b: a.sum(random.choice(bad_ints)), lambda a, b: a.argmax(random.choice(bad_ints)),
        lambda a, b: a.reshape(random.choice(bad_ints), random.choice(bad_ints)), lambda a, b: a[random.choice(bad_ints)],
        lambda a, b: a[random.choice(bad_ints):random.choice(bad_ints):random.choice(bad_ints)],
        lambda a, b: a.broadcast_as(tuple(random.choice([0, 1, 2, 3]) for _ in range(3))),
        lambda a, b: a.transpose(random.choice(bad_ints), random.choice(bad_ints)), lambda a, b: a.exp(),
        lambda a, b: a.to_dtype(random.choice(dts)).max(), lambda a, b: em.stack([a, b]), lambda a, b: a.unsqueeze(random.choice(bad_ints)),
        lambda a, b: a.permute(*[random.choice(bad_ints) for _ in range(a.ndim)]), lambda a, b: a.logsumexp(),
    ]
    ok = bad = 0
    for _ in range(3000):
        a, b = rt(), rt()
        try:
            r = random.choice(calls)(a, b)
            if isinstance(r, em.Tensor):
                r.numpy()
            ok += 1
        except em.EmberError as e:
            assert str(e).startswith("["), str(e)
            bad += 1
        except (TypeError, ValueError, IndexError, ZeroDivisionError) as e:
            raise AssertionError(f"non-ember error: {type(e).__name__}: {e}")
    print("ok", ok, "bad", bad)
    """
)


def test_fuzz_bad_calls_never_crash_or_hang():
    r = subprocess.run([sys.executable, "-c", FUZZ], check=False, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    ok, bad = (int(x) for x in r.stdout.split()[1::2])
    assert ok > 200 and bad > 200
