// The ThreadSanitizer job's runner: ember's reduction kernels (metal/reduce.metal) under the MSL emulator,
// built with -fsanitize=thread together with the emulator, must run clean and match a reference; a
// fixture without its barriers (`race`) must make TSan report the data race; a kernel's out-of-bounds
// access on a fiber (`fault`) must come back as an error, and the next dispatch must run.
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "error.h"
#include "metal/adapter.h"
#include "metal/embedded.h"

namespace ember::cpu {
void blas_set_num_threads(int) {}  // parallel.cpp's hook; no BLAS in this binary
bool host_has_fma() { return false; }  // dispatch.cpp's; GPU-math mode is not used here
}  // namespace ember::cpu

namespace {

using namespace ember::metal;

const char* kRace = R"(
#include <metal_stdlib>
using namespace metal;
kernel void tree_sum_nobarrier(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                               uint tid [[thread_index_in_threadgroup]], uint row [[threadgroup_position_in_grid]],
                               uint tpg [[threads_per_threadgroup]]) {
  threadgroup float shared[256];
  shared[tid] = x[row * tpg + tid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint s = tpg / 2; s > 0; s >>= 1) {  // no barrier between the steps: a read races the next write
    if (tid < s) shared[tid] += shared[tid + s];
  }
  if (tid == 0) out[row] = shared[0];
}
)";

const char* kFault = R"(
#include <metal_stdlib>
using namespace metal;
kernel void oob(device float* x [[buffer(0)]], constant uint& n [[buffer(1)]], uint i [[thread_position_in_grid]]) {
  threadgroup float s[64];
  s[i % 64] = x[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  x[i * n] = s[63 - i % 64];
}
)";

PipelineHandle pipeline(Adapter& a, const char* src, const char* label, const std::string& name) {
  return a.new_pipeline(a.new_library(src, label), name, {});
}

struct Run {
  PipelineHandle p;
  std::vector<BufferHandle> bufs;
};

void dispatch(Adapter& a, PipelineHandle p, const std::vector<BufferHandle>& bufs, const std::vector<uint32_t>& scalars,
              std::array<uint32_t, 3> grid, std::array<uint32_t, 3> group) {
  auto cb = a.new_command_buffer();
  Encoder& e = cb->compute_encoder();
  e.set_pipeline(p);
  uint32_t i = 0;
  for (; i < bufs.size(); ++i) e.set_buffer(bufs[i], 0, i);
  for (uint32_t s : scalars) e.set_bytes(&s, 4, i++);
  e.dispatch_threads({grid[0], grid[1], grid[2]}, {group[0], group[1], group[2]});
  e.end_encoding();
  cb->commit();
  cb->wait();
}

// Row sums/max/min of a (rows, cols) matrix through each reduce kernel shape: one simdgroup per row,
// a looped threadgroup per row, and thread columns over the transposed view.
int clean() {
  Adapter& a = emulator_adapter();
  const char* src = embedded_source("reduce.metal");
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  int bad = 0;
  struct Shape {
    uint32_t rows, cols, tx, ty;
    bool cols_kernel;
  };
  for (const char* op : {"sum", "max", "min"}) {
    for (const Shape& sh : {Shape{13, 100, 32, 8, false}, Shape{4, 5000, 256, 1, false}, Shape{40, 300, 32, 8, true}}) {
      const uint32_t rows = sh.rows, cols = sh.cols;
      std::vector<float> x((size_t)rows * cols);
      for (float& v : x) v = nd(rng);
      // meta: kept (rows,) with stride cols; reduced (cols,) with stride 1 (see reduce.metal)
      const std::vector<int64_t> meta = {1, 1, 0, cols, rows, rows, cols, cols, 1};
      BufferHandle in = a.new_buffer(x.data(), x.size() * 4), out = a.new_buffer(rows * 4),
                   mb = a.new_buffer(meta.data(), meta.size() * 8);
      const std::string name = std::string(sh.cols_kernel ? "reduce_cols_" : "reduce_rows_") + op + "_float32";
      PipelineHandle p = pipeline(a, src, "reduce.metal", name);
      if (sh.cols_kernel) dispatch(a, p, {in, out, mb}, {}, {rows, sh.ty, 1}, {sh.tx, sh.ty, 1});
      else dispatch(a, p, {in, out, mb}, {}, {sh.tx, rows, 1}, {sh.tx, sh.ty, 1});
      const float* got = static_cast<const float*>(a.contents(out));
      for (uint32_t r = 0; r < rows; ++r) {
        double want = op[1] == 'u' ? 0.0 : x[(size_t)r * cols];
        for (uint32_t c = 0; c < cols; ++c) {
          const double v = x[(size_t)r * cols + c];
          want = op[1] == 'u' ? want + v : (op[1] == 'a' ? std::max(want, v) : std::min(want, v));
        }
        if (std::fabs(got[r] - want) > 1e-4 * (1 + std::fabs(want)) + 1e-5 * cols) {
          std::printf("MISMATCH %s row %u: %g vs %g\n", name.c_str(), r, got[r], want);
          ++bad;
        }
      }
      std::printf("%s: %u rows x %u cols checked\n", name.c_str(), rows, cols);
      a.release(p);
      a.release(in);
      a.release(out);
      a.release(mb);
    }
  }
  return bad ? 1 : 0;
}

int race() {
  Adapter& a = emulator_adapter();
  std::vector<float> x(8 * 64, 1.0f);
  BufferHandle in = a.new_buffer(x.data(), x.size() * 4), out = a.new_buffer(8 * 4);
  PipelineHandle p = pipeline(a, kRace, "race_fixture.metal", "tree_sum_nobarrier");
  dispatch(a, p, {in, out}, {}, {8 * 64, 1, 1}, {64, 1, 1});
  std::printf("race fixture ran (its results are meaningless)\n");
  return 0;
}

int fault() {
  Adapter& a = emulator_adapter();
  std::vector<float> x(256, 1.0f);
  BufferHandle buf = a.new_buffer(x.data(), x.size() * 4);
  PipelineHandle p = pipeline(a, kFault, "fault_fixture.metal", "oob");
  try {
    dispatch(a, p, {buf}, {1000}, {256, 1, 1}, {64, 1, 1});
    std::printf("FAIL: no error for an out-of-bounds write\n");
    return 1;
  } catch (const ember::Error& e) {
    if (!std::strstr(e.what(), "out-of-bounds access to buffer(0)")) {
      std::printf("FAIL: unexpected error: %s\n", e.what());
      return 1;
    }
    std::printf("fault reported: %s\n", e.what());
  }
  dispatch(a, p, {buf}, {1}, {256, 1, 1}, {64, 1, 1});
  std::printf("the next dispatch ran\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "clean";
  try {
    return mode == "race" ? race() : mode == "fault" ? fault() : clean();
  } catch (const ember::Error& e) {
    std::printf("ember error: %s\n", e.what());
    return 2;
  }
}
