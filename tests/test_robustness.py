"""Adversarial inputs: bad or extreme arguments must raise an EmberError whose message starts with
"[op]", never crash (segfault, abort, SIGFPE), hang, or hand back a tensor that lies about its data.

Cases that crashed before their fix run in subprocesses (a segfault would kill pytest itself); the
rest are checked in process for the exact error class and prefix."""
import json
import math
import os
import struct
import subprocess
import sys
import threading

import numpy as np
import pytest

import ember as em

# Children import the very ember this test imported (the installed one in CI, python/ in a dev tree).
PYDIR = os.path.dirname(os.path.dirname(os.path.abspath(em.__file__)))

# --------------------------------------------------------------------------- subprocess batches
# Each case: (name, code, expected) where expected is the name of an ember error class the code must
# raise, or None when it must succeed (its own asserts check the values). The child runs every case,
# prints one JSON line of mismatches and a final marker; a crash loses the marker and fails the test.
_CHILD = r'''
import json, sys, traceback
import numpy as np
import ember as em
from ember import _C, errors
cases = json.loads(sys.stdin.read())
bad = {}
for name, code, expected in cases:
    try:
        exec(code, {"em": em, "np": np, "_C": _C})
    except Exception as e:  # noqa: BLE001 - the whole point is to classify whatever comes out
        msg = str(e)
        if expected is None:
            bad[name] = "raised " + type(e).__name__ + ": " + msg[:200]
        elif not isinstance(e, getattr(errors, expected)) or not msg.startswith("["):
            bad[name] = "raised " + type(e).__name__ + ": " + msg[:200] + " (want " + expected + " with [op])"
    else:
        if expected is not None:
            bad[name] = "did not raise " + expected
print(json.dumps(bad))
print("ALL-CASES-RAN")
'''


def run_batch(cases, timeout=60, env_extra=None):
    env = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(env_extra or {})
    try:
        r = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(cases), capture_output=True,
                           text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"batch hung (> {timeout} s): {[c[0] for c in cases]}")
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 0 and lines and lines[-1] == "ALL-CASES-RAN", (
        f"child died with rc={r.returncode} (negative = signal)\nstdout: {r.stdout[-2000:]}\n"
        f"stderr: {r.stderr[-2000:]}")
    assert json.loads(lines[-2]) == {}


S6 = "s = _C.alloc(0, 0, em.float32.code, 6, True)\n"  # a 6-element float32 storage
IDS = "ids = _C.alloc(0, 0, em.int64.code, 1, True)\n"

