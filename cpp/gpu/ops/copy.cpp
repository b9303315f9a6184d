// GPU launchers for data movement: strided copies, fill, casts between every dtype pair, where.
#include <cstring>

#include "gpu/launch.h"
#include "gpu/ops/ops.h"

namespace ember::gpu::ops {
namespace {

constexpr const char* kFile = "copy.metal";
constexpr uint32_t kPerThread = 4;  // the contiguous kernels' elements per thread

// Copies, fills and where move bit patterns: kernels are instantiated per element width.
const char* width(DType dt) {
  switch (itemsize(dt)) {
    case 1: return "8";
    case 2: return "16";
    case 4: return "32";
    default: return "64";
  }
}

void copy_impl(const GpuStorage& src, const Layout& sl, const GpuStorage& dst, const Layout& dl) {
  const uint32_t n = checked_u32(sl.numel(), "copy");
  if (n == 0) return;
  GpuDevice& dev = src.gpu_device();
  const std::string w = width(src.dtype());
  if (is_dense(sl) && is_dense(dl)) {
    Launch(dev, kFile, "copy_contig_" + w)
        .input(src, sl.offset())
        .output(dst, dl.offset())
        .scalar(n)
        .dispatch_1d(ceil_div(n, kPerThread));
    return;
  }
  const auto c = collapse({&sl, &dl});
  Launch(dev, kFile, "copy_strided_" + w)
      .input(src)
      .output(dst)
      .scalar(n)
      .scalar(c[0].ndim())
      .array(c[0].shape)
      .array(c[0].strides)
      .array(c[1].strides)
      .scalar(c[0].offset)
      .scalar(c[1].offset)
      .dispatch_1d(n);
}

}  // namespace

void copy_into(const GpuStorage& s, const Layout& l, BackendStorage& dst_, const Layout& dl) {
  const GpuStorage& dst = as_gpu(dst_);
  if (s.same_buffer(dst)) {
    // Threads run in no order: a copy between overlapping views goes through a snapshot of the source.
    auto snap = new_storage(s.gpu_device(), s.dtype(), l.numel(), "copy");
    const Layout sl = Layout::contiguous(l.shape());
    copy_impl(s, l, *snap, sl);
    copy_impl(*snap, sl, dst, dl);
    return;
  }
  copy_impl(s, l, dst, dl);
}

void fill(GpuStorage& s, const Layout& l, double value) {
  const uint32_t n = checked_u32(l.numel(), "fill");
  if (n == 0) return;
  // The value's bit pattern, converted exactly as the CPU's fill converts it.
  uint64_t bits = 0;
  EMBER_DISPATCH(s.dtype(), {
    const T v = convert<T, double>(value);
    std::memcpy(&bits, &v, sizeof v);
  });
  GpuDevice& dev = s.gpu_device();
  const std::string w = width(s.dtype());
  Launch launch = is_dense(l) ? Launch(dev, kFile, "fill_contig_" + w) : Launch(dev, kFile, "fill_strided_" + w);
  launch.output(s, is_dense(l) ? l.offset() : 0).bytes(&bits, itemsize(s.dtype())).scalar(n);
  if (is_dense(l)) {
    launch.dispatch_1d(ceil_div(n, kPerThread));
    return;
  }
  const Strided c = collapse(l);
  launch.scalar(c.ndim()).array(c.shape).array(c.strides).scalar(c.offset).dispatch_1d(n);
}

StoragePtr to_dtype(const GpuStorage& s, const Layout& l, DType dt) {
  s.gpu_device().check_dtype(dt, "to_dtype");  // the device's words for a dtype it does not hold
  const char* from = type_suffix(s.dtype(), "to_dtype");
  const char* to = type_suffix(dt, "to_dtype");
  const int64_t numel = l.numel();
  const uint32_t n = checked_u32(numel, "to_dtype");
  auto out = new_storage(s.gpu_device(), dt, numel, "to_dtype");
  if (n == 0) return out;
  if (dt == s.dtype()) {
    copy_impl(s, l, *out, Layout::contiguous(l.shape()));
    return out;
  }
  GpuDevice& dev = s.gpu_device();
  const std::string name = cat_str(from, "_", to);
  if (is_dense(l)) {
    Launch(dev, kFile, "cast_contig_" + name)
        .input(s, l.offset())
        .output(*out)
        .scalar(n)
        .dispatch_1d(ceil_div(n, kPerThread));
    return out;
  }
  const Strided c = collapse(l);
  Launch(dev, kFile, "cast_strided_" + name)
      .input(s)
      .output(*out)
      .scalar(n)
      .scalar(c.ndim())
      .array(c.shape)
      .array(c.strides)
      .scalar(c.offset)
      .dispatch_1d(n);
  return out;
}

StoragePtr where(const GpuStorage& c, const Layout& cl, const BackendStorage& a_, const Layout& al,
                 const BackendStorage& b_, const Layout& bl) {
  const GpuStorage& a = as_gpu(a_);
  const GpuStorage& b = as_gpu(b_);
  const int64_t numel = cl.numel();
  const uint32_t n = checked_u32(numel, "where");
  auto out = new_storage(c.gpu_device(), a.dtype(), numel, "where");
  if (n == 0) return out;
  GpuDevice& dev = c.gpu_device();
  const std::string name = cat_str(type_suffix(c.dtype(), "where"), "_", width(a.dtype()));
  if (is_dense(cl) && is_dense(al) && is_dense(bl)) {
    Launch(dev, kFile, "where_contig_" + name)
        .input(c, cl.offset())
        .input(a, al.offset())
        .input(b, bl.offset())
        .output(*out)
        .scalar(n)
        .dispatch_1d(ceil_div(n, kPerThread));
    return out;
  }
  const auto s = collapse({&cl, &al, &bl});
  Launch(dev, kFile, "where_strided_" + name)
      .input(c)
      .input(a)
      .input(b)
      .output(*out)
      .scalar(n)
      .scalar(s[0].ndim())
      .array(s[0].shape)
      .array(s[0].strides)
      .array(s[1].strides)
      .array(s[2].strides)
      .array(std::vector<int64_t>{s[0].offset, s[1].offset, s[2].offset})
      .dispatch_1d(n);
  return out;
}

StoragePtr dense_or_copy(const GpuStorage& s, const Layout& l, const char* op) {
  if (l.is_contiguous() && l.offset() == 0) return std::const_pointer_cast<BackendStorage>(s.shared_from_this());
  auto out = new_storage(s.gpu_device(), s.dtype(), l.numel(), op);
  copy_into(s, l, *out, Layout::contiguous(l.shape()));
  return out;
}

}  // namespace ember::gpu::ops
