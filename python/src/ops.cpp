// Bindings for the op families: thin wrappers over cpp/storage.h that release the GIL.
#include <array>
#include <optional>

#include "common.h"
#include "storage.h"

namespace ember::bind {
namespace {
using SL = std::pair<StoragePtr, Layout>;
const BackendStorage& S(const StoragePtr& p) { return *p; }
// Op codes index kernel tables: an unknown one must raise, never read past a table.
template <typename Op> Op op_code(int code, int count, const char* family) {
  EMBER_CHECK(code >= 0 && code < count, Value, "[", family, "] unknown op code ", code);
  return static_cast<Op>(code);
}
struct MaybeGilFree {
  std::optional<Interruptible> intr;
  std::optional<py::gil_scoped_release> rel;
  explicit MaybeGilFree(int64_t numel) {
    if (numel > 16384) {
      intr.emplace();
      rel.emplace();
    }
  }
};
}  // namespace

void bind_ops(py::module_& m) {
  m.def("alloc", [](int kind, int index, int dt, int64_t n, bool zeroed) {
    return ember::alloc(to_device(kind, index), to_dtype(dt), n, zeroed);
  }, GilFree());
  m.def("full", [](int kind, int index, int dt, int64_t n, double v) {
    return ember::full(to_device(kind, index), to_dtype(dt), n, v);
  }, GilFree());
  m.def("arange", [](int kind, int index, int dt, double start, double step, int64_t n) {
    return ember::arange(to_device(kind, index), to_dtype(dt), start, step, n);
  }, GilFree());
  m.def("rand_uniform", [](int kind, int index, int dt, int64_t n, double lo, double hi) {
    return ember::rand_uniform(to_device(kind, index), to_dtype(dt), n, lo, hi);
  }, GilFree());
  m.def("rand_normal", [](int kind, int index, int dt, int64_t n, double mean, double std) {
    return ember::rand_normal(to_device(kind, index), to_dtype(dt), n, mean, std);
  }, GilFree());
  m.def("rand_int_host", [](int dt, int64_t n, int64_t low, uint64_t span_m1) -> StoragePtr {
    return cpu::rand_int(to_dtype(dt), n, low, span_m1);
  }, GilFree());

  // The two hottest entry points return only the storage (the facade knows the output shape and
  // caches contiguous layouts) and keep the GIL for tiny inputs, where releasing it costs more
  // than the kernel.
  m.def("unary", [](int op, const StoragePtr& s, const Layout& l, double p0, double p1) -> StoragePtr {
    MaybeGilFree g(l.numel());
    return ember::unary(op_code<UnaryOp>(op, kNumUnary, "unary"), S(s), l, p0, p1).first;
  }, py::arg("op"), py::arg("s"), py::arg("l"), py::arg("p0") = 0.0, py::arg("p1") = 0.0);
  m.def("binary", [](int op, const StoragePtr& a, const Layout& la, const StoragePtr& b, const Layout& lb) {
    MaybeGilFree g(std::max(la.numel(), lb.numel()));
    return ember::binary(op_code<BinaryOp>(op, kNumBinary, "binary"), S(a), la, S(b), lb).first;
  });
  m.def("where", [](const StoragePtr& c, const Layout& lc, const StoragePtr& a, const Layout& la,
                    const StoragePtr& b, const Layout& lb) -> SL { return ember::where(S(c), lc, S(a), la, S(b), lb); },
        GilFree());
  m.def("to_dtype", [](const StoragePtr& s, const Layout& l, int dt) -> SL {
    return ember::to_dtype(S(s), l, to_dtype(dt));
  }, GilFree());
  m.def("reduce", [](int op, const StoragePtr& s, const Layout& l, std::vector<int64_t> dims, bool keepdim) -> SL {
    return ember::reduce(op_code<ReduceOp>(op, (int)ReduceOp::Count, "reduce"), S(s), l, std::move(dims), keepdim);
  }, GilFree());
  m.def("matmul", [](const StoragePtr& a, const Layout& la, const StoragePtr& b, const Layout& lb) -> SL {
    return ember::matmul(S(a), la, S(b), lb);
  }, GilFree());
  m.def("to_device", [](const StoragePtr& s, const Layout& l, int kind, int index) -> SL {
    return ember::to_device(S(s), l, to_device(kind, index));
  }, py::arg("s"), py::arg("l"), py::arg("kind"), py::arg("index"), GilFree());
  m.def("contiguous", [](const StoragePtr& s, const Layout& l) -> SL { return ember::contiguous_copy(S(s), l); },
        GilFree());
  m.def("copy_into", [](const StoragePtr& src, const Layout& sl, const StoragePtr& dst, const Layout& dl,
                        const std::string& op) { ember::copy_into(S(src), sl, *dst, dl, op.c_str()); }, GilFree());
  m.def("fill", [](const StoragePtr& s, const Layout& l, double v) { ember::fill(*s, l, v); }, GilFree());
  m.def("index_select", [](const StoragePtr& s, const Layout& l, const StoragePtr& ids, const Layout& il,
                           int64_t dim) -> SL { return ember::index_select(S(s), l, S(ids), il, dim); }, GilFree());
  m.def("gather", [](const StoragePtr& s, const Layout& l, const StoragePtr& ids, const Layout& il, int64_t dim) -> SL {
    return ember::gather(S(s), l, S(ids), il, dim);
  }, GilFree());
  m.def("index_add", [](const StoragePtr& s, const Layout& l, const StoragePtr& ids, const Layout& il,
                        const StoragePtr& src, const Layout& sl, int64_t dim) -> SL {
    return ember::index_add(S(s), l, S(ids), il, S(src), sl, dim);
  }, GilFree());
  m.def("scatter_add", [](const StoragePtr& s, const Layout& l, const StoragePtr& ids, const Layout& il,
                          const StoragePtr& src, const Layout& sl, int64_t dim) -> SL {
    return ember::scatter_add(S(s), l, S(ids), il, S(src), sl, dim);
  }, GilFree());
  m.def("index_add_zeros", [](const std::vector<int64_t>& shape, const StoragePtr& ids, const Layout& il,
                              const StoragePtr& src, const Layout& sl, int64_t dim) -> SL {
    return ember::index_add_zeros(Shape(shape.begin(), shape.end()), S(ids), il, S(src), sl, dim);
  }, GilFree());
  m.def("scatter_add_zeros", [](const std::vector<int64_t>& shape, const StoragePtr& ids, const Layout& il,
                                const StoragePtr& src, const Layout& sl, int64_t dim) -> SL {
    return ember::scatter_add_zeros(Shape(shape.begin(), shape.end()), S(ids), il, S(src), sl, dim);
  }, GilFree());
  m.def("index_copy", [](const StoragePtr& s, const Layout& l, const StoragePtr& ids, const Layout& il,
                         const StoragePtr& src, const Layout& sl, int64_t dim) {
    ember::index_copy(*s, l, S(ids), il, S(src), sl, dim);
  }, GilFree());
  // op: a ScatterOp code (0 scatter, then sum, prod, mean, amax, amin); returns a new (storage, layout)
  m.def("scatter_reduce", [](int op, const StoragePtr& s, const Layout& l, const StoragePtr& ids, const Layout& il,
                             const StoragePtr& src, const Layout& sl, int64_t dim, bool include_self) -> SL {
    return ember::scatter_reduce(op_code<ScatterOp>(op, (int)ScatterOp::Count, "scatter_reduce"), S(s), l, S(ids),
                                 il, S(src), sl, dim, include_self);
  }, GilFree());
  m.def("cat", [](const std::vector<StoragePtr>& ss, const std::vector<Layout>& ls, int64_t dim) -> SL {
    EMBER_CHECK(ss.size() == ls.size(), Value, "[cat] storages and layouts differ in count");
    std::vector<const BackendStorage*> ps;
    for (auto& s : ss) ps.push_back(s.get());
    return ember::cat(ps, ls, dim);
  }, GilFree());
  // geom: (n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow), see ConvGeom.
  auto conv_geom = [](const std::array<int64_t, 14>& v) {
    return ConvGeom{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12], v[13]};
  };
  m.def("im2col", [conv_geom](const StoragePtr& s, const Layout& l, const std::array<int64_t, 14>& geom) -> SL {
    return ember::im2col(*s, l, conv_geom(geom));
  }, GilFree());
  m.def("col2im", [conv_geom](const StoragePtr& s, const Layout& l, const std::array<int64_t, 14>& geom) -> SL {
    return ember::col2im(*s, l, conv_geom(geom));
  }, GilFree());
  using G14 = std::array<int64_t, 14>;
  m.def("conv2d_fwd", [conv_geom](const StoragePtr& x, const Layout& lx, const StoragePtr& w, const Layout& lw,
                                  const BackendStorage* b, const Layout* lb, const G14& geom, int64_t groups) -> SL {
    return ember::conv2d_fwd(*x, lx, *w, lw, b, lb, conv_geom(geom), groups);
  }, py::arg("x"), py::arg("lx"), py::arg("w"), py::arg("lw"), py::arg("b").none(true), py::arg("lb").none(true),
        py::arg("geom"), py::arg("groups"), GilFree());
  m.def("conv2d_bwd_input", [conv_geom](const StoragePtr& gy, const Layout& lg, const StoragePtr& w, const Layout& lw,
                                        const G14& geom, int64_t groups) -> SL {
    return ember::conv2d_bwd_input(*gy, lg, *w, lw, conv_geom(geom), groups);
  }, GilFree());
  m.def("conv2d_bwd_weight", [conv_geom](const StoragePtr& x, const Layout& lx, const StoragePtr& gy, const Layout& lg,
                                         const G14& geom, int64_t groups) -> SL {
    return ember::conv2d_bwd_weight(*x, lx, *gy, lg, conv_geom(geom), groups);
  }, GilFree());
  // pool geom: (n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, divisor, count_include_pad), see PoolGeom.
  auto pool_geom = [](const std::array<int64_t, 16>& v) {
    return PoolGeom{v[0], v[1], v[2], v[3], v[4],  v[5],  v[6],  v[7],
                    v[8], v[9], v[10], v[11], v[12], v[13], v[14], v[15] != 0};
  };
  // (values, Max's indices or None, layout)
  m.def("pool2d", [pool_geom](int kind, const StoragePtr& s, const Layout& l, const std::array<int64_t, 16>& geom,
                              bool with_indices) {
    return ember::pool2d(op_code<PoolKind>(kind, (int)PoolKind::Count, "pool2d"), *s, l, pool_geom(geom),
                         with_indices);
  }, GilFree());
  m.def("pool2d_bwd", [pool_geom](int kind, const StoragePtr& g, const Layout& lg, const StoragePtr& ids,
                                  const std::optional<Layout>& il, const std::array<int64_t, 16>& geom) -> SL {
    return ember::pool2d_bwd(op_code<PoolKind>(kind, (int)PoolKind::Count, "pool2d"), *g, lg, ids.get(),
                             il ? &*il : nullptr, pool_geom(geom));
  }, GilFree());
  // upsample geom: (n, c, h, w, oh, ow), the scale factors (h, w) (0: in / out), align_corners.
  auto up_geom = [](const std::array<int64_t, 6>& v, double sf_h, double sf_w, bool align) {
    return UpsampleGeom{v[0], v[1], v[2], v[3], v[4], v[5], sf_h, sf_w, align};
  };
  m.def("upsample", [up_geom](int mode, const StoragePtr& s, const Layout& l, const std::array<int64_t, 6>& geom,
                              double sf_h, double sf_w, bool align) -> SL {
    return ember::upsample(op_code<UpsampleMode>(mode, (int)UpsampleMode::Count, "interpolate"), *s, l,
                           up_geom(geom, sf_h, sf_w, align));
  }, GilFree());
  m.def("upsample_bwd", [up_geom](int mode, const StoragePtr& g, const Layout& lg, const std::array<int64_t, 6>& geom,
                                  double sf_h, double sf_w, bool align) -> SL {
    return ember::upsample_bwd(op_code<UpsampleMode>(mode, (int)UpsampleMode::Count, "interpolate"), *g, lg,
                               up_geom(geom, sf_h, sf_w, align));
  }, GilFree());
  m.def("sort", [](const StoragePtr& s, const Layout& l, int64_t dim, bool descending, bool stable) {
    return ember::sort(*s, l, dim, descending, stable);
  }, GilFree());
  // (values, indices or None for cumsum/cumprod, layout)
  m.def("scan", [](int op, const StoragePtr& s, const Layout& l, int64_t dim, bool exclusive, bool reverse) {
    return ember::scan(op_code<ScanOp>(op, (int)ScanOp::Count, "scan"), *s, l, dim, exclusive, reverse);
  }, GilFree());
  m.def("topk", [](const StoragePtr& s, const Layout& l, int64_t dim, int64_t k, bool largest) {
    return ember::topk(*s, l, dim, k, largest);
  }, GilFree());
  m.def("multinomial", [](const StoragePtr& s, const Layout& l, int64_t num_samples, bool replacement) -> SL {
    return ember::multinomial(*s, l, num_samples, replacement);
  }, GilFree());
}

}  // namespace ember::bind
