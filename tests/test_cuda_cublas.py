"""matmul's cuBLAS call on NVIDIA GPUs, checked without a GPU: the column-major parameters ember derives for a
row-major product are run through a numpy model of cublasGemmStridedBatchedEx and must give A @ B; the library
lookup and loading errors name what is missing."""
import numpy as np
import pytest

import ember as em
from ember import _C_testing as T
from ember import cuda_kernel


def view(buf, offset, rows, cols, rs, cs):
    return np.lib.stride_tricks.as_strided(buf[offset:], (rows, cols), (rs * buf.itemsize, cs * buf.itemsize))


def cublas_model(p, batch, bufb, bufa):
    """What cublasGemmStridedBatchedEx(opF, opS, m, n, k, B, ldF, sF, A, ldS, sS, C, ldC, sC) computes, with
    column-major operands read from the flat buffers (first operand from bufb, second from bufa)."""
    m, n, k = p["m"], p["n"], p["k"]
    out = np.zeros(max(p["stride_c"] * (batch - 1) + p["ld_c"] * max(n - 1, 0) + m, 1))
    for i in range(batch):
        def operand(buf, off, op, ld, rows, cols):  # op(X) is rows x cols
            # column-major X with leading dim ld: element (r, c) at r + c * ld
            if op == 0:
                return view(buf, off, rows, cols, 1, ld)
            return view(buf, off, cols, rows, 1, ld).T
        f = operand(bufb, i * p["stride_first"], p["op_first"], p["ld_first"], m, k)
        s = operand(bufa, i * p["stride_second"], p["op_second"], p["ld_second"], k, n)
        c = f @ s
        for col in range(n):
            base = i * p["stride_c"] + col * p["ld_c"]
            out[base:base + m] = c[:, col]
    return out


LAYOUTS = ["dense", "transposed", "padded", "padded_transposed"]


def operand(rng, batch, rows, cols, layout, broadcast):
    """A row-major operand (batch, rows, cols) in a flat buffer: (buffer, (row, col, batch) strides, values)."""
    pad = 3 if layout.startswith("padded") else 0
    nb = 1 if broadcast else batch
    if "transposed" in layout:
        ld = rows + pad
        size = nb * cols * ld
        rs, cs, bs = 1, ld, 0 if broadcast else cols * ld
    else:
        ld = cols + pad
        size = nb * rows * ld
        rs, cs, bs = ld, 1, 0 if broadcast else rows * ld
    buf = rng.standard_normal(size + 5)
    vals = np.stack([view(buf, b * bs, rows, cols, rs, cs) for b in range(batch)])
    return buf, (rs, cs, bs), vals


@pytest.mark.parametrize("la", LAYOUTS)
@pytest.mark.parametrize("lb", LAYOUTS)
@pytest.mark.parametrize("mnk", [(5, 7, 3), (1, 9, 4), (6, 1, 2), (4, 5, 1), (1, 1, 8)])
@pytest.mark.parametrize("batch, bcast", [(1, ""), (3, ""), (3, "a"), (3, "b")])
def test_cublas_call_computes_the_row_major_product(la, lb, mnk, batch, bcast):
    m, n, k = mnk
    rng = np.random.default_rng(m * 100 + n * 10 + k)
    abuf, astr, a = operand(rng, batch, m, k, la, bcast == "a")
    bbuf, bstr, b = operand(rng, batch, k, n, lb, bcast == "b")
    p = T.cublas_plan(m, n, k, batch, list(astr), list(bstr))
    assert p is not None
    assert (p["m"], p["n"], p["k"]) == (n, m, k)  # B first: m and n swap
    c = cublas_model(p, batch, bbuf, abuf)
    got = np.stack([c[i * m * n:(i + 1) * m * n].reshape(m, n) for i in range(batch)])
    np.testing.assert_allclose(got, a @ b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("a_strides, b_strides", [
    ((0, 1, 0), (4, 1, 0)),      # A's rows broadcast (row stride 0 with 3 rows): overlapping rows
    ((8, 2, 0), (4, 1, 0)),      # A strided both ways: no unit stride
    ((4, 1, 0), (1, 0, 0)),      # B's columns broadcast
    ((4, 1, -12), (4, 1, 0)),    # a negative batch stride
])
def test_cublas_plan_refuses_layouts_it_cannot_read(a_strides, b_strides):
    assert T.cublas_plan(3, 4, 4, 2, list(a_strides), list(b_strides)) is None


def test_cublas_plan_refuses_sizes_past_int():
    assert T.cublas_plan(2**31, 4, 4, 1, [4, 1, 0], [4, 1, 0]) is None


def test_cublas_loading_errors_name_what_is_missing(monkeypatch, tmp_path):
    assert "cannot load" in em._C._cuda_cublas_check(str(tmp_path / "libcublas.so.13"))
    fake = tmp_path / "libcublas.so.13"
    fake.write_bytes(b"not a library")
    assert "cannot load" in em._C._cuda_cublas_check(str(fake))
    monkeypatch.setattr(cuda_kernel, "_CUBLAS_PACKAGES", ("ember-no-such-package",))
    monkeypatch.setitem(cuda_kernel._found, "cublas", None)
    with pytest.raises(em.EmberValueError, match=r"\[cuda\] cuBLAS is not installed: pip install nvidia-cublas"):
        em.cuda.cublas_library()