# A hand-made layout that reaches outside its storage, handed to every _C entry point that takes a
# (storage, layout): each must bounds-check before its kernel runs.
OOB = "big = em.Layout([1000], [1], 0)\n"
LAYOUT_CASES = [
    ("unary_oob", S6 + OOB + "_C.unary(0, s, big)", "IndexOutOfRange"),
    ("unary_offset_oob", S6 + "_C.unary(0, s, em.Layout([6], [1], 10**6))", "IndexOutOfRange"),
    ("unary_negative_stride", S6 + "_C.unary(0, s, em.Layout([6], [-1], 0))", "IndexOutOfRange"),
    ("unary_negative_offset", S6 + "_C.unary(0, s, em.Layout([2], [1], -1))", "IndexOutOfRange"),
    ("unary_stride_wraps", S6 + "_C.unary(0, s, em.Layout([3], [2**62], 0))", "IndexOutOfRange"),
    ("unary_stride_wraps2", S6 + "_C.unary(0, s, em.Layout([5, 2], [2**62, 1], 0))", "IndexOutOfRange"),
    ("binary_oob", S6 + OOB + "_C.binary(0, s, big, s, big)", "IndexOutOfRange"),
    ("binary_rhs_oob", S6 + OOB + "_C.binary(0, s, em.Layout([1], [1], 0), s, big)", "IndexOutOfRange"),
    ("where_oob", S6 + OOB + "c = _C.alloc(0, 0, em.uint8.code, 6, True)\n_C.where(c, big, s, big, s, big)",
     "IndexOutOfRange"),
    ("to_dtype_oob", S6 + OOB + "_C.to_dtype(s, big, em.float64.code)", "IndexOutOfRange"),
    ("reduce_oob", S6 + OOB + "_C.reduce(0, s, big, [0], False)", "IndexOutOfRange"),
    ("matmul_oob", S6 + "l = em.Layout([100, 100], [100, 1], 0)\n_C.matmul(s, l, s, l)", "IndexOutOfRange"),
    ("contiguous_oob", S6 + OOB + "_C.contiguous(s, big)", "IndexOutOfRange"),
    ("fill_oob", S6 + "_C.fill(s, em.Layout([10**6], [1], 0), 1.0)", "IndexOutOfRange"),
    ("copy_into_src_oob", S6 + "d = _C.alloc(0, 0, em.float32.code, 10**6, True)\n"
     "l = em.Layout([10**6], [1], 0)\n_C.copy_into(s, l, d, l, 'copy')", "IndexOutOfRange"),
    ("copy_into_dst_oob", S6 + "d = _C.alloc(0, 0, em.float32.code, 10**6, True)\n"
     "l = em.Layout([10**6], [1], 0)\n_C.copy_into(d, l, s, l, 'copy')", "IndexOutOfRange"),
    ("index_select_src_oob", S6 + IDS + OOB + "_C.index_select(s, big, ids, em.Layout([1], [1], 0), 0)",
     "IndexOutOfRange"),
    ("index_select_ids_oob", S6 + IDS + "_C.index_select(s, em.Layout([6], [1], 0), ids, "
     "em.Layout([10**5], [1], 0), 0)", "IndexOutOfRange"),
    ("gather_oob", S6 + IDS + OOB + "_C.gather(s, big, ids, big, 0)", "IndexOutOfRange"),
    ("index_add_src_oob", S6 + IDS + "_C.index_add(s, em.Layout([6], [1], 0), ids, em.Layout([1], [1], 0), s, "
     "em.Layout([1], [1], 10**6), 0)", "IndexOutOfRange"),
    ("scatter_add_src_oob", S6 + IDS + OOB + "_C.scatter_add(s, em.Layout([6], [1], 0), ids, "
     "em.Layout([1], [1], 0), s, em.Layout([1], [1], 10**6), 0)", "IndexOutOfRange"),
    # A 0-d source has no dim to index (normalize_dim lets dim 0 through): the kernels read past its shape.
    ("index_select_scalar", "em.tensor(1.5).index_select(em.tensor([0]), 0)", "ShapeError"),
    ("index_list_of_scalar", "em.tensor(1.5)[[0]]", "IndexOutOfRange"),  # an IndexError, as in torch
    ("gather_scalar", "em.tensor(1.5).gather(em.tensor(0), 0)", "ShapeError"),
    ("index_add_scalar", "em.tensor(1.5).index_add(em.tensor([0]), em.ones(1), 0)", "ShapeError"),
    ("scatter_add_scalar", "em.tensor(1.5).scatter_add(em.tensor(0), em.tensor(1.0), 0)", "ShapeError"),
    ("cat_oob", S6 + "l = em.Layout([10**6], [1], 0)\n_C.cat([s, s], [l, l], 0)", "IndexOutOfRange"),
    ("as_numpy_oob", S6 + OOB + "s.as_numpy(big)", "IndexOutOfRange"),
    ("as_numpy_negative_stride", S6 + "s.as_numpy(em.Layout([6], [-1], 0))", "IndexOutOfRange"),
    ("as_numpy_stride_wraps", S6 + "s.as_numpy(em.Layout([3], [2**62], 0))", "IndexOutOfRange"),
    ("fused_softmax_oob", S6 + "_C.fused.softmax_fwd(s, em.Layout([100, 100], [100, 1], 0))", "EmberError"),
    # Malformed layouts are refused when built.
    ("layout_rank_mismatch", "em.Layout([2, 3], [1], 0)", "ShapeError"),
    ("layout_negative_dim", "em.Layout([-6], [1], 0)", "ShapeError"),
    ("layout_numel_overflow", "em.Layout([2**62, 4], [4, 1], 0)", "ShapeError"),
    ("layout_contiguous_overflow", "em.Layout.contiguous([2**32, 2**32])", "ShapeError"),
    # Op codes index kernel tables: unknown ones used to read past them.
    ("unary_bad_code", S6 + "_C.unary(99, s, em.Layout.contiguous([6]))", "EmberValueError"),
    ("unary_negative_code", S6 + "_C.unary(-1, s, em.Layout.contiguous([6]))", "EmberValueError"),
    ("binary_bad_code", S6 + "l = em.Layout.contiguous([6])\n_C.binary(99, s, l, s, l)", "EmberValueError"),
    ("binary_count_code", S6 + "from ember.tensor_type import BINARY\nl = em.Layout.contiguous([6])\n"
     "_C.binary(len(BINARY), s, l, s, l)", "EmberValueError"),  # one past the last op
    ("reduce_bad_code", S6 + "_C.reduce(99, s, em.Layout.contiguous([6]), [0], False)", "EmberValueError"),
    ("layout_reshape_wrong_count", "em.Layout([2, 3], [3, 1], 0).reshape([7])", "ShapeError"),
    ("layout_reshape_negative", "em.Layout([2, 3], [3, 1], 0).reshape([-2, -3])", "ShapeError"),
    # A layout inside its storage (negative stride included) still works.
    ("layout_negative_stride_ok", S6 + "s.numpy()[:] = np.arange(6)\n"
     "a = s.as_numpy(em.Layout([6], [-1], 5))\nassert a.tolist() == [5, 4, 3, 2, 1, 0], a", None),
    ("layout_empty_far_offset_ok", S6 + "_C.unary(0, s, em.Layout([0, 3], [1, 1], 10**9))", None),
]

