// Launch and the launcher helpers: binding bookkeeping, layout collapsing, dtype names for kernels.
#include "gpu/launch.h"

#include <algorithm>

namespace ember::gpu {

// F64 names kernels only CUDA has (each file's float64 variant, cuda/kernels.h): the device refuses it first
// where it has none (GpuDevice::check_dtype: Metal's own message).
const char* type_suffix(DType dt, const char*) { return dtype_name(dt); }

const char* msl_type(DType dt, const char*) {
  switch (dt) {
    case DType::F32: return "float";
    case DType::F16: return "half";
    case DType::BF16: return "bfloat";
    case DType::F64: return "double";
    case DType::I64: return "long";
    case DType::U32: return "uint";
    case DType::U8: return "uchar";
    case DType::I32: return "int";
    case DType::Bool: return "bool";
  }
  return "?";
}

uint32_t checked_u32(int64_t n, const char* op) {
  EMBER_CHECK(n >= 0 && n <= (int64_t)UINT32_MAX, Unsupported, "[", op, "] ", n,
              " elements: Metal kernels index with 32 bits (at most 2^32-1 elements)");
  return (uint32_t)n;
}

std::vector<Strided> collapse(const std::vector<const Layout*>& ls) {
  const Shape& shape = ls[0]->shape();
  const size_t k = ls.size();
  std::vector<Strided> out(k);
  for (size_t j = 0; j < k; ++j) out[j].offset = ls[j]->offset();
  // Walk from the innermost dim out, extending the current merged dim while every layout allows it.
  for (int64_t d = (int64_t)shape.size() - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    bool merge = !out[0].shape.empty();
    for (size_t j = 0; merge && j < k; ++j)
      merge = ls[j]->stride()[d] == out[j].strides.back() * out[j].shape.back();
    for (size_t j = 0; j < k; ++j) {
      if (merge) {
        out[j].shape.back() *= shape[d];
      } else {
        out[j].shape.push_back(shape[d]);
        out[j].strides.push_back(ls[j]->stride()[d]);
      }
    }
  }
  for (auto& s : out) {
    if (s.shape.empty()) s.shape.push_back(1), s.strides.push_back(0);
    std::reverse(s.shape.begin(), s.shape.end());
    std::reverse(s.strides.begin(), s.strides.end());
  }
  return out;
}

Strided collapse(const Layout& l) { return collapse(std::vector<const Layout*>{&l})[0]; }

const char* Launch::kind_() const { return kDeviceKindNames[static_cast<int>(dev_.device().kind)]; }

Launch::Launch(GpuDevice& dev, const std::string& file, std::string function)
    : Launch(dev, dev.source(file), std::move(function)) {}

Launch::Launch(GpuDevice& dev, const KernelSource& src, std::string function) : dev_(dev), src_(src) {
  d_.function = std::move(function);
}

DispatchDesc::Arg& Launch::slot() {
  EMBER_CHECK(next_ < 31, Value, "[", kind_(), "] ", d_.function, ": more than 31 buffer bindings");
  if (d_.args.size() <= next_) d_.args.resize(next_ + 1);
  return d_.args[next_++];
}

Launch& Launch::at(uint32_t index) {
  next_ = index;
  return *this;
}

Launch& Launch::buffer(const GpuStorage& s, int64_t elem_offset, bool read, bool write) {
  EMBER_CHECK(&s.gpu_device() == &dev_, Device, "[", kind_(), "] ", d_.function, ": a buffer of ", s.device().str(),
              " bound on another device");
  const size_t off = s.byte_offset() + (size_t)elem_offset * itemsize(s.dtype());
  EMBER_CHECK(elem_offset >= 0 && off <= s.byte_offset() + s.nbytes(), Index, "[", kind_(), "] ", d_.function,
              ": offset of ", elem_offset, " elements is outside the storage");
  auto& a = slot();
  a.kind = DispatchDesc::Arg::Kind::Buffer;
  a.buffer = s.buffer();
  a.offset = off;
  a.length = s.byte_offset() + s.nbytes() - off;  // the pool's slack past the storage is not the kernel's
  a.read = read;
  a.write = write;
  return *this;
}

Launch& Launch::bytes(const void* data, size_t n) {
  EMBER_CHECK(n <= 4096, Value, "[", kind_(), "] ", d_.function, ": ", n,
              " bytes by value; Metal allows 4096");
  auto& a = slot();
  a.kind = DispatchDesc::Arg::Kind::Bytes;
  a.bytes.assign(static_cast<const char*>(data), n);
  return *this;
}

Launch& Launch::array(const std::vector<int64_t>& v) {
  if (v.empty()) return scalar<int64_t>(0);
  return bytes(v.data(), v.size() * sizeof(int64_t));
}

Launch& Launch::array(const std::vector<uint32_t>& v) {
  if (v.empty()) return scalar<uint32_t>(0);
  return bytes(v.data(), v.size() * sizeof(uint32_t));
}

namespace {
FunctionConstant make_constant(uint32_t index, FunctionConstant::Type t, double v) {
  FunctionConstant c;
  c.index = index;
  c.type = t;
  c.value = v;
  return c;
}
}  // namespace

Launch& Launch::constant(uint32_t index, bool v) {
  constants_.push_back(make_constant(index, FunctionConstant::Type::Bool, v ? 1 : 0));
  return *this;
}
Launch& Launch::constant(uint32_t index, int32_t v) {
  constants_.push_back(make_constant(index, FunctionConstant::Type::Int, v));
  return *this;
}
Launch& Launch::constant(uint32_t index, uint32_t v) {
  constants_.push_back(make_constant(index, FunctionConstant::Type::UInt, v));
  return *this;
}
Launch& Launch::constant(uint32_t index, float v) {
  constants_.push_back(make_constant(index, FunctionConstant::Type::Float, v));
  return *this;
}

Launch& Launch::threadgroup_memory(size_t bytes, uint32_t index) {
  d_.threadgroup_memory.emplace_back(index, bytes);
  return *this;
}

KernelHandle Launch::resolve() {
  std::sort(constants_.begin(), constants_.end(),
            [](const FunctionConstant& a, const FunctionConstant& b) { return a.index < b.index; });
  return dev_.kernel(src_, d_.function, constants_);
}

uint32_t Launch::max_threads() { return dev_.max_threads(resolve()); }

uint32_t Launch::fit_threads(uint64_t want) {
  const uint32_t m = max_threads();
  return (uint32_t)std::clamp<uint64_t>(want / 32 * 32, 32, std::max<uint32_t>(m / 32 * 32, 32));
}

void Launch::dispatch(Dim3 grid, Dim3 group) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  d_.kernel = resolve();
  const uint64_t threads = (uint64_t)group.x * group.y * group.z;
  const uint32_t limit = dev_.max_threads(d_.kernel);
  EMBER_CHECK(threads <= limit, Value, "[", kind_(), "] ", d_.function, ": a threadgroup of ", threads,
              " threads; its pipeline allows at most ", limit, " (the launcher must size groups from max_threads())");
  d_.grid = grid;
  d_.group = group;
  dev_.encode(std::move(d_));
  d_ = DispatchDesc{};
}

