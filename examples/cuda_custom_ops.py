"""Example: CUDA custom ops from Python with em.cuda.Kernel, forward and backward both CUDA kernels: fused_mul_add
(a * b + c, as in PyTorch's custom-op tutorial) and a fused matmul + bias + ReLU (shared-memory tiles, as in Burn's
example), each with a numpy twin for the CPU, checked by check_op and gradcheck. Runs anywhere with EMBER_CUDA=emulate."""
import numpy as np

import ember as em

# Each source is written once for `scalar_t` and made into a float and a double version: em.cuda.Kernel
# launches plain (non-template) kernels, and a pointer's spelled type lets ember check the storage's dtype.
MUL_ADD = r"""
// view: the shape (ndim values), then for each operand its strides (ndim values) and its start offset.
__global__ void mul_add_fwd(const scalar_t* a, const scalar_t* b, const scalar_t* c, const long long* view,
                            scalar_t* out, int ndim, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int w = ndim + 1;  // one operand's row of the table
  long long oa = view[ndim + ndim], ob = view[ndim + w + ndim], oc = view[ndim + 2 * w + ndim], rem = i;
  for (int d = ndim - 1; d >= 0; --d) {
    const long long k = rem % view[d];
    rem /= view[d];
    oa += k * view[ndim + d];
    ob += k * view[ndim + w + d];
    oc += k * view[ndim + 2 * w + d];
  }
  out[i] = a[oa] * b[ob] + c[oc];
}

// One pass for all three gradients: da = g * b, db = g * a, dc = g (the table holds a's, b's and g's views).
__global__ void mul_add_bwd(const scalar_t* a, const scalar_t* b, const scalar_t* g, const long long* view,
                            scalar_t* da, scalar_t* db, scalar_t* dc, int ndim, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int w = ndim + 1;
  long long oa = view[ndim + ndim], ob = view[ndim + w + ndim], og = view[ndim + 2 * w + ndim], rem = i;
  for (int d = ndim - 1; d >= 0; --d) {
    const long long k = rem % view[d];
    rem /= view[d];
    oa += k * view[ndim + d];
    ob += k * view[ndim + w + d];
    og += k * view[ndim + 2 * w + d];
  }
  const scalar_t gi = g[og];
  da[i] = gi * b[ob];
  db[i] = gi * a[oa];
  dc[i] = gi;
}
"""

TILE = 16
LINEAR_RELU = r"""
#define TILE 16
// y = relu(x @ w + bias) for x (m, k) and w (k, n) read through their strides and offsets; y is (m, n) dense.
// A block computes a TILE x TILE tile of y: each step stages a tile of x and of w in shared memory.
__global__ void linear_relu_fwd(const scalar_t* x, const scalar_t* w, const scalar_t* bias, scalar_t* y,
                                long long m, long long n, long long k,
                                long long sx0, long long sx1, long long ox, long long sw0, long long sw1, long long ow,
                                long long sb, long long ob) {
  __shared__ scalar_t tx[TILE][TILE];
  __shared__ scalar_t tw[TILE][TILE + 1];  // padded: the inner loop reads a column
  const int c = threadIdx.x, r = threadIdx.y;
  const long long row = (long long)blockIdx.y * TILE + r, col = (long long)blockIdx.x * TILE + c;
  scalar_t acc = 0;
  for (long long k0 = 0; k0 < k; k0 += TILE) {
    tx[r][c] = (row < m && k0 + c < k) ? x[ox + row * sx0 + (k0 + c) * sx1] : scalar_t(0);
    tw[r][c] = (k0 + r < k && col < n) ? w[ow + (k0 + r) * sw0 + col * sw1] : scalar_t(0);
    __syncthreads();  // the tiles are complete before anyone reads them
    for (int kk = 0; kk < TILE; ++kk) acc += tx[r][kk] * tw[kk][c];
    __syncthreads();  // everyone is done with them before the next step overwrites them
  }
  if (row < m && col < n) {
    acc += bias[ob + col * sb];
    y[row * n + col] = acc < scalar_t(0) ? scalar_t(0) : acc;  // relu (a NaN stays NaN, as in torch)
  }
}

// gz = g where y > 0, else 0: the gradient through the relu, dense (m, n); g and y through their strides.
__global__ void relu_grad(const scalar_t* g, const scalar_t* y, scalar_t* gz, long long m, long long n,
                          long long sg0, long long sg1, long long og, long long sy0, long long sy1, long long oy) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m * n) return;
  const long long row = i / n, col = i % n;
  gz[i] = y[oy + row * sy0 + col * sy1] > scalar_t(0) ? g[og + row * sg0 + col * sg1] : scalar_t(0);
}

// c = a @ b for a (m, k) and b (k, n) through their strides (so a transpose is a stride swap), c dense:
// the backward's dx = gz @ w^T and dw = x^T @ gz. The same tiling as the forward, without the epilogue.
__global__ void matmul(const scalar_t* a, const scalar_t* b, scalar_t* c, long long m, long long n, long long k,
                       long long sa0, long long sa1, long long oa, long long sb0, long long sb1, long long ob) {
  __shared__ scalar_t ta[TILE][TILE];
  __shared__ scalar_t tb[TILE][TILE + 1];
  const int tc = threadIdx.x, r = threadIdx.y;
  const long long row = (long long)blockIdx.y * TILE + r, col = (long long)blockIdx.x * TILE + tc;
  scalar_t acc = 0;
  for (long long k0 = 0; k0 < k; k0 += TILE) {
    ta[r][tc] = (row < m && k0 + tc < k) ? a[oa + row * sa0 + (k0 + tc) * sa1] : scalar_t(0);
    tb[r][tc] = (k0 + r < k && col < n) ? b[ob + (k0 + r) * sb0 + col * sb1] : scalar_t(0);
    __syncthreads();
    for (int kk = 0; kk < TILE; ++kk) acc += ta[r][kk] * tb[kk][tc];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = acc;
}

// db[j] = sum over rows of gz[:, j]: a block per column, its threads' partial sums reduced in shared memory.
__global__ void column_sum(const scalar_t* gz, scalar_t* db, long long m, long long n) {
  __shared__ scalar_t part[256];
  const long long col = blockIdx.x;
  scalar_t s = 0;
  for (long long row = threadIdx.x; row < m; row += blockDim.x) s += gz[row * n + col];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[col] = part[0];
}
"""