CREATION_CASES = [
    ("zeros_2e40_squared", "em.zeros(2**40, 2**40)", "ShapeError"),
    ("zeros_wraps_to_zero", "em.zeros(2**32, 2**32)", "ShapeError"),
    ("ones_2e62_bytes_wrap", "em.ones(2**62)", "EmberError"),
    ("full_huge", "em.full((2**33, 2**33), 1.0)", "ShapeError"),
    ("zeros_negative", "em.zeros(-1, 3)", "ShapeError"),
    ("rand_wraps_to_zero", "em.rand(2**32, 2**32)", "ShapeError"),
    ("randn_negative", "em.randn(-2, 3)", "ShapeError"),
    ("alloc_negative", "_C.alloc(0, 0, 0, -5, False)", "EmberError"),
    ("alloc_bytes_wrap", "_C.alloc(0, 0, em.float32.code, 2**62, False)", "EmberError"),
    ("full_bytes_wrap", "_C.full(0, 0, em.float32.code, 2**62, 1.0)", "EmberError"),
    ("rand_negative_count", "_C.rand_uniform(0, 0, 0, -5, 0.0, 1.0)", "EmberError"),
    ("arange_negative_count", "_C.arange(0, 0, 0, 0.0, 1.0, -5)", "EmberError"),
    ("storage_empty_bytes_wrap", "em.CpuStorage.empty(2**62, em.float32)", "EmberError"),
    ("storage_empty_past_int64", "em.CpuStorage.empty(2**70, em.float32)", "EmberError"),
    ("arange_2e62", "em.arange(2**62)", "EmberError"),
    ("arange_huge_count", "em.arange(0, 1e30, 1e-30)", "EmberError"),
    ("arange_inf", "em.arange(0, float('inf'))", "EmberError"),
    ("arange_nan", "em.arange(0, float('nan'))", "EmberError"),
    ("arange_nan_step", "em.arange(0, 5, float('nan'))", "EmberError"),
    ("arange_zero_step", "em.arange(0, 5, 0)", "EmberError"),
    ("arange_string", "em.arange('a')", "EmberTypeError"),
    # 2**60 / (2**58 - 1) is just above 4: a float count rounds it to 4, the exact one is 5.
    ("arange_exact_int_count", "assert em.arange(0, 2**60, 2**58 - 1).shape == (5,)", None),
]

VIEW_CASES = [
    ("narrow_sum_overflows", "em.arange(3.0).narrow(0, 2**62, 2**62)", "IndexOutOfRange"),
    ("narrow_start_max", "em.arange(3.0).narrow(0, 2**63 - 1, 2)", "IndexOutOfRange"),
    ("broadcast_negative", "em.zeros(1).broadcast_as(-5)", "ShapeError"),
    ("broadcast_negative_extra", "em.zeros(1).broadcast_as(-5, 1)", "ShapeError"),
    ("broadcast_count_wraps", "em.zeros(1).broadcast_as(2**32, 2**32)", "ShapeError"),
    # two valid stride-0 views (no memory) whose broadcast result cannot be counted
    ("binary_broadcast_wraps", "em.zeros(1, 1).broadcast_as(2**32, 1) + em.zeros(1, 1).broadcast_as(1, 2**32)",
     "ShapeError"),
    ("reshape_count_wraps", "em.zeros(0).reshape(2**32, 2**32)", "ShapeError"),
    ("reshape_minus_one_wraps", "em.zeros(6).reshape(2**32, 2**32, -1)", "ShapeError"),
    ("slice_step_near_int64_max", "t = em.arange(3.0)[1:3:2**63 - 1]\nassert t.numpy().tolist() == [1.0], t", None),
    ("slice_step_max_from_start", "assert em.arange(3.0)[::2**63 - 1].numpy().tolist() == [0.0]", None),
    ("slice_bounds_past_int64", "assert em.arange(5)[-2**70:2**70:2].numpy().tolist() == [0, 2, 4]", None),
    ("slice_string_bound", "em.zeros(3)['a':]", "IndexOutOfRange"),
]

ARITH_CASES = [
    # Integer division is only reachable through _C (Tensor division is true division), but the
    # kernel must still never trap.
    ("int64_min_div_minus_one",
     ("a = em.tensor([-2**63] * 5000); b = em.tensor([-1] * 5000)\n"
      "r = np.asarray(_C.binary(3, a.storage, a.layout, b.storage, b.layout).numpy())\n"
      "assert (r == -2**63).all(), r[:4]"), None),
    ("int_div_by_zero",
     ("for dt in (em.int64, em.uint32, em.uint8):\n"
      "    a = em.tensor([7, 5], dtype=dt); b = em.tensor([0, 0], dtype=dt)\n"
      "    _C.binary(3, a.storage, a.layout, b.storage, b.layout)"), None),
    ("nan_inf_to_ints",
     ("x = em.tensor(np.array([np.nan, np.inf, -np.inf, 1e300, -1e300] * 4000))\n"
      "for dt in (em.int64, em.uint32, em.uint8):\n"
      "    assert x.to_dtype(dt).shape == (20000,)\n"
      "    assert x.to_dtype(em.float16).to_dtype(dt).shape == (20000,)\n"
      "    assert x.to_dtype(em.bfloat16).to_dtype(dt).shape == (20000,)"), None),
    ("int64_min_unary", "a = em.tensor([-2**63])\nfor t in (a.neg(), a.abs(), a.sign(), a.sqr(), a.affine(-1, 0)): t.numpy()",
     None),
]