void Launch::dispatch_1d(uint64_t threads, uint32_t group) {
  EMBER_CHECK(threads <= UINT32_MAX, Unsupported, "[", kind_(), "] ", d_.function, ": a grid of ", threads,
              " threads; Metal kernels index with 32 bits");
  if (threads == 0) return;  // encodes nothing (and compiles nothing)
  group = std::min<uint32_t>({group, (uint32_t)threads, max_threads()});
  dispatch(Dim3{(uint32_t)threads, 1, 1}, Dim3{std::max<uint32_t>(group, 1), 1, 1});
}

void Launch::dispatch_grid(Dim3 grid, Dim3 want) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  const uint32_t limit = max_threads();
  Dim3 g;
  g.x = std::max<uint32_t>(1, std::min({want.x, grid.x, limit}));
  g.y = std::max<uint32_t>(1, std::min({want.y, grid.y, limit / g.x}));
  g.z = std::max<uint32_t>(1, std::min({want.z, grid.z, limit / (g.x * g.y)}));
  dispatch(grid, g);
}

void Launch::dispatch_rows(uint32_t rows, uint32_t want) {
  if (rows == 0) return;
  const uint32_t t = fit_threads(want);
  dispatch(Dim3{t, rows, 1}, Dim3{t, 1, 1});
}

}  // namespace ember::gpu
