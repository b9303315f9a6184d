// Storage-level entry points: argument checks common to every backend, then the backend call.
// Creation goes through the device's DeviceBackend (device.h); nothing here knows a backend.
#include "storage.h"

#include <algorithm>
#include <climits>
#include <vector>

#include "families/conv.h"
#include "families/pool.h"
#include "families/sampling.h"
#include "families/scan.h"
#include "families/scatter.h"
#include "families/sort.h"
#include "families/upsample.h"
#include "registry.h"

namespace ember {

std::string Device::str() const {
  switch (kind) {
    case DeviceKind::Cpu: return "cpu";
    case DeviceKind::Metal: return "metal:" + std::to_string(index);
    case DeviceKind::Cuda: return "cuda:" + std::to_string(index);
  }
  return "?";
}

const char* act_name(ActKind kind) {
  static const char* n[(int)ActKind::Count] = {"sigmoid", "silu", "gelu", "elu", "leaky_relu", "softplus",
                                               "mish", "hardswish", "hardsigmoid", "gelu_tanh"};
  return n[(int)kind];
}

namespace {
DeviceBackend& backend_for(Device dev, DType dt, const char* op) {
  DeviceBackend& b = device_backend(dev, op);
  EMBER_CHECK(b.supports(dt), DType, "[", op, "] ", dtype_name(dt), " is not supported on ", dev.str());
  return b;
}
}  // namespace

StoragePtr alloc(Device dev, DType dt, int64_t numel, bool zeroed) {
  EMBER_CHECK(numel >= 0, Value, "[alloc] negative element count ", numel);
  EMBER_CHECK(numel <= INT64_MAX / (int64_t)itemsize(dt), Value, "[alloc] ", numel, " elements of ",
              dtype_name(dt), " do not fit in memory");
  return backend_for(dev, dt, "alloc").alloc(dt, numel, zeroed);
}

StoragePtr full(Device dev, DType dt, int64_t numel, double value) {
  StoragePtr s = alloc(dev, dt, numel, value == 0.0);
  if (value != 0.0) s->fill(Layout::contiguous({numel}), value);
  return s;
}

StoragePtr arange(Device dev, DType dt, double start, double step, int64_t n) {
  return backend_for(dev, dt, "arange").arange(dt, start, step, n);
}

StoragePtr rand_uniform(Device dev, DType dt, int64_t n, double lo, double hi) {
  EMBER_CHECK(is_float(dt), DType, "[rand] expected a float dtype, got ", dtype_name(dt));
  return backend_for(dev, dt, "rand").rand_uniform(dt, n, lo, hi);
}

StoragePtr rand_normal(Device dev, DType dt, int64_t n, double mean, double std) {
  EMBER_CHECK(is_float(dt), DType, "[randn] expected a float dtype, got ", dtype_name(dt));
  return backend_for(dev, dt, "randn").rand_normal(dt, n, mean, std);
}

void check_same_device(const BackendStorage& a, const BackendStorage& b, const char* op) {
  EMBER_CHECK(a.device() == b.device(), Device, "[", op, "] device mismatch: ", a.device().str(), " and ",
              b.device().str());
}
void check_same_dtype(const BackendStorage& a, const BackendStorage& b, const char* op) {
  EMBER_CHECK(a.dtype() == b.dtype(), DType, "[", op, "] dtype mismatch: ", dtype_name(a.dtype()), " and ",
              dtype_name(b.dtype()));
}

void check_in_bounds(const BackendStorage& s, const Layout& l, const char* op) {
  // Layouts can be built by hand (em.Layout): rank, dims and reach are all checked before a kernel
  // trusts them, so a bad one raises instead of reading or writing outside the buffer.
  EMBER_CHECK(l.stride().size() == l.shape().size(), Shape, "[", op, "] layout ", l.repr(),
              " has a stride per dim missing or extra");
  if (checked_numel(l.shape(), op) == 0) return;
  auto [lo, hi] = l.extent();
  EMBER_CHECK(lo >= 0 && hi <= s.numel(), Index, "[", op, "] layout ", l.repr(),
              " reaches outside a storage of ", s.numel(), " elements");
}

std::pair<StoragePtr, Layout> unary(UnaryOp op, const BackendStorage& s, const Layout& l, double p0, double p1) {
  check_in_bounds(s, l, op_name(op));
  return {s.unary(op, l, p0, p1), Layout::contiguous(l.shape())};
}

std::pair<StoragePtr, Layout> binary(BinaryOp op, const BackendStorage& a, const Layout& la,
                                     const BackendStorage& b, const Layout& lb) {
  const char* name = op_name(op);
  check_same_device(a, b, name);
  check_same_dtype(a, b, name);
  check_in_bounds(a, la, name);
  check_in_bounds(b, lb, name);
  if (la.shape() == lb.shape()) return {a.binary(op, la, b, lb), Layout::contiguous(la.shape())};
  Shape out = broadcast_shapes(la.shape(), lb.shape(), name);
  return {a.binary(op, la.broadcast_as(out), b, lb.broadcast_as(out)), Layout::contiguous(out)};
}

std::pair<StoragePtr, Layout> where(const BackendStorage& c, const Layout& lc, const BackendStorage& a,
                                    const Layout& la, const BackendStorage& b, const Layout& lb) {
  check_same_device(c, a, "where");
  check_same_device(a, b, "where");
  check_same_dtype(a, b, "where");
  EMBER_CHECK(!is_float(c.dtype()), DType, "[where] condition must be an integer or bool tensor, got ",
              dtype_name(c.dtype()));
  check_in_bounds(c, lc, "where");
  check_in_bounds(a, la, "where");
  check_in_bounds(b, lb, "where");
  Shape out = broadcast_shapes(broadcast_shapes(lc.shape(), la.shape(), "where"), lb.shape(), "where");
  return {c.where(lc.broadcast_as(out), a, la.broadcast_as(out), b, lb.broadcast_as(out)),
          Layout::contiguous(out)};
}

std::pair<StoragePtr, Layout> to_dtype(const BackendStorage& s, const Layout& l, DType dt) {
  check_in_bounds(s, l, "to_dtype");
  return {s.to_dtype(l, dt), Layout::contiguous(l.shape())};
}

std::pair<StoragePtr, Layout> reduce(ReduceOp op, const BackendStorage& s, const Layout& l,
                                     std::vector<int64_t> dims, bool keepdim) {
  const char* name = op_name(op);
  check_in_bounds(s, l, name);
  for (auto& d : dims) d = normalize_dim(d, l.ndim(), name);
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  if (l.ndim() == 0) dims.clear();
  for (auto d : dims)
    EMBER_CHECK(l.shape()[d] > 0 || op == ReduceOp::Sum || op == ReduceOp::SumI64, Shape, "[", name,
                "] cannot reduce over an empty dim ", d, " of shape ", shape_str(l.shape()));
  StoragePtr out = s.reduce(op, l, dims);
  Shape kept = l.shape();
  for (auto d : dims) kept[d] = 1;
  if (!keepdim) {
    Shape squeezed;
    for (int64_t i = 0; i < l.ndim(); ++i)
      if (!std::binary_search(dims.begin(), dims.end(), i)) squeezed.push_back(l.shape()[i]);
    kept = squeezed;
  }
  return {out, Layout::contiguous(kept)};
}

std::pair<StoragePtr, Layout> matmul(const BackendStorage& a, const Layout& la, const BackendStorage& b,
                                     const Layout& lb) {
  check_same_device(a, b, "matmul");
  check_same_dtype(a, b, "matmul");
  check_in_bounds(a, la, "matmul");
  check_in_bounds(b, lb, "matmul");
  EMBER_CHECK(la.ndim() >= 1 && lb.ndim() >= 1, Shape, "[matmul] both operands need at least 1 dim, got ",
              shape_str(la.shape()), " @ ", shape_str(lb.shape()));
  // 1-D operands are promoted (prepend / append a dim) and the dim removed from the result, as numpy.
  Layout A = la.ndim() == 1 ? la.unsqueeze(0) : la;
  Layout B = lb.ndim() == 1 ? lb.unsqueeze(1) : lb;
  int64_t m = A.shape()[A.ndim() - 2], k = A.shape()[A.ndim() - 1];
  int64_t k2 = B.shape()[B.ndim() - 2], n = B.shape()[B.ndim() - 1];
  EMBER_CHECK(k == k2, Shape, "[matmul] shape mismatch ", shape_str(la.shape()), " @ ", shape_str(lb.shape()));
  Shape ba(A.shape().begin(), A.shape().end() - 2), bb(B.shape().begin(), B.shape().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, "matmul");
  Shape sa = batch, sb = batch, so = batch;
  sa.push_back(m); sa.push_back(k);
  sb.push_back(k); sb.push_back(n);
  so.push_back(m); so.push_back(n);
  // Every size check before any allocation: the backend copies operands BLAS cannot read (a broadcast
  // one included) before it multiplies, so a refusal after that could cost gigabytes first.
  checked_numel(sa, "matmul");
  checked_numel(sb, "matmul");
  checked_numel(so, "matmul");
  EMBER_CHECK(!is_float(a.dtype()) || std::max({m, n, k}) <= INT32_MAX, Unsupported, "[matmul] a dim of ",
              shape_str(la.shape()), " @ ", shape_str(lb.shape()), " exceeds BLAS's 32-bit limit");
  StoragePtr out = a.matmul(A.broadcast_as(sa), b, B.broadcast_as(sb));
  Shape os = batch;
  if (la.ndim() > 1) os.push_back(m);
  if (lb.ndim() > 1) os.push_back(n);
  return {out, Layout::contiguous(os)};
}

std::pair<StoragePtr, Layout> contiguous_copy(const BackendStorage& s, const Layout& l) {
  check_in_bounds(s, l, "contiguous");
  StoragePtr out = alloc(s.device(), s.dtype(), l.numel(), false);
  Layout ol = Layout::contiguous(l.shape());
  s.copy_into(l, *out, ol);
  return {out, ol};
}

std::pair<StoragePtr, Layout> to_device(const BackendStorage& s, const Layout& l, Device dev) {
  check_in_bounds(s, l, "to_device");
  DeviceBackend& to = backend_for(dev, s.dtype(), "to_device");
  DeviceBackend& from = device_backend(s.device(), "to_device");
  const Layout ol = Layout::contiguous(l.shape());
  if (s.device() == dev) return contiguous_copy(s, l);
  StoragePtr dense;
  const BackendStorage* src = &s;
  if (!(l.is_contiguous() && l.offset() == 0 && l.numel() == s.numel())) {
    dense = contiguous_copy(s, l).first;
    src = dense.get();
  }
  // Through a host staging buffer: storage.cpp sees no backend's memory, and a transfer is no hot path.
  std::vector<char> host((size_t)src->numel() * itemsize(src->dtype()));
  from.to_host(*src, host.data());
  return {to.from_host(src->dtype(), src->numel(), host.data()), ol};
}

void copy_into(const BackendStorage& src, const Layout& sl, BackendStorage& dst, const Layout& dl,
               const char* op) {
  check_same_device(src, dst, op);
  check_same_dtype(src, dst, op);
  EMBER_CHECK(sl.shape() == dl.shape(), Shape, "[", op, "] shape mismatch: source ", shape_str(sl.shape()),
              ", destination ", shape_str(dl.shape()));
  check_in_bounds(src, sl, op);
  check_in_bounds(dst, dl, op);
  // Before and after: an interrupted copy has written part of dst, and a reader between the two
  // bumps (another thread) must not take the old version for the new values.
  dst.bump_version();
  src.copy_into(sl, dst, dl);
  dst.bump_version();
}

void fill(BackendStorage& s, const Layout& l, double value) {
  check_in_bounds(s, l, "fill");
  s.bump_version();  // before and after (see copy_into)
  s.fill(l, value);
  s.bump_version();
}

namespace {
// `s` null: the target is a fresh buffer of l's shape not yet made (the *_zeros forms check before
// they allocate); `like` then stands in for its device.
void check_ids(const BackendStorage* s, const Layout& l, const BackendStorage& ids, const Layout& il,
               const char* op, const BackendStorage* like = nullptr) {
  check_same_device(s ? *s : *like, ids, op);
  if (s) check_in_bounds(*s, l, op);
  else checked_numel(l.shape(), op);
  check_in_bounds(ids, il, op);
  // normalize_dim accepts dim 0/-1 of a 0-d tensor (torch's rule for reductions), but the kernels
  // index the selected dim's size and stride: a scalar has neither.
  EMBER_CHECK(l.ndim() > 0, Shape, "[", op, "] expected a tensor with at least 1 dim, got a scalar");
  EMBER_CHECK(ids.dtype() == DType::I64 || ids.dtype() == DType::I32 || ids.dtype() == DType::U32 ||
                  ids.dtype() == DType::U8,
              DType, "[", op, "] indices must be int64, int32, uint32 or uint8, got ", dtype_name(ids.dtype()));
}
}  // namespace

std::pair<StoragePtr, Layout> index_select(const BackendStorage& s, const Layout& l, const BackendStorage& ids,
                                           const Layout& il, int64_t dim) {
  check_ids(&s, l, ids, il, "index_select");
  dim = normalize_dim(dim, l.ndim(), "index_select");
  EMBER_CHECK(il.ndim() == 1, Shape, "[index_select] indices must be 1-D, got ", shape_str(il.shape()));
  Shape os = l.shape();
  os[dim] = il.shape()[0];
  return {s.index_select(l, ids, il, dim), Layout::contiguous(os)};
}

std::pair<StoragePtr, Layout> gather(const BackendStorage& s, const Layout& l, const BackendStorage& ids,
                                     const Layout& il, int64_t dim) {
  check_ids(&s, l, ids, il, "gather");
  dim = normalize_dim(dim, l.ndim(), "gather");
  EMBER_CHECK(il.ndim() == l.ndim(), Shape, "[gather] indices ", shape_str(il.shape()), " must have as many dims as ",
              shape_str(l.shape()));
  for (int64_t i = 0; i < l.ndim(); ++i)
    EMBER_CHECK(i == dim || il.shape()[i] <= l.shape()[i], Shape, "[gather] indices ", shape_str(il.shape()),
                " do not fit ", shape_str(l.shape()), " outside dim ", dim);
  return {s.gather(l, ids, il, dim), Layout::contiguous(il.shape())};
}

namespace {
// The checks of a row-wise write of src's slices into (s, l) at 1-D ids along dim (index_add, its
// zeros-target form, index_copy); `what` names src in the message. Returns the normalised dim.
int64_t check_index_rows(const BackendStorage* s, const Layout& l, const BackendStorage& ids, const Layout& il,
                         const BackendStorage& src, const Layout& sl, int64_t dim, const char* op,
                         const char* what) {
  check_ids(s, l, ids, il, op, &src);
  if (s) {
    check_same_dtype(*s, src, op);
    check_same_device(*s, src, op);
  }
  check_in_bounds(src, sl, op);
  dim = normalize_dim(dim, l.ndim(), op);
  EMBER_CHECK(il.ndim() == 1, Shape, "[", op, "] indices must be 1-D, got ", shape_str(il.shape()));
  Shape want = l.shape();
  want[dim] = il.shape()[0];
  EMBER_CHECK(sl.shape() == want, Shape, "[", op, "] ", what, " shape ", shape_str(sl.shape()), " should be ",
              shape_str(want));
  return dim;
}
int64_t check_index_add(const BackendStorage* s, const Layout& l, const BackendStorage& ids, const Layout& il,
                        const BackendStorage& src, const Layout& sl, int64_t dim) {
  return check_index_rows(s, l, ids, il, src, sl, dim, "index_add", "source");
}

int64_t check_scatter_add(const BackendStorage* s, const Layout& l, const BackendStorage& ids, const Layout& il,
                          const BackendStorage& src, const Layout& sl, int64_t dim) {
  check_ids(s, l, ids, il, "scatter_add", &src);
  if (s) {
    check_same_dtype(*s, src, "scatter_add");
    check_same_device(*s, src, "scatter_add");
  }
  check_in_bounds(src, sl, "scatter_add");
  dim = normalize_dim(dim, l.ndim(), "scatter_add");
  EMBER_CHECK(il.shape() == sl.shape(), Shape, "[scatter_add] indices ", shape_str(il.shape()),
              " and source ", shape_str(sl.shape()), " must have the same shape");
  EMBER_CHECK(il.ndim() == l.ndim(), Shape, "[scatter_add] indices ", shape_str(il.shape()),
              " must have as many dims as ", shape_str(l.shape()));
  for (int64_t i = 0; i < l.ndim(); ++i)
    EMBER_CHECK(i == dim || il.shape()[i] <= l.shape()[i], Shape, "[scatter_add] indices ",
                shape_str(il.shape()), " do not fit ", shape_str(l.shape()), " outside dim ", dim);
  return dim;
}

// A fresh zero-filled storage of `shape` like src: the target of the *_zeros forms below.
std::pair<StoragePtr, Layout> zeros_like_src(const BackendStorage& src, const Shape& shape) {
  return {alloc(src.device(), src.dtype(), shape_numel(shape), true), Layout::contiguous(shape)};
}
}  // namespace

std::pair<StoragePtr, Layout> index_add(const BackendStorage& s, const Layout& l, const BackendStorage& ids,
                                        const Layout& il, const BackendStorage& src, const Layout& sl,
                                        int64_t dim) {
  dim = check_index_add(&s, l, ids, il, src, sl, dim);
  auto [out, ol] = contiguous_copy(s, l);
  out->index_add(ol, ids, il, src, sl, dim);
  return {out, ol};
}

std::pair<StoragePtr, Layout> index_add_zeros(const Shape& shape, const BackendStorage& ids, const Layout& il,
                                              const BackendStorage& src, const Layout& sl, int64_t dim) {
  checked_numel(shape, "index_add");  // before Layout::contiguous computes its strides
  dim = check_index_add(nullptr, Layout::contiguous(shape), ids, il, src, sl, dim);
  auto [out, ol] = zeros_like_src(src, shape);
  out->index_add(ol, ids, il, src, sl, dim);
  return {out, ol};
}

std::pair<StoragePtr, Layout> scatter_add(const BackendStorage& s, const Layout& l, const BackendStorage& ids,
                                          const Layout& il, const BackendStorage& src, const Layout& sl,
                                          int64_t dim) {
  dim = check_scatter_add(&s, l, ids, il, src, sl, dim);
  auto [out, ol] = contiguous_copy(s, l);
  out->scatter_add(ol, ids, il, src, sl, dim);
  return {out, ol};
}

std::pair<StoragePtr, Layout> scatter_add_zeros(const Shape& shape, const BackendStorage& ids, const Layout& il,
                                                const BackendStorage& src, const Layout& sl, int64_t dim) {
  checked_numel(shape, "scatter_add");  // before Layout::contiguous computes its strides
  dim = check_scatter_add(nullptr, Layout::contiguous(shape), ids, il, src, sl, dim);
  auto [out, ol] = zeros_like_src(src, shape);
  out->scatter_add(ol, ids, il, src, sl, dim);
  return {out, ol};
}

std::pair<StoragePtr, Layout> scatter_reduce(ScatterOp op, const BackendStorage& s, const Layout& l,
                                             const BackendStorage& ids, const Layout& il, const BackendStorage& src,
                                             const Layout& sl, int64_t dim, bool include_self) {
  EMBER_CHECK(op < ScatterOp::Count, Value, "[scatter_reduce] unknown reduction ", (int)op);
  const char* name = op == ScatterOp::Set ? "scatter" : "scatter_reduce";
  check_ids(&s, l, ids, il, name, &src);
  check_same_dtype(s, src, name);
  check_same_device(s, src, name);
  check_in_bounds(src, sl, name);
  dim = normalize_dim(dim, l.ndim(), name);
  EMBER_CHECK(il.shape() == sl.shape(), Shape, "[", name, "] index ", shape_str(il.shape()), " and src ",
              shape_str(sl.shape()), " must have the same shape");
  EMBER_CHECK(il.ndim() == l.ndim(), Shape, "[", name, "] index ", shape_str(il.shape()),
              " must have as many dims as ", shape_str(l.shape()));
  for (int64_t i = 0; i < l.ndim(); ++i)
    EMBER_CHECK(i == dim || il.shape()[i] <= l.shape()[i], Shape, "[", name, "] index ", shape_str(il.shape()),
                " does not fit ", shape_str(l.shape()), " outside dim ", dim);
  auto [out, ol] = contiguous_copy(s, l);
  Kernels<ScatterReduce>::of(*out)(*out, op, ol, ids, il, src, sl, dim, include_self);
  return {out, ol};
}

void index_copy(BackendStorage& dst, const Layout& l, const BackendStorage& ids, const Layout& il,
                const BackendStorage& src, const Layout& sl, int64_t dim) {
  const char* op = "setitem";  // the one caller is t[ids] = v
  dim = check_index_rows(&dst, l, ids, il, src, sl, dim, op, "value");
  for (int64_t d = 0; d < l.ndim(); ++d)  // several elements at one address: the writes would collide
    EMBER_CHECK(l.stride()[d] != 0 || l.shape()[d] <= 1, Value, "[", op,
                "] cannot write into a broadcast (stride 0) view");
  if (src.same_buffer(dst)) {  // t[ids] = t[...]: read the old values, not the ones being written
    auto [snap, snl] = contiguous_copy(src, sl);
    dst.bump_version();  // before and after (see copy_into)
    dst.index_copy(l, ids, il, *snap, snl, dim);
  } else {
    dst.bump_version();
    dst.index_copy(l, ids, il, src, sl, dim);
  }
  dst.bump_version();
}

std::pair<StoragePtr, Layout> cat(const std::vector<const BackendStorage*>& ss, const std::vector<Layout>& ls,
                                  int64_t dim) {
  EMBER_CHECK(!ss.empty(), Value, "[cat] expected at least one tensor");
  const Layout& l0 = ls[0];
  EMBER_CHECK(l0.ndim() > 0, Shape, "[cat] cannot concatenate 0-dim tensors");
  dim = normalize_dim(dim, l0.ndim(), "cat");
  Shape os = l0.shape();
  os[dim] = 0;
  for (size_t i = 0; i < ss.size(); ++i) {
    check_same_device(*ss[0], *ss[i], "cat");
    check_same_dtype(*ss[0], *ss[i], "cat");
    check_in_bounds(*ss[i], ls[i], "cat");
    EMBER_CHECK(ls[i].ndim() == l0.ndim(), Shape, "[cat] tensor ", i, " has shape ", shape_str(ls[i].shape()),
                ", expected ", l0.ndim(), " dims like ", shape_str(l0.shape()));
    for (int64_t d = 0; d < l0.ndim(); ++d)
      EMBER_CHECK(d == dim || ls[i].shape()[d] == l0.shape()[d], Shape, "[cat] tensor ", i, " has shape ",
                  shape_str(ls[i].shape()), ", incompatible with ", shape_str(l0.shape()), " outside dim ", dim);
    EMBER_CHECK(!__builtin_add_overflow(os[dim], ls[i].shape()[dim], &os[dim]), Shape, "[cat] the sizes of dim ",
                dim, " add up past what an int64 can count");
  }
  checked_numel(os, "cat");
  StoragePtr out = alloc(ss[0]->device(), ss[0]->dtype(), shape_numel(os), false);
  Layout ol = Layout::contiguous(os);
  int64_t at = 0;
  for (size_t i = 0; i < ss.size(); ++i) {
    int64_t len = ls[i].shape()[dim];
    ss[i]->copy_into(ls[i], *out, ol.narrow(dim, at, len));
    at += len;
  }
  return {out, ol};
}

}  // namespace ember