IO_CASES = [
    # The bad shape used to load (np.prod wrapped to 0), and using the tensor read far out of bounds.
    ("safetensors_wrapping_shape",
     ("import json, struct, tempfile, os\n"
      "p = os.path.join(tempfile.mkdtemp(), 'x.st')\n"
      "h = json.dumps({'a': {'dtype': 'F32', 'shape': [2**32, 2**32], 'data_offsets': [0, 0]}}).encode()\n"
      "open(p, 'wb').write(struct.pack('<Q', len(h)) + h)\n"
      "em.load_safetensors(p)['a'].exp()"), "EmberError"),
    ("custom_op_zero_size_huge_shape",
     ("class Op(em.CustomOp1):\n"
      "    name = 'garbage'\n"
      "    def cpu_fwd(self, s, l): return em.CpuStorage.empty(0, em.float32), (2**64, 2**64, 0)\n"
      "em.ones(3).apply_op1(Op())"), "ShapeError"),
]

# DLPack producers are read, not trusted: a capsule with a bad shape or no data must not be imported.
_FAKE_DL = (
    "import ctypes\nfrom ember import interop as I\n"
    "new = ctypes.pythonapi.PyCapsule_New\nnew.restype = ctypes.py_object\n"
    "new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]\n"
    "def fake(ndim, dims, data=None):\n"
    "    m = I._DLManaged(); m.dl_tensor.device = I._DLDevice(1, 0); m.dl_tensor.ndim = ndim\n"
    "    shp = (ctypes.c_int64 * max(len(dims), 1))(*dims)\n"
    "    m.dl_tensor.shape = ctypes.cast(shp, ctypes.POINTER(ctypes.c_int64))\n"
    "    m.dl_tensor.dtype = I._DLDataType(2, 32, 1); m.dl_tensor.data = data\n"
    "    cap = new(ctypes.addressof(m), b'dltensor', None)\n"
    "    keep.extend([m, shp])\n"
    "    return type('P', (), {'__dlpack__': lambda self, **k: cap, '__dlpack_device__': lambda self: (1, 0)})()\n"
    "keep = []\n"
)
DLPACK_CASES = [
    ("dlpack_null_data", _FAKE_DL + "em.from_dlpack(fake(1, [1000])).sum()", "EmberError"),
    ("dlpack_negative_dim", _FAKE_DL + "em.from_dlpack(fake(2, [3, -4]))", "EmberError"),
    ("dlpack_negative_ndim", _FAKE_DL + "em.from_dlpack(fake(-3, []))", "EmberError"),
    ("dlpack_no_dlpack", "em.from_dlpack(5)", "EmberError"),
    ("dlpack_complex", "em.from_dlpack(np.zeros(3, dtype=np.complex64))", "DTypeError"),
    ("dlpack_device_not_cpu",
     "em.from_dlpack(type('X', (), {'__dlpack__': lambda s, **k: 5, '__dlpack_device__': lambda s: (2, 7)})())",
     "DeviceError"),
    ("dlpack_not_a_capsule",
     "em.from_dlpack(type('X', (), {'__dlpack__': lambda s, **k: 5, '__dlpack_device__': lambda s: (1, 0)})())",
     "EmberError"),
    ("dlpack_reversed_numpy_ok", "assert em.from_dlpack(np.arange(6.0)[::-1]).numpy().tolist() == [5, 4, 3, 2, 1, 0]",
     None),
]


@pytest.mark.parametrize("group", ["layout", "creation", "view", "arith", "io", "dlpack"])
def test_no_crash_batches(group):
    cases = {"layout": LAYOUT_CASES, "creation": CREATION_CASES, "view": VIEW_CASES, "arith": ARITH_CASES,
             "io": IO_CASES, "dlpack": DLPACK_CASES}[group]
    run_batch(cases)


# --------------------------------------------------------------------------- in-process error checks
def raises(exc, op, fn, *args, **kwargs):
    """fn(*args) must raise exc (an EmberError subclass) with a message that starts with [op]."""
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    assert isinstance(info.value, em.EmberError), type(info.value)
    assert str(info.value).startswith(f"[{op}]"), str(info.value)
    return info.value


def test_reshape_bad_minus_ones():
    t = em.zeros(6)
    raises(em.ShapeError, "reshape", t.reshape, -1, -1)
    raises(em.ShapeError, "reshape", t.reshape, -2, -3)
    raises(em.ShapeError, "reshape", t.reshape, 4, -1)
    raises(em.ShapeError, "reshape", em.zeros(0).reshape, 0, -1)
    assert t.reshape(-1, 3).shape == (2, 3)


