// Bindings for the Metal device layer: MetalStorage, the device's synchronize / memory controls and
// stats, and a private dispatch hook over the Launch API (tests).
#include <cstring>
#include <map>
#include <mutex>

#include "common.h"
#include "device.h"
#include "metal/device.h"
#include "metal/launch.h"
#include "metal/metal_storage.h"
#include "storage.h"

namespace ember::bind {
namespace {

using metal::MetalDevice;
using metal::MetalStorage;

MetalDevice& metal_device(int index, const char* op) {
  std::string why;
  MetalDevice* d = MetalDevice::get(index, &why);
  EMBER_CHECK(d != nullptr, Device, "[", op, "] device metal:", index, " is not available (", why, ")");
  return *d;
}

py::dtype np_dtype_of(DType dt) {
  static PyObject* dtypes = py::module_::import("ember.dtypes").release().ptr();
  return py::dtype::from_args(py::handle(dtypes).attr("numpy_dtype")(py::handle(dtypes).attr("BY_CODE")[py::int_((int)dt)]));
}

// A dense copy of (s, l) on any device as a new host array of the storage's dtype.
py::array host_copy(const BackendStorage& s) {
  py::array out(np_dtype_of(s.dtype()), std::vector<ssize_t>{(ssize_t)s.numel()});
  DeviceBackend& b = device_backend(s.device(), "numpy");
  {
    py::gil_scoped_release nogil;
    b.to_host(s, out.mutable_data());
  }
  return out;
}

// Runs `function` of `source` on MetalStorages through the Launch API: args[i] -> [[buffer(i)]], each
// ("in" | "out" | "inout", storage) or bytes (a constant by value) or None (unbound).
void dispatch(const std::string& source, const std::string& label, const std::string& function, const py::list& args,
              const std::vector<uint32_t>& grid, const std::vector<uint32_t>& group, int index) {
  MetalDevice& dev = metal_device(index, "metal");
  EMBER_CHECK(grid.size() >= 1 && grid.size() <= 3 && group.size() == grid.size(), Value,
              "[metal] grid_threads and threads_per_threadgroup take 1 to 3 sizes each, of one length");
  // Sources are cached with their hash for the life of the process, as pipelines are.
  static std::mutex mu;
  static std::map<std::pair<std::string, std::string>, std::unique_ptr<metal::KernelSource>> sources;
  const metal::KernelSource* src;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto& slot = sources[{label, source}];
    if (!slot) slot = std::make_unique<metal::KernelSource>(source, label);
    src = slot.get();
  }
  metal::Launch launch(dev, *src, function);
  std::vector<std::shared_ptr<BackendStorage>> keep;
  for (size_t i = 0; i < args.size(); ++i) {
    py::handle h = args[i];
    if (h.is_none()) {
      launch.skip();
    } else if (py::isinstance<py::bytes>(h)) {
      const std::string b = h.cast<std::string>();
      launch.bytes(b.data(), b.size());
    } else {
      auto t = h.cast<py::tuple>();
      const std::string role = t[0].cast<std::string>();
      auto st = t[1].cast<std::shared_ptr<BackendStorage>>();
      EMBER_CHECK(st->device().kind == DeviceKind::Metal && st->device().index == index, Device, "[metal] argument ",
                  i, " is a storage on ", st->device().str(), ", not metal:", index);
      const MetalStorage& m = metal::as_metal(*st);
      if (role == "in") launch.input(m);
      else if (role == "out") launch.output(m);
      else if (role == "inout") launch.inout(m);
      else throw Error(ErrorKind::Value, "[metal] a storage argument's role is 'in', 'out' or 'inout', got " + role);
      keep.push_back(std::move(st));
    }
  }
  metal::Dim3 g, tg;
  uint32_t* gd[3] = {&g.x, &g.y, &g.z};
  uint32_t* td[3] = {&tg.x, &tg.y, &tg.z};
  for (size_t d = 0; d < grid.size(); ++d) *gd[d] = grid[d], *td[d] = group[d];
  py::gil_scoped_release nogil;
  launch.dispatch(g, tg);
}

py::dict stats_dict(int index) {
  const metal::DeviceStats s = metal_device(index, "memory_stats").stats();
  py::dict d;
  d["allocated"] = s.active_bytes, d["cached"] = s.cached_bytes, d["peak"] = s.peak_bytes;
  d["cache_limit"] = s.cache_limit, d["memory_limit"] = s.memory_limit, d["cached_buffers"] = s.cached_buffers;
  d["pool_hits"] = s.pool_hits, d["pool_misses"] = s.pool_misses, d["dispatches"] = s.dispatches;
  d["barriers"] = s.barriers, d["fence_waits"] = s.fence_waits, d["commits"] = s.commits;
  d["pipelines"] = s.pipelines;
  d["pipeline_compiles"] = s.pipeline_compiles;
  d["library_compiles"] = s.library_compiles;
  return d;
}

}  // namespace

void bind_metal_storage(py::module_& m) {
  metal::register_backend();
  py::class_<MetalStorage, BackendStorage, std::shared_ptr<MetalStorage>>(
      m, "MetalStorage",
      "A storage in a Metal buffer from the device's pool (shared memory). A custom op's metal_fwd receives "
      "its inputs as MetalStorages and returns a new one.")
      .def("numpy", [](const MetalStorage& s) { return host_copy(s); },
           "A new flat numpy array with the buffer's values: waits for the device's pending work, then copies.")
      .def_property_readonly("nbytes", &MetalStorage::nbytes, "The size of the storage in bytes.")
      .def_property_readonly("byte_offset", &MetalStorage::byte_offset, "Where the storage starts in its buffer.")
      .def_static(
          "_empty_code",
          [](int64_t n, int code, int index) {
            MetalDevice& dev = metal_device(index, "empty");
            return std::static_pointer_cast<BackendStorage>(metal::new_metal(dev, to_dtype(code), n, "empty"));
          },
          py::arg("n"), py::arg("code"), py::arg("index") = 0);
  m.def("_metal_backend_kind", [] {
    const char* k = MetalDevice::backend_kind();
    return k ? py::object(py::str(k)) : py::object(py::none());
  });
  m.def("_metal_describe", [](int index) { return metal_device(index, "metal").describe(); }, py::arg("index") = 0);
  m.def("_metal_synchronize", [](int index) { metal_device(index, "synchronize").synchronize(); },
        py::arg("index") = 0, py::call_guard<py::gil_scoped_release>());
  m.def("_metal_stats", &stats_dict, py::arg("index") = 0);
  m.def("_metal_empty_cache", [](int index) { metal_device(index, "empty_cache").empty_cache(); },
        py::arg("index") = 0);
  m.def("_metal_set_cache_limit", [](size_t n, int index) { metal_device(index, "set_cache_limit").set_cache_limit(n); },
        py::arg("bytes"), py::arg("index") = 0);
  m.def("_metal_set_memory_limit",
        [](size_t n, int index) { metal_device(index, "set_memory_limit").set_memory_limit(n); }, py::arg("bytes"),
        py::arg("index") = 0);
  m.def("_metal_reset_peak_memory", [](int index) { metal_device(index, "reset_peak_memory").reset_peak_memory(); },
        py::arg("index") = 0);
  m.def("_metal_dispatch", &dispatch, py::arg("source"), py::arg("label"), py::arg("function"), py::arg("args"),
        py::arg("grid_threads"), py::arg("threads_per_threadgroup"), py::arg("index") = 0);
}

}  // namespace ember::bind