namespace ember {
namespace {
// The checks im2col and col2im share: a positive kernel, stride and dilation, non-negative padding, at
// least one output position, and element counts an int64 holds (before any allocation). Windows that
// reach past the input read zeros, so any output size is safe; the callers derive it from the rest.
void check_conv_geom(const ConvGeom& g, const char* op) {
  EMBER_CHECK(g.kh >= 1 && g.kw >= 1 && g.sh >= 1 && g.sw >= 1 && g.dh >= 1 && g.dw >= 1, Value, "[", op,
              "] kernel size, stride and dilation must be positive, got kernel (", g.kh, ", ", g.kw, "), stride (",
              g.sh, ", ", g.sw, "), dilation (", g.dh, ", ", g.dw, ")");
  EMBER_CHECK(g.ph >= 0 && g.pw >= 0, Value, "[", op, "] padding must be non-negative, got (", g.ph, ", ", g.pw, ")");
  EMBER_CHECK(g.oh >= 1 && g.ow >= 1, Shape, "[", op, "] the kernel (", g.kh, ", ", g.kw, ") with dilation (", g.dh,
              ", ", g.dw, ") does not fit the padded input (", g.h, ", ", g.w, "): no output position");
  checked_numel({g.n, g.c, g.kh, g.kw, g.oh, g.ow}, op);
  checked_numel({g.n, g.c, g.h, g.w}, op);
}
}  // namespace

std::pair<StoragePtr, Layout> im2col(const BackendStorage& s, const Layout& l, const ConvGeom& g) {
  check_in_bounds(s, l, "unfold");
  EMBER_CHECK(l.ndim() == 4, Shape, "[unfold] expected input (N, C, H, W), got ", shape_str(l.shape()));
  EMBER_CHECK(l.shape() == Shape({g.n, g.c, g.h, g.w}), Shape, "[unfold] input ", shape_str(l.shape()),
              " does not match the geometry (", g.n, ", ", g.c, ", ", g.h, ", ", g.w, ")");
  check_conv_geom(g, "unfold");
  return {Kernels<Im2col>::of(s)(s, l, g), Layout::contiguous({g.n, g.c * g.kh * g.kw, g.oh * g.ow})};
}

std::pair<StoragePtr, Layout> col2im(const BackendStorage& s, const Layout& l, const ConvGeom& g) {
  check_in_bounds(s, l, "fold");
  check_conv_geom(g, "fold");
  EMBER_CHECK(l.shape() == Shape({g.n, g.c * g.kh * g.kw, g.oh * g.ow}), Shape, "[fold] expected columns (", g.n,
              ", ", g.c * g.kh * g.kw, ", ", g.oh * g.ow, "), got ", shape_str(l.shape()));
  if (!l.is_contiguous() || l.offset() != 0 || s.numel() != l.numel()) {
    auto [c, cl] = contiguous_copy(s, l);
    return {Kernels<Col2im>::of(*c)(*c, g), Layout::contiguous({g.n, g.c, g.h, g.w})};
  }
  return {Kernels<Col2im>::of(s)(s, g), Layout::contiguous({g.n, g.c, g.h, g.w})};
}

namespace {
// The checks the three conv2d kernels share: float operands of one dtype on one device, inside their
// storages; x (n, c, h, w) and gy (n, c_out, oh, ow) as the geometry says, groups dividing both channel counts.
void check_conv_operand(const BackendStorage& ref, const BackendStorage& s, const Layout& l, const Shape& want,
                        const char* op, const char* what) {
  check_same_device(ref, s, op);
  EMBER_CHECK(is_float(s.dtype()), DType, "[", op, "] expected a float ", what, ", got ", dtype_name(s.dtype()));
  EMBER_CHECK(s.dtype() == ref.dtype(), DType, "[", op, "] ", what, " has dtype ", dtype_name(s.dtype()), ", expected ",
              dtype_name(ref.dtype()));
  check_in_bounds(s, l, op);
  EMBER_CHECK(l.shape() == want, Shape, "[", op, "] expected ", what, " of shape ", shape_str(want), ", got ",
              shape_str(l.shape()));
}
void check_conv_groups(const ConvGeom& g, int64_t groups, int64_t c_out, const char* op) {
  EMBER_CHECK(groups >= 1 && g.c % groups == 0 && c_out % groups == 0, Shape, "[", op, "] groups ", groups,
              " must be positive and divide the input channels ", g.c, " and the output channels ", c_out);
  check_conv_geom(g, op);
  checked_numel({g.n, c_out, g.oh, g.ow}, op);
}
}  // namespace

std::pair<StoragePtr, Layout> conv2d_fwd(const BackendStorage& x, const Layout& lx, const BackendStorage& w,
                                         const Layout& lw, const BackendStorage* b, const Layout* lb, const ConvGeom& g,
                                         int64_t groups) {
  const char* op = "conv2d";
  EMBER_CHECK(lw.ndim() == 4, Shape, "[conv2d] expected weight (C_out, C_in / groups, kh, kw), got ",
              shape_str(lw.shape()));
  const int64_t c_out = lw.shape()[0];
  check_conv_groups(g, groups, c_out, op);
  check_conv_operand(x, x, lx, {g.n, g.c, g.h, g.w}, op, "input");
  check_conv_operand(x, w, lw, {c_out, g.c / groups, g.kh, g.kw}, op, "weight");
  if (b) {
    EMBER_CHECK(lb, Value, "[conv2d] bias given without a layout");
    check_conv_operand(x, *b, *lb, {c_out}, op, "bias");
  }
  return {Kernels<Conv2dFwd>::of(x)(x, lx, w, lw, b, b ? lb : nullptr, g, groups),
          Layout::contiguous({g.n, c_out, g.oh, g.ow})};
}

std::pair<StoragePtr, Layout> conv2d_bwd_input(const BackendStorage& gy, const Layout& lg, const BackendStorage& w,
                                               const Layout& lw, const ConvGeom& g, int64_t groups) {
  const char* op = "conv2d_bwd_input";
  EMBER_CHECK(lw.ndim() == 4, Shape, "[conv2d_bwd_input] expected weight (C_out, C_in / groups, kh, kw), got ",
              shape_str(lw.shape()));
  const int64_t c_out = lw.shape()[0];
  check_conv_groups(g, groups, c_out, op);
  check_conv_operand(gy, gy, lg, {g.n, c_out, g.oh, g.ow}, op, "grad");
  check_conv_operand(gy, w, lw, {c_out, g.c / groups, g.kh, g.kw}, op, "weight");
  return {Kernels<Conv2dBwdInput>::of(gy)(gy, lg, w, lw, g, groups), Layout::contiguous({g.n, g.c, g.h, g.w})};
}

std::pair<StoragePtr, Layout> conv2d_bwd_weight(const BackendStorage& x, const Layout& lx, const BackendStorage& gy,
                                                const Layout& lg, const ConvGeom& g, int64_t groups) {
  const char* op = "conv2d_bwd_weight";
  EMBER_CHECK(lg.ndim() == 4, Shape, "[conv2d_bwd_weight] expected grad (N, C_out, OH, OW), got ",
              shape_str(lg.shape()));
  const int64_t c_out = lg.shape()[1];
  check_conv_groups(g, groups, c_out, op);
  check_conv_operand(x, x, lx, {g.n, g.c, g.h, g.w}, op, "input");
  check_conv_operand(x, gy, lg, {g.n, c_out, g.oh, g.ow}, op, "grad");
  checked_numel({c_out, g.c / groups, g.kh, g.kw}, op);
  return {Kernels<Conv2dBwdWeight>::of(x)(x, lx, gy, lg, g, groups),
          Layout::contiguous({c_out, g.c / groups, g.kh, g.kw})};
}

// A scalar is a line of one element (torch's rule), so the line kernels always see a dim.
namespace {
Layout with_a_dim(const Layout& l) { return l.ndim() == 0 ? Layout({1}, {1}, l.offset()) : l; }
}  // namespace

std::tuple<StoragePtr, StoragePtr, Layout> sort(const BackendStorage& s, const Layout& l, int64_t dim,
                                                bool descending, bool stable) {
  check_in_bounds(s, l, "sort");
  dim = normalize_dim(dim, l.ndim(), "sort");
  auto [vals, ids] = Kernels<Sort>::of(s)(s, with_a_dim(l), dim, descending, stable);
  return {vals, ids, Layout::contiguous(l.shape())};
}

std::tuple<StoragePtr, StoragePtr, Layout> scan(ScanOp op, const BackendStorage& s, const Layout& l, int64_t dim,
                                                bool exclusive, bool reverse) {
  EMBER_CHECK(op < ScanOp::Count, Value, "[scan] unknown scan op ", (int)op);
  const char* name = kScanNames[(int)op];
  check_in_bounds(s, l, name);
  dim = normalize_dim(dim, l.ndim(), name);
  EMBER_CHECK(!exclusive || op == ScanOp::Sum || op == ScanOp::Prod, Value, "[", name,
              "] has no exclusive form (the first position would have no index)");
  auto [vals, ids] = Kernels<Scan>::of(s)(s, op, with_a_dim(l), dim, exclusive, reverse);
  return {vals, ids, Layout::contiguous(l.shape())};
}

std::tuple<StoragePtr, StoragePtr, Layout> topk(const BackendStorage& s, const Layout& l, int64_t dim, int64_t k,
                                                bool largest) {
  check_in_bounds(s, l, "topk");
  dim = normalize_dim(dim, l.ndim(), "topk");
  const Layout line = with_a_dim(l);
  const int64_t n = line.shape()[dim];
  EMBER_CHECK(k >= 0 && k <= n, Value, "[topk] k = ", k, " is out of range for a dim of size ", n);
  if (l.ndim() == 0) k = 1;  // torch: a scalar's topk is the scalar, for k = 0 as well
  Shape out = l.shape();
  if (l.ndim() > 0) out[dim] = k;
  auto [vals, ids] = Kernels<Topk>::of(s)(s, line, dim, k, largest);
  return {vals, ids, Layout::contiguous(out)};
}

std::pair<StoragePtr, Layout> multinomial(const BackendStorage& s, const Layout& l, int64_t num_samples,
                                          bool replacement) {
  check_in_bounds(s, l, "multinomial");
  EMBER_CHECK(is_float(s.dtype()), DType, "[multinomial] only supports floating-point weights, got ",
              dtype_name(s.dtype()));
  EMBER_CHECK(l.ndim() == 1 || l.ndim() == 2, Shape, "[multinomial] weights must be 1-D or 2-D, got ",
              shape_str(l.shape()));
  EMBER_CHECK(num_samples > 0, Value, "[multinomial] cannot sample num_samples <= 0 (got ", num_samples, ")");
  const int64_t n = l.shape().back(), rows = l.ndim() == 2 ? l.shape()[0] : 1;
  EMBER_CHECK(replacement || num_samples <= n, Value, "[multinomial] cannot sample num_samples = ", num_samples,
              " > ", n, " categories without replacement");
  EMBER_CHECK(n > 0 || rows == 0, Value, "[multinomial] invalid distribution: a row has no categories");
  const Layout rl = l.ndim() == 2 ? l : Layout({1, n}, {0, l.stride()[0]}, l.offset());
  const RngDraw draw = rng_reserve((uint64_t)rows * (uint64_t)(replacement ? num_samples : n) + 1);
  StoragePtr out = Kernels<Multinomial>::of(s)(s, rl, num_samples, replacement, draw.seed, draw.counter);
  return {out, l.ndim() == 2 ? Layout::contiguous({rows, num_samples}) : Layout::contiguous({num_samples})};
}

}  // namespace ember

