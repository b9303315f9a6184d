// Bindings of the CUDA layer: CudaStorage, em.cuda's device functions, em.cuda.Kernel (a user's CUDA C++
// kernel: arguments checked against its parameters, compiled once per device, launched) and NVRTC's PTX.
// python/ember/cuda_kernel.py checks the Python-side arguments first.
#include <array>
#include <map>
#include <mutex>
#include <set>

#include "common.h"
#include "cuda/adapter.h"
#include "cuda/cublas.h"
#include "cuda/cuda_source.h"
#include "cuda/cuda_storage.h"
#include "cuda/device.h"
#include "sha256.h"

namespace ember::bind {
namespace {

using cuda::CudaDevice;
using cuda::CudaStorage;

CudaDevice& cuda_device(int index, const char* op) {
  std::string why;
  CudaDevice* d = CudaDevice::get(index, &why);
  EMBER_CHECK(d != nullptr, Device, "[", op, "] device cuda:", index, " is not available (", why, ")");
  return *d;
}

struct UserKernel {
  std::string source, hash, label, name;
  std::vector<std::string> options;
  cuda::KernelDecl decl;
};

struct Counts {
  uint64_t compiles = 0, hits = 0;
};
std::mutex g_mu;
std::map<int, Counts> g_counts;

std::string describe(const cuda::Param& p, size_t i) { return cat_str("argument ", i, " ('", p.name, "', ", p.type, ")"); }

void call(const UserKernel& k, const std::vector<StoragePtr>& inputs, const std::vector<StoragePtr>& outputs,
          const std::vector<std::pair<std::string, std::string>>& scalars, const std::array<uint32_t, 3>& grid,
          const std::array<uint32_t, 3>& block, uint32_t shared_mem) {
  const std::string kn = cat_str("[cuda.Kernel] ", k.name, ": ");
  const auto& params = k.decl.params;
  const size_t nptr = inputs.size() + outputs.size();
  EMBER_CHECK(nptr + scalars.size() == params.size(), Type, kn, "the kernel takes ", params.size(),
              " arguments; the call gives ", inputs.size(), " inputs, ", outputs.size(), " outputs and ",
              scalars.size(), " scalars");
  EMBER_CHECK(nptr > 0, Value, kn, "give at least one input or output storage (it names the device)");
  std::vector<StoragePtr> all(inputs);
  all.insert(all.end(), outputs.begin(), outputs.end());
  const Device dev0 = all[0]->device();
  std::vector<cuda::LaunchArg> args;
  for (size_t i = 0; i < nptr; ++i) {
    const cuda::Param& p = params[i];
    const char* what = i < inputs.size() ? "inputs" : "outputs";
    const size_t j = i < inputs.size() ? i : i - inputs.size();
    EMBER_CHECK(all[i] != nullptr, Type, kn, what, "[", j, "] is None");
    EMBER_CHECK(all[i]->device().kind == DeviceKind::Cuda, Device, kn, what, "[", j, "] is a storage on ",
                all[i]->device().str(), "; a CUDA kernel takes CudaStorages (move data with .to('cuda'))");
    EMBER_CHECK(all[i]->device() == dev0, Device, kn, what, "[", j, "] is on ", all[i]->device().str(),
                ", another device than the first storage's (", dev0.str(), ")");
    EMBER_CHECK(p.pointer, Type, kn, what, "[", j, "] is a storage, but ", describe(p, i), " is not a pointer");
    EMBER_CHECK(!p.known || p.dtype == all[i]->dtype(), DType, kn, what, "[", j, "] holds ",
                dtype_name(all[i]->dtype()), ", but ", describe(p, i), " points to ", dtype_name(p.dtype));
    const CudaStorage& s = cuda::as_cuda(*all[i]);
    cuda::LaunchArg a;
    a.pointer = true;
    a.dptr = s.dptr();
    a.extent = s.nbytes();
    args.push_back(a);
  }
  for (size_t i = 0; i < scalars.size(); ++i) {
    const cuda::Param& p = params[nptr + i];
    const auto& [bytes, kind] = scalars[i];
    EMBER_CHECK(!p.pointer, Type, kn, "scalars[", i, "] is a value, but ", describe(p, nptr + i),
                " is a pointer (pass a storage among the inputs or outputs)");
    EMBER_CHECK(!p.known || kind == p.scalar_kind, DType, kn, "scalars[", i, "] is numpy ", kind, ", but ",
                describe(p, nptr + i), " takes ", p.scalar_kind, " (pass np.", p.scalar_kind, "(value))");
    cuda::LaunchArg a;
    a.bytes = bytes;
    args.push_back(a);
  }
  CudaDevice& dev = cuda_device(dev0.index, "cuda.Kernel");
  bool compiled = false;
  const cuda::ModuleHandle m = dev.module(k.source, k.hash, k.label, k.options, &compiled);
  for (const auto& s : outputs) s->bump_version();
  dev.launch(m, k.decl.name, {grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}, shared_mem, args);
  for (const auto& s : outputs) s->bump_version();
  std::lock_guard<std::mutex> lock(g_mu);
  Counts& c = g_counts[dev0.index];
  (compiled ? c.compiles : c.hits)++;
}

py::dtype np_dtype_of(DType dt) {
  static PyObject* dtypes = py::module_::import("ember.dtypes").release().ptr();
  return py::dtype::from_args(py::handle(dtypes).attr("numpy_dtype")(py::handle(dtypes).attr("BY_CODE")[py::int_((int)dt)]));
}

}  // namespace

void bind_cuda(py::module_& m) {
  cuda::register_backend();
  py::class_<CudaStorage, BackendStorage, std::shared_ptr<CudaStorage>>(
      m, "CudaStorage",
      "A storage in a CUDA device's memory (under the emulator: host memory whose extent every kernel access "
      "is checked against). A custom op's cuda_fwd receives its inputs as CudaStorages and returns a new one.")
      .def("numpy", [](const CudaStorage& s) {
        py::array out(np_dtype_of(s.dtype()), std::vector<ssize_t>{(ssize_t)s.numel()});
        DeviceBackend& b = device_backend(s.device(), "numpy");
        py::gil_scoped_release nogil;
        b.to_host(s, out.mutable_data());
        return out;
      }, "A new flat numpy array with the storage's values (waits for the device's work, then copies).")
      .def_property_readonly("nbytes", &CudaStorage::nbytes, "The size of the storage in bytes.")
      .def_property_readonly("data_ptr", &CudaStorage::dptr, "The device address of the storage's first element.")
      .def_static(
          "_empty_code",
          [](int64_t n, int code, int index) {
            CudaDevice& dev = cuda_device(index, "empty");
            return std::static_pointer_cast<BackendStorage>(std::make_shared<CudaStorage>(dev, to_dtype(code), n));
          },
          py::arg("n"), py::arg("code"), py::arg("index") = 0)
      .def_static(
          "_borrow",
          [](uint64_t ptr, int64_t numel, int code, int index, py::object keep_alive) {
            CudaDevice& dev = cuda_device(index, "from_dlpack");
            // Zero-copy: the storage holds `keep_alive` (the producer's DLPack tensor, whose deleter runs when
            // it dies) until its last view and the work on it are gone.
            auto* ref = new py::object(std::move(keep_alive));
            auto release = [ref] {
              py::gil_scoped_acquire g;
              delete ref;
            };
            return std::static_pointer_cast<BackendStorage>(CudaStorage::wrap(dev, to_dtype(code), numel, ptr, release));
          },
          py::arg("ptr"), py::arg("numel"), py::arg("code"), py::arg("index"), py::arg("keep_alive"),
          "Wraps CUDA memory another library owns, without copying (DLPack).")
      .def_property_readonly("_foreign", &CudaStorage::foreign,
                             "Whether the storage wraps memory ember did not allocate (a DLPack import).");
  // DLPack export to a consumer's stream handle: the consumer's stream waits for an event recorded on ember's
  // stream, on the device, with no host wait.
  m.def("_cuda_order_stream", [](int index, uint64_t stream) {
    CudaDevice& dev = cuda_device(index, "__dlpack__");
    py::gil_scoped_release nogil;
    cuda::Adapter& a = dev.adapter();
    const cuda::EventHandle ev = a.record_event(dev.ordinal());
    try {
      a.stream_wait_event(dev.ordinal(), stream, ev);
    } catch (...) {
      a.destroy_event(dev.ordinal(), ev);
      throw;
    }
    a.destroy_event(dev.ordinal(), ev);
  }, py::arg("index"), py::arg("stream"));
  // DLPack imports of memory another library owns on a CUDA device (interop.py): copied into ember's own
  // storage, on the device, or to the host for the dtypes and layouts the host path converts.
  m.def("_cuda_copy_from_pointer", [](const StoragePtr& dst, uint64_t src, size_t nbytes) {
    EMBER_CHECK(dst && dst->device().kind == DeviceKind::Cuda, Device, "[from_dlpack] expected a CudaStorage");
    const CudaStorage& d = cuda::as_cuda(*dst);
    EMBER_CHECK(nbytes <= d.nbytes(), Value, "[from_dlpack] ", nbytes, " bytes do not fit a storage of ", d.nbytes());
    py::gil_scoped_release nogil;
    CudaDevice& dev = d.cuda_device();
    dev.adapter().copy_on_device(dev.ordinal(), d.dptr(), src, nbytes);
    dev.synchronize();  // the producer may reuse its memory once its deleter runs, right after this
  }, py::arg("dst"), py::arg("src"), py::arg("nbytes"));
  m.def("_cuda_read_pointer", [](int index, uint64_t src, py::array out) {
    EMBER_CHECK(out.writeable() && (out.flags() & py::array::c_style), Value,
                "[from_dlpack] expected a writable C-contiguous array");
    CudaDevice& dev = cuda_device(index, "from_dlpack");
    void* dst = out.mutable_data();
    const size_t n = (size_t)out.nbytes();
    py::gil_scoped_release nogil;
    dev.adapter().copy_to_host(dev.ordinal(), dst, src, n);
  }, py::arg("index"), py::arg("src"), py::arg("out"));
  // For tests: _C_testing links its own copy of the CUDA layer (its own emulator adapter), so the counters of
  // the adapter ember's tensors use are read here.
  m.def("_cuda_emulator_counts", [] {
    const cuda::EmulatorCounts c = cuda::emulator_counts();
    py::dict d;
    d["records"] = c.records, d["waits"] = c.waits, d["destroys"] = c.destroys, d["synchronizes"] = c.synchronizes;
    return d;
  }, "The CUDA emulator adapter's event records, stream waits, event destroys and synchronizes so far (tests).");
  m.def("_cuda_backend_kind", [] {
    const char* k = CudaDevice::backend_kind();
    return k ? py::object(py::str(k)) : py::object(py::none());
  });
  m.def("_cuda_device_count", &CudaDevice::count);
  m.def("_cuda_describe", [](int index) { return cuda_device(index, "cuda").describe(); }, py::arg("index") = 0);
  m.def("_cuda_synchronize", [](int index) { cuda_device(index, "synchronize").synchronize(); }, py::arg("index") = 0,
        py::call_guard<py::gil_scoped_release>());
  py::class_<UserKernel, std::shared_ptr<UserKernel>>(m, "_CudaKernel", "A user's CUDA kernel; see em.cuda.Kernel.")
      .def_property_readonly("source_hash", [](const UserKernel& k) { return k.hash; },
                             "The SHA-256 of the source text (part of the module cache key).")
      .def_property_readonly("params", [](const UserKernel& k) {
        py::list l;
        for (const auto& p : k.decl.params) l.append(py::make_tuple(p.name, p.type, p.pointer));
        return l;
      }, "The kernel's parameters as (name, type, is_pointer).");
  m.def("_cuda_kernel_new", [](const std::string& source, const std::string& name, const std::string& label,
                               const std::vector<std::string>& options) {
    auto k = std::make_shared<UserKernel>();
    k->source = source, k->label = label, k->name = name, k->options = options;
    k->hash = sha256_hex(source);
    const cuda::ParsedSource p = cuda::parse_source(source, label);
    k->decl = cuda::find_kernel(p, name, label);
    return k;
  }, py::arg("source"), py::arg("name"), py::arg("label"), py::arg("options"));
  m.def("_cuda_kernel_call", [](const UserKernel& k, const std::vector<StoragePtr>& inputs,
                                const std::vector<StoragePtr>& outputs, const std::vector<py::tuple>& scalars,
                                const std::array<uint32_t, 3>& grid, const std::array<uint32_t, 3>& block,
                                uint32_t shared_mem) {
    std::vector<std::pair<std::string, std::string>> sc;
    for (const py::tuple& t : scalars) sc.emplace_back(t[0].cast<std::string>(), t[1].cast<std::string>());
    py::gil_scoped_release release;  // a first call compiles (seconds under the emulator)
    call(k, inputs, outputs, sc, grid, block, shared_mem);
  }, py::arg("kernel"), py::arg("inputs"), py::arg("outputs"), py::arg("scalars"), py::arg("grid"), py::arg("block"),
     py::arg("shared_mem"));
  m.def("_cuda_kernel_cache_info", [] {
    std::lock_guard<std::mutex> lock(g_mu);
    py::dict d;
    for (const auto& [index, c] : g_counts) {
      py::dict e;
      e["compiles"] = c.compiles;
      e["hits"] = c.hits;
      d[py::int_(index)] = e;
    }
    return d;
  }, "Per CUDA device index: the em.cuda.Kernel modules compiled there and the calls that reused one.");
  m.def("_cuda_set_nvrtc_library", &cuda::set_nvrtc_library, py::arg("path"));
  m.def("_cuda_nvrtc_ptx", [](const std::string& library, const std::string& source, const std::string& label,
                              const std::vector<std::string>& options, const std::string& arch) {
    py::gil_scoped_release release;
    return cuda::nvrtc_ptx(library, source, label, options, arch);
  }, py::arg("library"), py::arg("source"), py::arg("label"), py::arg("options"), py::arg("arch"));
  m.def("_cuda_nvrtc_version", &cuda::nvrtc_version, py::arg("library"));
  m.def("_cuda_set_cublas_library", &cuda::set_cublas_library, py::arg("path"));
  m.def("_cuda_cublas_check", &cuda::cublas_check, py::arg("path"),
        "Loads cuBLAS from path and resolves ember's entry points (no GPU needed): '' or why not.");
}

}  // namespace ember::bind