def test_views_out_of_range():
    t = em.zeros(2, 3)
    raises(em.IndexOutOfRange, "narrow", t.narrow, 1, 2, 5)
    raises(em.IndexOutOfRange, "narrow", t.narrow, 1, -1, 2)
    raises(em.IndexOutOfRange, "narrow", t.narrow, 5, 0, 1)
    raises(em.IndexOutOfRange, "index", t.__getitem__, 7)
    raises(em.IndexOutOfRange, "index", t.__getitem__, 2**70)
    raises(em.IndexOutOfRange, "index", t.__getitem__, (0, -2**70))
    raises(em.IndexOutOfRange, "index", t.__getitem__, (0, 0, 0))
    raises(em.IndexOutOfRange, "index", t.__getitem__, 1.5)
    raises(em.EmberError, "index", t.__getitem__, slice(None, None, -1))
    raises(em.IndexOutOfRange, "index", t.__getitem__, slice(0.5, None))
    raises(em.IndexOutOfRange, "transpose", t.transpose, 0, 5)
    raises(em.IndexOutOfRange, "squeeze", t.squeeze, 5)
    raises(em.IndexOutOfRange, "sum", t.sum, 5)


def test_permute_and_broadcast_invalid():
    t = em.zeros(2, 3)
    raises(em.errors.EmberValueError, "permute", t.permute, 0, 0)
    raises(em.ShapeError, "permute", t.permute, 0)
    raises(em.IndexOutOfRange, "permute", t.permute, 0, 2)
    raises(em.ShapeError, "broadcast_as", t.broadcast_as, 3, 3)
    raises(em.ShapeError, "broadcast_as", t.broadcast_as, 3)
    raises(em.ShapeError, "broadcast_as", em.zeros(1).broadcast_as, -1)


def test_index_ops_bad_ids():
    t = em.zeros(3, 4)
    raises(em.IndexOutOfRange, "index_select", t.index_select, em.tensor([3]), 0)
    raises(em.IndexOutOfRange, "index_select", t.index_select, em.tensor([-4]), 0)
    raises(em.IndexOutOfRange, "index_select", t.index_select, em.tensor(np.array([2**32 - 1], np.uint32)), 0)
    raises(em.DTypeError, "index_select", t.index_select, em.tensor([1.0]), 0)
    raises(em.DTypeError, "index_select", t.index_select, [0.5], 0)
    raises(em.ShapeError, "index_select", t.index_select, em.tensor([[1]]), 0)
    raises(em.IndexOutOfRange, "gather", t.gather, em.tensor([[4]]), 1)
    raises(em.IndexOutOfRange, "gather", t.gather, em.tensor([[-5]]), 1)
    raises(em.DTypeError, "gather", t.gather, em.tensor([[0.0]]), 1)
    raises(em.ShapeError, "gather", t.gather, em.tensor([[0] * 9] * 9), 1)
    src = em.ones(1, 4)
    raises(em.IndexOutOfRange, "scatter_add", t.scatter_add, em.tensor([[7, 0, 0, 0]]), src, 0)
    raises(em.IndexOutOfRange, "scatter_add", t.scatter_add, em.tensor([[-7, 0, 0, 0]]), src, 0)
    raises(em.DTypeError, "scatter_add", t.scatter_add, em.tensor([[0, 0, 0, 0]]), src.to_dtype(em.float16), 0)
    raises(em.DTypeError, "scatter_add", t.scatter_add, em.tensor([[0.0, 0, 0, 0]]), src, 0)
    raises(em.IndexOutOfRange, "index_add", t.index_add, em.tensor([3]), src, 0)
    raises(em.ShapeError, "index_add", t.index_add, em.tensor([0]), em.ones(5, 5), 0)
    # a failed scatter never touches the source tensor
    assert (t.numpy() == 0).all()


def test_matmul_zero_size_and_mismatch():
    assert (em.zeros(0, 3) @ em.zeros(3, 4)).shape == (0, 4)
    out = em.ones(3, 0) @ em.ones(0, 4)
    assert out.shape == (3, 4) and (out.numpy() == 0).all()
    assert (em.zeros(2, 0, 3) @ em.zeros(3, 5)).shape == (2, 0, 5)
    raises(em.ShapeError, "matmul", em.zeros(2, 3).matmul, em.zeros(4, 5))
    raises(em.ShapeError, "matmul", em.tensor(1.0).matmul, em.tensor(2.0))
    raises(em.DTypeError, "matmul", em.zeros(2, 3).matmul, em.zeros(3, 2, dtype=em.float16))
    raises(em.ShapeError, "matmul", em.zeros(2, 2, 3).matmul, em.zeros(3, 3, 2))