namespace ember {
namespace {
// The checks pool2d and its backward share: a known kind, positive sizes, torch's window rules (padding at
// most half the kernel, the last window starts inside the input or its left padding), and element counts
// an int64 holds.
const char* check_pool_geom(PoolKind kind, const PoolGeom& g) {
  EMBER_CHECK(kind < PoolKind::Count, Value, "[pool2d] unknown pooling kind ", (int)kind);
  const char* op = kPoolNames[(int)kind];
  EMBER_CHECK(g.n >= 0 && g.c >= 0 && g.h >= 1 && g.w >= 1 && g.oh >= 1 && g.ow >= 1, Shape, "[", op,
              "] expected positive spatial sizes, got input (", g.h, ", ", g.w, "), output (", g.oh, ", ", g.ow, ")");
  checked_numel({g.n, g.c, g.h, g.w}, op);
  checked_numel({g.n, g.c, g.oh, g.ow}, op);
  if (kind == PoolKind::AdaptiveAvg) return op;
  EMBER_CHECK(g.kh >= 1 && g.kw >= 1 && g.sh >= 1 && g.sw >= 1 && g.dh >= 1 && g.dw >= 1, Value, "[", op,
              "] kernel size, stride and dilation must be positive, got kernel (", g.kh, ", ", g.kw, "), stride (",
              g.sh, ", ", g.sw, "), dilation (", g.dh, ", ", g.dw, ")");
  EMBER_CHECK(kind == PoolKind::Max || (g.dh == 1 && g.dw == 1), Value, "[", op, "] has no dilation");
  EMBER_CHECK(g.ph >= 0 && g.pw >= 0 && g.ph <= g.kh / 2 && g.pw <= g.kw / 2, Value, "[", op, "] padding (", g.ph,
              ", ", g.pw, ") must be non-negative and at most half the kernel (", g.kh, ", ", g.kw, ")");
  EMBER_CHECK(g.divisor >= 0, Value, "[", op, "] divisor_override must be positive, got ", g.divisor);
  // torch lets a ceil_mode window overhang the padded input; the kernels clip every window to the input
  EMBER_CHECK((g.oh - 1) * g.sh < g.h + g.ph && (g.ow - 1) * g.sw < g.w + g.pw,
              Shape, "[", op, "] output (", g.oh, ", ", g.ow, ") does not fit the input (", g.h, ", ", g.w,
              ") with kernel (", g.kh, ", ", g.kw, "), stride (", g.sh, ", ", g.sw, "), padding (", g.ph, ", ", g.pw,
              "), dilation (", g.dh, ", ", g.dw, ")");
  return op;
}

void check_float_planes(const BackendStorage& s, const Layout& l, const Shape& want, const char* op,
                        const char* what) {
  check_in_bounds(s, l, op);
  EMBER_CHECK(is_float(s.dtype()), DType, "[", op, "] expected a float ", what, ", got ", dtype_name(s.dtype()));
  EMBER_CHECK(l.shape() == want, Shape, "[", op, "] expected ", what, " of shape ", shape_str(want), ", got ",
              shape_str(l.shape()));
}

void check_upsample_geom(UpsampleMode mode, const UpsampleGeom& g) {
  EMBER_CHECK(mode < UpsampleMode::Count, Value, "[interpolate] unknown mode ", (int)mode);
  EMBER_CHECK(g.n >= 0 && g.c >= 0 && g.h >= 1 && g.w >= 1 && g.oh >= 1 && g.ow >= 1, Shape,
              "[interpolate] expected positive spatial sizes, got input (", g.h, ", ", g.w, "), output (", g.oh,
              ", ", g.ow, ")");
  EMBER_CHECK(g.sf_h >= 0 && g.sf_w >= 0 && g.sf_h < 1e300 && g.sf_w < 1e300, Value,
              "[interpolate] scale factors must be finite and non-negative, got (", g.sf_h, ", ", g.sf_w, ")");
  checked_numel({g.n, g.c, g.h, g.w}, "interpolate");
  checked_numel({g.n, g.c, g.oh, g.ow}, "interpolate");
}
}  // namespace

std::tuple<StoragePtr, StoragePtr, Layout> pool2d(PoolKind kind, const BackendStorage& s, const Layout& l,
                                                  const PoolGeom& g, bool with_indices) {
  const char* op = check_pool_geom(kind, g);
  check_float_planes(s, l, {g.n, g.c, g.h, g.w}, op, "input");
  auto [vals, ids] = Kernels<Pool2d>::of(s)(s, kind, l, g, with_indices && kind == PoolKind::Max);
  return {vals, ids, Layout::contiguous({g.n, g.c, g.oh, g.ow})};
}

std::pair<StoragePtr, Layout> pool2d_bwd(PoolKind kind, const BackendStorage& g, const Layout& lg,
                                         const BackendStorage* ids, const Layout* il, const PoolGeom& geom) {
  const char* op = check_pool_geom(kind, geom);
  check_float_planes(g, lg, {geom.n, geom.c, geom.oh, geom.ow}, op, "gradient");
  StoragePtr dense;  // Max's indices, contiguous from 0 as the backends read them
  if (kind == PoolKind::Max) {
    EMBER_CHECK(ids && il, Value, "[", op, "] the backward needs the forward's indices");
    check_in_bounds(*ids, *il, op);
    check_same_device(g, *ids, op);
    EMBER_CHECK(ids->dtype() == DType::I64, DType, "[", op, "] expected int64 indices, got ", dtype_name(ids->dtype()));
    EMBER_CHECK(il->shape() == lg.shape(), Shape, "[", op, "] indices ", shape_str(il->shape()),
                " do not match the gradient ", shape_str(lg.shape()));
    if (!il->is_contiguous() || il->offset() != 0) {
      dense = contiguous_copy(*ids, *il).first;
      ids = dense.get();
    }
  } else {
    ids = nullptr;
  }
  return {Kernels<Pool2dBwd>::of(g)(g, kind, lg, ids, geom), Layout::contiguous({geom.n, geom.c, geom.h, geom.w})};
}

std::pair<StoragePtr, Layout> upsample(UpsampleMode mode, const BackendStorage& s, const Layout& l,
                                       const UpsampleGeom& g) {
  check_upsample_geom(mode, g);
  check_float_planes(s, l, {g.n, g.c, g.h, g.w}, "interpolate", "input");
  return {Kernels<Upsample>::of(s)(s, mode, l, g), Layout::contiguous({g.n, g.c, g.oh, g.ow})};
}

std::pair<StoragePtr, Layout> upsample_bwd(UpsampleMode mode, const BackendStorage& g, const Layout& lg,
                                           const UpsampleGeom& geom) {
  check_upsample_geom(mode, geom);
  check_float_planes(g, lg, {geom.n, geom.c, geom.oh, geom.ow}, "interpolate", "gradient");
  return {Kernels<UpsampleBwd>::of(g)(g, mode, lg, geom), Layout::contiguous({geom.n, geom.c, geom.h, geom.w})};
}

}  // namespace ember