_C_TYPES = {em.float32: "float", em.float64: "double"}
_kernels = {}


def kernel(source, name, dtype):
    """The em.cuda.Kernel `name` of `source` for dtype (float or double), made once; it compiles at its first call."""
    key = (name, dtype)
    if key not in _kernels:
        _kernels[key] = em.cuda.Kernel(source.replace("scalar_t", _C_TYPES[dtype]), name)
    return _kernels[key]


def float_dtype(op, *storages):
    """The one dtype of the operands, float32 or float64 (where the device holds it)."""
    dts = {s.dtype for s in storages}
    if len(dts) != 1:
        raise em.DTypeError(f"[{op}] the operands must share a dtype, got {sorted(d.name for d in dts)}")
    dt = dts.pop()
    if dt not in _C_TYPES:
        raise em.DTypeError(f"[{op}] takes float32 or float64, got {dt.name}")
    return dt


def view_table(device, shape, *layouts):
    """shape, then each layout's strides and start offset, as an int64 storage on the device for a kernel to read."""
    rows = [list(shape)] + [list(lay.stride) + [lay.start_offset] for lay in layouts]
    return em.tensor(np.array([v for row in rows for v in row], np.int64), device=device).storage


def blocks(n, per_block=256):
    return max(1, (n + per_block - 1) // per_block)


# ----------------------------------------------------------------------------- fused_mul_add: a * b + c
class MulAddGrad(em.CustomOp):
    """The backward of fused_mul_add as one op with three outputs (da, db, dc), a CUDA kernel on cuda."""

    name = "fused_mul_add_grad"

    def cpu_fwd(self, inputs):
        (sa, la), (sb, lb), (sg, lg) = inputs
        float_dtype(self.name, sa, sb, sg)
        a, b, g = sa.as_numpy(la), sb.as_numpy(lb), sg.as_numpy(lg)
        return [(em.CpuStorage.from_numpy(np.ascontiguousarray(v)), la.shape) for v in (g * b, g * a, g)]

    def cuda_fwd(self, inputs):
        (sa, la), (sb, lb), (sg, lg) = inputs
        dt = float_dtype(self.name, sa, sb, sg)
        n = la.numel()
        outs = [em.CudaStorage.empty(n, dt, device=sa.device) for _ in range(3)]
        kernel(MUL_ADD, "mul_add_bwd", dt)(
            inputs=[sa, sb, sg, view_table(sa.device, la.shape, la, lb, lg)], outputs=outs,
            scalars=[np.int32(len(la.shape)), np.int64(n)], grid=blocks(n), block=256)
        return [(o, la.shape) for o in outs]


class FusedMulAdd(em.CustomOp3):
    """out = a * b + c in one pass over the three operands (same shape, any layout, float32 or float64)."""

    name = "fused_mul_add"

    def check(self, la, lb, lc):
        if not la.shape == lb.shape == lc.shape:
            raise em.ShapeError(f"[{self.name}] a, b and c must have one shape, got {la.shape}, {lb.shape}, "
                                f"{lc.shape}")

    def cpu_fwd(self, sa, la, sb, lb, sc, lc):
        self.check(la, lb, lc)
        float_dtype(self.name, sa, sb, sc)
        out = sa.as_numpy(la) * sb.as_numpy(lb) + sc.as_numpy(lc)
        return em.CpuStorage.from_numpy(np.ascontiguousarray(out)), la.shape

    def cuda_fwd(self, sa, la, sb, lb, sc, lc):
        self.check(la, lb, lc)
        dt = float_dtype(self.name, sa, sb, sc)
        n = la.numel()
        out = em.CudaStorage.empty(n, dt, device=sa.device)
        kernel(MUL_ADD, "mul_add_fwd", dt)(
            inputs=[sa, sb, sc, view_table(sa.device, la.shape, la, lb, lc)], outputs=[out],
            scalars=[np.int32(len(la.shape)), np.int64(n)], grid=blocks(n), block=256)
        return out, la.shape

    def bwd(self, a, b, c, res, grad_res):
        return em.apply_op(MulAddGrad(), a, b, grad_res)


def fused_mul_add(a, b, c):
    """a * b + c, one kernel forward and one backward."""
    return a.apply_op3(b, c, FusedMulAdd())


# ----------------------------------------------------------------------------- linear_relu: relu(x @ w + b)
class LinearReluGrad(em.CustomOp):
    """dx, dw, db of relu(x @ w + b) from (x, w, y, g): relu's mask, two tiled matmuls and a column sum."""

    name = "linear_relu_grad"

    def cpu_fwd(self, inputs):
        (sx, lx), (sw, lw), (sy, ly), (sg, lg) = inputs
        float_dtype(self.name, sx, sw, sy, sg)
        x, w, y, g = (s.as_numpy(lay) for s, lay in inputs)
        gz = np.where(y > 0, g, 0).astype(x.dtype)
        return [(em.CpuStorage.from_numpy(np.ascontiguousarray(v)), v.shape)
                for v in (gz @ w.T, x.T @ gz, gz.sum(0))]

    def cuda_fwd(self, inputs):
        (sx, lx), (sw, lw), (sy, ly), (sg, lg) = inputs
        dt = float_dtype(self.name, sx, sw, sy, sg)
        dev = sx.device
        (m, k), n = lx.shape, lw.shape[1]
        gz = em.CudaStorage.empty(m * n, dt, device=dev)
        kernel(LINEAR_RELU, "relu_grad", dt)(
            inputs=[sg, sy], outputs=[gz],
            scalars=[np.int64(v) for v in (m, n, *lg.stride, lg.start_offset, *ly.stride, ly.start_offset)],
            grid=blocks(m * n), block=256)
        dx, dw, db = (em.CudaStorage.empty(size, dt, device=dev) for size in (m * k, k * n, n))
        mm = kernel(LINEAR_RELU, "matmul", dt)
        tiles = lambda rows, cols: ((cols + TILE - 1) // TILE, (rows + TILE - 1) // TILE)  # noqa: E731
        # dx (m, k) = gz (m, n) @ w^T (n, k): w's strides swapped
        mm(inputs=[gz, sw], outputs=[dx], grid=tiles(m, k), block=(TILE, TILE),
           scalars=[np.int64(v) for v in (m, k, n, n, 1, 0, lw.stride[1], lw.stride[0], lw.start_offset)])
        # dw (k, n) = x^T (k, m) @ gz (m, n)
        mm(inputs=[sx, gz], outputs=[dw], grid=tiles(k, n), block=(TILE, TILE),
           scalars=[np.int64(v) for v in (k, n, m, lx.stride[1], lx.stride[0], lx.start_offset, n, 1, 0)])
        kernel(LINEAR_RELU, "column_sum", dt)(inputs=[gz], outputs=[db], scalars=[np.int64(m), np.int64(n)],
                                              grid=max(n, 1), block=256)
        return [(dx, (m, k)), (dw, (k, n)), (db, (n,))]


class LinearRelu(em.CustomOp3):
    """relu(x @ w + b) for x (m, k), w (k, n) and b (n,) in one kernel: the matmul's epilogue adds the bias
    and applies the relu, so the (m, n) pre-activation is never written."""

    name = "linear_relu"

    def check(self, lx, lw, lb):
        if len(lx.shape) != 2 or len(lw.shape) != 2 or lx.shape[1] != lw.shape[0] or lb.shape != (lw.shape[1],):
            raise em.ShapeError(f"[{self.name}] expected x (m, k), w (k, n) and b (n,), got {lx.shape}, "
                                f"{lw.shape} and {lb.shape}")

    def cpu_fwd(self, sx, lx, sw, lw, sb, lb):
        self.check(lx, lw, lb)
        float_dtype(self.name, sx, sw, sb)
        y = np.maximum(sx.as_numpy(lx) @ sw.as_numpy(lw) + sb.as_numpy(lb), 0)
        return em.CpuStorage.from_numpy(np.ascontiguousarray(y)), y.shape

    def cuda_fwd(self, sx, lx, sw, lw, sb, lb):
        self.check(lx, lw, lb)
        dt = float_dtype(self.name, sx, sw, sb)
        (m, k), n = lx.shape, lw.shape[1]
        y = em.CudaStorage.empty(m * n, dt, device=sx.device)
        kernel(LINEAR_RELU, "linear_relu_fwd", dt)(
            inputs=[sx, sw, sb], outputs=[y],
            scalars=[np.int64(v) for v in (m, n, k, *lx.stride, lx.start_offset, *lw.stride, lw.start_offset,
                                           lb.stride[0], lb.start_offset)],
            grid=((n + TILE - 1) // TILE, (m + TILE - 1) // TILE), block=(TILE, TILE))
        return y, (m, n)

    def bwd(self, x, w, b, res, grad_res):
        dx, dw, db = em.apply_op(LinearReluGrad(), x, w, res, grad_res)
        return dx, dw, db


def linear_relu(x, w, b):
    """relu(x @ w + b), one tiled kernel forward, kernels backward."""
    return x.apply_op3(w, b, LinearRelu())


# ----------------------------------------------------------------------------- checks
def holds_float64(device):
    """Whether the device holds float64 (the CPU does; a GPU backend may not)."""
    device = em.Device(device) if isinstance(device, str) else device
    return em._C.device_supports(device.kind, device.index, em.float64.code)


def gradcheck_on(device, fn, arrays):
    """em.testing.gradcheck of fn on `device`, the loss read on the CPU (to() is differentiable). In float64 where
    the device holds it; else the float64 inputs go to the device as float32, with a step and tolerances for it."""
    if holds_float64(device):
        return em.testing.gradcheck(lambda *xs: fn(*xs).to("cpu"), [em.tensor(v, device=device) for v in arrays])
    return em.testing.gradcheck(lambda *xs: fn(*(v.to(device, em.float32) for v in xs)).to("cpu", em.float64),
                                [em.tensor(v, device="cpu") for v in arrays], eps=1e-3, atol=1e-2, rtol=1e-2)


def run(device, rng):
    a, b, c = (rng.standard_normal((3, 17)) for _ in range(3))
    x, w, bias = rng.standard_normal((37, 20)), rng.standard_normal((20, 19)), rng.standard_normal(19)
    for dt in (np.float32, np.float64) if holds_float64(device) else (np.float32,):
        # a strided b (a transposed view) and an offset c: the kernels read every layout
        ta = em.tensor(a.astype(dt), device=device)
        tb = em.tensor(np.ascontiguousarray(b.T).astype(dt), device=device).t()
        tc = em.tensor(np.stack([c, c]).astype(dt), device=device)[1]
        got = fused_mul_add(ta, tb, tc).numpy()
        np.testing.assert_allclose(got, a * b + c, rtol=1e-6 if dt == np.float32 else 1e-12, atol=1e-6)
        tx, tw = em.tensor(x.astype(dt), device=device), em.tensor(w.astype(dt), device=device)
        got = linear_relu(tx, tw, em.tensor(bias.astype(dt), device=device)).numpy()
        np.testing.assert_allclose(got, np.maximum(x @ w + bias, 0), rtol=1e-5, atol=1e-5)
    # gradients against finite differences, on the device
    gradcheck_on(device, fused_mul_add, [a, b, c])
    gradcheck_on(device, linear_relu, [x[:6, :5], w[:5, :4], bias[:4]])


def main():
    rng = np.random.default_rng(0)
    # check_op compares the CPU forwards and backwards with finite differences, strided inputs, dtypes, and
    # every other device the op has a forward for (cuda here, when it is available) with the CPU.
    cpu = lambda *shape: em.tensor(rng.standard_normal(shape).astype(np.float32), device="cpu")  # noqa: E731
    report = em.testing.check_op(FusedMulAdd(), cpu(4, 9), cpu(4, 9), cpu(4, 9))
    report2 = em.testing.check_op(LinearRelu(), cpu(21, 18), cpu(18, 17), cpu(17))
    run(em.cpu, rng)
    print("fused_mul_add and linear_relu on cpu: ok")
    if em.cuda_is_available():  # a GPU, or anywhere with EMBER_CUDA=emulate
        assert report.devices.get("cuda:0") == "agrees with cpu", report
        assert report2.devices.get("cuda:0") == "agrees with cpu", report2
        run(em.Device("cuda"), rng)
        print("fused_mul_add and linear_relu on cuda: ok")


if __name__ == "__main__":
    main()