def test_cat_stack_where():
    raises(em.EmberError, "cat", em.cat, [])
    raises(em.ShapeError, "cat", em.cat, [em.zeros(2, 3), em.zeros(3)])
    raises(em.EmberTypeError, "cat", em.cat, [em.zeros(2, 3), np.zeros((2, 3))])
    raises(em.ShapeError, "cat", em.cat, [em.tensor(1.0), em.tensor(2.0)])
    raises(em.EmberError, "stack", em.stack, [])
    raises(em.ShapeError, "stack", em.stack, [em.zeros(2), em.zeros(3)])
    raises(em.DTypeError, "where", em.where, em.zeros(3), em.zeros(3), em.ones(3))
    raises(em.ShapeError, "where", em.where, em.zeros(2, dtype=em.uint8), em.zeros(3), em.ones(3))
    raises(em.EmberTypeError, "where", em.where, em.zeros(3, dtype=em.uint8), 1, "2")
    assert em.where([1, 0, 1], em.zeros(3), em.ones(3)).numpy().tolist() == [0, 1, 0]


def test_mismatched_dtypes():
    raises(em.EmberTypeError, "add", em.zeros(3).__add__, {"a": 1})  # mixed dtypes promote (test_promotion.py)
    raises(em.EmberTypeError, "lt", em.zeros(3).lt, None)
    raises(em.DTypeError, "sqrt", em.tensor([4]).sqrt)
    raises(em.DTypeError, "mean", em.zeros(3, dtype=em.int64).mean)
    raises(em.ShapeError, "max", em.zeros(0).max)
    raises(em.DTypeError, "rand", em.rand, 3, dtype=em.int64)
    raises(em.DeviceError, "to_device", em.zeros(2).to_device, "metal:3")  # no such device, emulated or not


@pytest.mark.parametrize("data", [[[1, 2], [3]], [object()], [1 + 2j], ["a"], "abc", b"abc", None, {1: 2}, [2**70],
                                  np.zeros(3, dtype=[("a", "f4")]), np.zeros(3, dtype="datetime64[s]")],
                         ids=["ragged", "object", "complex", "str-list", "str", "bytes", "none", "dict", "bigint",
                              "struct", "datetime"])
def test_tensor_of_unsupported_data(data):
    raises(em.DTypeError, "tensor", em.tensor, data)


SAFETENSORS_BAD = {
    "bad-json": (None, b"{not json"),
    "not-utf8": (None, b"\xff\xfe"),
    "not-object": ([1, 2], None),
    "entry-not-dict": ({"a": "x"}, None),
    "no-shape": ({"a": {"dtype": "F32", "data_offsets": [0, 4]}}, None),
    "offsets-beyond": ({"a": {"dtype": "F32", "shape": [16], "data_offsets": [0, 64]}}, None),
    "offsets-negative": ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}}, None),
    "offsets-float": ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0.0, 4.0]}}, None),
    "offsets-str": ({"a": {"dtype": "F32", "shape": [1], "data_offsets": ["0", "4"]}}, None),
    "offsets-three": ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}}, None),
    "shape-negative": ({"a": {"dtype": "F32", "shape": [-1, -4], "data_offsets": [0, 16]}}, None),
    "shape-negative-zero": ({"a": {"dtype": "F32", "shape": [-1, 0], "data_offsets": [0, 0]}}, None),
    "shape-wraps": ({"a": {"dtype": "F32", "shape": [2**32, 2**32], "data_offsets": [0, 0]}}, None),
    "shape-huge": ({"a": {"dtype": "F32", "shape": [2**70], "data_offsets": [0, 4]}}, None),
    "shape-float": ({"a": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}}, None),
    "shape-bool": ({"a": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, None),
    "shape-inf": (None, b'{"a": {"dtype": "F32", "shape": [Infinity], "data_offsets": [0, 4]}}'),
    "dtype-list": ({"a": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}}, None),
    "dtype-unknown": ({"a": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}, None),
    "deep-nesting": (None, b"[" * 100000 + b"]" * 100000),
}


@pytest.mark.parametrize("case", sorted(SAFETENSORS_BAD))
def test_safetensors_corrupt_header(tmp_path, case):
    header, raw = SAFETENSORS_BAD[case]
    text = raw if raw is not None else json.dumps(header).encode()
    p = tmp_path / "bad.safetensors"
    p.write_bytes(struct.pack("<Q", len(text)) + text + b"\0" * 16)
    raises(em.EmberError, "load_safetensors", em.load_safetensors, p)


def test_safetensors_truncated(tmp_path):
    p = tmp_path / "t.safetensors"
    em.save_safetensors({"a": em.arange(100.0)}, p)
    full = p.read_bytes()
    for cut in (0, 3, 8, 20, len(full) - 10):
        p.write_bytes(full[:cut])
        raises(em.EmberError, "load_safetensors", em.load_safetensors, p)
    p.write_bytes(struct.pack("<Q", 2**63) + b"{}")  # header length beyond the file (and the sanity cap)
    raises(em.EmberError, "load_safetensors", em.load_safetensors, p)
    p.write_bytes(full)
    assert em.load_safetensors(p)["a"].numpy().tolist() == list(range(100))


