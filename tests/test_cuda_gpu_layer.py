"""CudaDevice's side of the translated kernels' launch contract (cpp/cuda/kernels.h), through the GPU layer's
Launch: a hand-written kernel in the contract's form gets its storages at their offsets, bytes by value and
uploaded to device memory, an unbound gap, threadgroup offsets, function constants as -DMSL_FC_<i> and the grid."""
import numpy as np
import pytest

import ember as em
from ember import _C_testing as T

SOURCE = r"""
struct Args { float a; unsigned int n; };
#ifndef MSL_FC_0
#define MSL_FC_0 1.0f
#endif
#ifndef MSL_FC_1
#define MSL_FC_1 false
#endif
extern "C" __global__ void scaled_reverse(const float* x, float* y, Args args, const long long* meta, float* z,
                                          unsigned int tg_a, unsigned int tg_b, unsigned int em_grid_x,
                                          unsigned int em_grid_y, unsigned int em_grid_z, unsigned int em_off_x,
                                          unsigned int em_off_y, unsigned int em_off_z, unsigned int em_group_x,
                                          unsigned int em_group_y, unsigned int em_group_z) {
  extern __shared__ char em_shared[];
  float* sa = (float*)(em_shared + tg_a);
  int* sb = (int*)(em_shared + tg_b);
  // an edge group is a launch of its own whose block is the group's real size: no thread lies past the grid
  unsigned int t = threadIdx.x, i = (blockIdx.x + em_off_x) * em_group_x + t;
  if (i >= em_grid_x || em_grid_y != 1 || em_group_y != 1) y[-1000000] = 0.0f;  // the emulator reports it
  bool live = i < args.n;
  sa[t] = live ? x[i] : 0.0f;
  sb[t] = (int)i;
  __syncthreads();
  if (!live) return;
  float v = args.a * sa[t] * MSL_FC_0 + (float)meta[1];
  y[i] = MSL_FC_1 ? -v : v;
  z[i] = (float)sb[blockDim.x - 1 - t];
}
"""
BUFFERS, VALUE_SIZE, THREADGROUP = "pp-vpp", [0, 0, 0, 8, 0, 0], [0, 1]


@pytest.fixture
def emulated(monkeypatch):
    monkeypatch.setenv("EMBER_CUDA", "emulate")


def args(a, n):
    return np.array([a], np.float32).tobytes() + np.array([n], np.uint32).tobytes()


def launch(bindings, constants, grid, group):
    tg = [(0, group * 4), (1, group * 4)]
    return T.cuda_gpu_launch(SOURCE, "scaled_reverse", BUFFERS, VALUE_SIZE, THREADGROUP, bindings, constants, tg,
                             (grid, 1, 1), (group, 1, 1))


@pytest.mark.parametrize("grid,group,n,offset", [(1000, 128, 990, 3), (64, 64, 64, 0), (7, 32, 5, 1)])
@pytest.mark.parametrize("negate", [False, True])
def test_the_contract_binds_what_launch_was_given(emulated, rng, grid, group, n, offset, negate):
    x = rng.standard_normal(grid + offset).astype(np.float32)
    meta = np.array([7, -4], np.int64)
    y, z = launch([("in", x, offset), ("inout", np.zeros(grid, np.float32)), ("skip",), ("bytes", args(2.5, n)),
                   ("bytes", meta.tobytes()), ("out", np.zeros(grid, np.float32))],
                  [(0, "float", 1.5), (1, "bool", negate)], grid, group)
    i = np.arange(grid)
    live = i < n
    want = 2.5 * x[offset:offset + grid] * 1.5 - 4
    np.testing.assert_allclose(y[live], -want[live] if negate else want[live], rtol=1e-6)
    assert np.all(y[~live] == 0)  # untouched past args.n
    # each thread read its group partner's global index from the second threadgroup array; the edge group is
    # as big as the grid's rest, as Metal's partial groups
    start = (i // group) * group
    partner = start + (np.minimum(group, grid - start) - 1 - i % group)
    np.testing.assert_array_equal(z[live], partner[live].astype(np.float32))


def test_value_parameters_must_get_their_size(emulated):
    x = np.zeros(32, np.float32)
    with pytest.raises(em.EmberError, match=r"^\[cuda\] scaled_reverse: buffer\(3\) takes 8 bytes by value; "
                                            r"the launcher bound 4$"):
        launch([("in", x), ("out", x), ("skip",), ("bytes", b"\0\0\0\0"), ("bytes", b"\0" * 16), ("out", x)],
               [], 32, 32)
    with pytest.raises(em.EmberError, match=r"buffer\(3\) is a value parameter of 8 bytes; the launcher bound a "
                                            r"storage"):
        launch([("in", x), ("out", x), ("skip",), ("in", x), ("bytes", b"\0" * 16), ("out", x)], [], 32, 32)


def test_an_unknown_kernel_names_what_the_source_defines(emulated):
    x = np.zeros(32, np.float32)
    with pytest.raises(em.EmberError, match=r"^\[cuda\] test.metal \(CUDA\) defines no kernel 'nope' \(it defines: "
                                            r"scaled_reverse\)$"):
        T.cuda_gpu_launch(SOURCE, "scaled_reverse", BUFFERS, VALUE_SIZE, THREADGROUP, [("in", x)], [], [],
                          (32, 1, 1), (32, 1, 1), function="nope")