# --------------------------------------------------------------------------- custom ops
def _op(ret, name="garbage"):
    class Op(em.CustomOp1):
        def cpu_fwd(self, s, l):
            return ret(s, l)

    Op.name = name
    return Op()


@pytest.mark.parametrize("ret,exc", [
    (lambda s, l: None, em.EmberError),
    (lambda s, l: 5, em.EmberError),
    (lambda s, l: (s, (3,), 1), em.EmberError),
    (lambda s, l: (s.as_numpy(l), (3,)), em.EmberError),
    (lambda s, l: (s, (3,)), em.EmberError),  # aliases the input
    (lambda s, l: (em.CpuStorage.empty(3, em.float32), (-1, -3)), em.ShapeError),
    (lambda s, l: (em.CpuStorage.empty(0, em.float32), (-1, 0)), em.ShapeError),
    (lambda s, l: (em.CpuStorage.empty(3, em.float32), (2**70,)), em.ShapeError),
    (lambda s, l: (em.CpuStorage.empty(0, em.float32), (2**32, 2**32)), em.ShapeError),
    (lambda s, l: (em.CpuStorage.empty(0, em.float32), (2**64, 2**64, 0)), em.ShapeError),
    (lambda s, l: (em.CpuStorage.empty(3, em.float32), (3.5,)), em.ShapeError),
    (lambda s, l: (em.CpuStorage.empty(3, em.float32), "abc"), em.ShapeError),
    (lambda s, l: (em.CpuStorage.empty(3, em.float32), None), em.ShapeError),
    (lambda s, l: (em.CpuStorage.empty(3, em.float64), (3,)), em.DTypeError),
    (lambda s, l: (em.CpuStorage.empty(2, em.float32), (3,)), em.ShapeError),
    (lambda s, l: (em.CpuStorage.from_numpy(s.as_numpy(em.Layout([100], [1], 0))), (100,)), em.IndexOutOfRange),
])
@pytest.mark.cpu_only
def test_custom_op_garbage_forward(ret, exc):
    e = raises(exc, "garbage", lambda: em.ones(3).apply_op1(_op(ret))) if exc is not em.IndexOutOfRange else None
    if e is None:  # the read outside the storage is refused by as_numpy itself
        raises(em.IndexOutOfRange, "as_numpy", lambda: em.ones(3).apply_op1(_op(ret)))


@pytest.mark.cpu_only
def test_custom_bwd_raising_leaves_state_consistent():
    class Boom(em.CustomOp1):
        name = "boom"

        def cpu_fwd(self, s, l):
            return em.CpuStorage.from_numpy(np.array(s.as_numpy(l)) * 2), l.shape

        def bwd(self, arg, res, grad):
            raise ZeroDivisionError("boom")

    class Garbage(Boom):
        name = "garbage_bwd"

        def bwd(self, arg, res, grad):
            return 5

    v = em.Var([1.0, 2.0])
    w = em.Var([3.0, 4.0])
    before = v.numpy().copy()
    y = (v.apply_op1(Boom()) + w * w).sum()
    for _ in range(2):  # the same graph fails the same way twice: nothing half-updated in between
        with pytest.raises(ZeroDivisionError):
            y.backward()
    assert em.is_grad_enabled()  # the walk's no-grad mode was restored
    raises(em.EmberError, "garbage_bwd", lambda: v.apply_op1(Garbage()).sum().backward())
    assert (v.numpy() == before).all()
    gs = (w * w).sum().backward()
    assert gs[w].numpy().tolist() == [6.0, 8.0] and v not in gs
    gs = (v * 3).sum().backward()
    assert gs[v].numpy().tolist() == [3.0, 3.0]


def test_wrong_argument_types():
    gs = em.GradStore()
    raises(em.EmberError, "GradStore", gs.insert, 5, 6)
    raises(em.EmberError, "GradStore", gs.insert, em.ones(1), 6)
    raises(em.EmberError, "GradStore", gs.extend, 5)
    raises(em.EmberError, "GradStore", gs.get, "w")
    assert len(gs) == 0
    t = em.zeros(3)
    t.slice_set([1.0], 0, 1)  # a list source is converted, like Var.set
    assert t.numpy().tolist() == [0.0, 1.0, 0.0]
    raises(em.EmberError, "apply_op1", em.ones(3).apply_op1, 5)


@pytest.mark.cpu_only(reason="DLPack export of host memory")
def test_dlpack_consumer_error_survives_our_deleter():
    # numpy cannot hold bfloat16: it calls our deleter while its own error is pending. That error
    # must reach the caller (it used to be swallowed, giving SystemError), and nothing may leak.
    import gc

    from ember import interop

    t = em.arange(6.0, dtype=em.bfloat16)
    n = len(interop._LIVE)
    with pytest.raises(Exception) as info:
        np.from_dlpack(t)
    assert not isinstance(info.value, SystemError), repr(info.value)
    class Producer:  # hands numpy an unversioned capsule that stays unconsumed
        def __init__(self, cap):
            self.cap = cap

        def __dlpack__(self, **kwargs):
            return self.cap

        def __dlpack_device__(self):
            return (1, 0)

    producer = Producer(t.__dlpack__())
    with pytest.raises(Exception) as info:
        np.from_dlpack(producer)
    assert not isinstance(info.value, SystemError), repr(info.value)
    del producer, info  # the capsule's destructor releases the export
    gc.collect()
    assert len(interop._LIVE) == n
    assert t.numpy().tolist() == [0, 1, 2, 3, 4, 5]


# --------------------------------------------------------------------------- threads
@pytest.mark.cpu_only
def test_set_num_threads_extremes():
    before = em.get_num_threads()
    try:
        for n in (1000, 1, 3):
            em.set_num_threads(n)
            assert em.get_num_threads() == n
            assert em.ones(300_000).sum().item() == 300_000
        # absurd counts are refused before any thread starts, and the pool keeps its size (no int
        # overflow, no thousands of threads spawned then failing)
        for n in (0, -1, 1025, 10**6, 2**31 - 1, 2**40, -2**40, 2**64):
            with pytest.raises(em.EmberValueError, match=r"^\[set_num_threads\] n must be between 1 and 1024"):
                em.set_num_threads(n)
            assert em.get_num_threads() == 3
            assert em.ones(300_000).sum().item() == 300_000
    finally:
        em.set_num_threads(before)


_THREADS_CHILD = r'''
import threading, time, sys
import numpy as np
import ember as em
import ember.nn.ops as F

class Nested(em.CustomOp1):
    """A forward that itself runs parallel ember ops, from many Python threads at once."""
    name = "nested"
    def cpu_fwd(self, s, l):
        x = em.rand(100_000).exp().sum().item()
        return em.CpuStorage.from_numpy(np.array(s.as_numpy(l)) + x), l.shape

errors, stop = [], threading.Event()

def work(k):
    try:
        for i in range(6):
            a, b = em.rand(64, 64), em.rand(64, 300)
            assert (a @ b).shape == (64, 300)
            assert em.rand(200_000).apply_op1(Nested()).sum().item() > 0
            v = em.Var(em.rand(4, 16, 8))
            F.sdpa(v, v, v, causal=True).sum().backward()
            F.softmax_last_dim(em.rand(32, 500)).sum().item()
            try:
                em.zeros(3).narrow(0, 2, 5)
            except em.EmberError:
                pass
    except Exception as e:
        errors.append(repr(e))

def resize():
    # resizing the pool while the others compute must neither deadlock nor lose work
    for n in [1, 4, 0, 2, -1, 8, 2]:
        if stop.is_set():
            return
        em.set_num_threads(n)
        time.sleep(0.02)

ts = [threading.Thread(target=work, args=(k,)) for k in range(6)] + [threading.Thread(target=resize)]
for t in ts: t.start()
for t in ts[:-1]: t.join()
stop.set(); ts[-1].join()
assert not errors, errors
print("THREADS-OK")
'''


def test_threads_concurrent_nested_no_crash_no_hang():
    env = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""), EMBER_NUM_THREADS="4")
    try:
        r = subprocess.run([sys.executable, "-c", _THREADS_CHILD], capture_output=True, text=True, timeout=90,
                           env=env, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("ember ops from several Python threads (with pool resizes) hung")
    assert r.returncode == 0 and "THREADS-OK" in r.stdout, (r.returncode, r.stdout[-1000:], r.stderr[-2000:])


def test_threads_in_process_share_results():
    # Same ops from several threads agree with a single-threaded run (no cross-talk in the pool).
    em.manual_seed(0)
    xs = [em.rand(300, 300) for _ in range(4)]
    want = [(x @ x).sum(0).numpy() for x in xs]
    got, errors = [None] * 4, []

    def run(i):
        try:
            for _ in range(5):
                got[i] = (xs[i] @ xs[i]).sum(0).numpy()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not any(t.is_alive() for t in ts), "threads hung"
    assert not errors, errors
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5)


@pytest.mark.cpu_only
def test_numpy_views_stay_in_bounds():
    # as_numpy never exposes memory past the storage, whatever the layout says.
    s = em.CpuStorage.empty(6, em.float32)
    for layout in (em.Layout([7], [1], 0), em.Layout([3], [3], 0), em.Layout([2, 3], [3, 1], 1),
                   em.Layout([6], [1], -1), em.Layout([2], [-4], 0)):
        raises(em.IndexOutOfRange, "as_numpy", s.as_numpy, layout)
    assert s.as_numpy(em.Layout([2, 3], [1, 2], 0)).shape == (2, 3)
    assert math.prod(s.as_numpy(em.Layout([0, 10**6], [10**6, 1], 10**9)).shape) == 0
