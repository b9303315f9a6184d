// The testing extension's CUDA-kernel hooks: ember's .metal kernels translated to CUDA (cpp/cuda/kernels.h), the
// MSL rewriter's CUDA mode on any text, and a raw launch on the CUDA emulator with numpy buffers, so the tests
// run the translated kernels by the launch contract before any host code does. ember never uses them.
#include "common.h"
#include "cuda/adapter.h"
#include "cuda/embedded.h"
#include "cuda/kernels.h"
#include "msl/rewrite.h"

namespace ember::bind {
namespace {

py::dict sig_dict(const cuda::TranslatedSource& t) {
  py::dict ks;
  for (const auto& [name, s] : t.kernels) ks[py::str(name)] = py::make_tuple(s.buffers, s.value_size, s.threadgroup);
  return ks;
}

// Launches `function` of CUDA C++ `source` on the CUDA emulator: args[i] is parameter i, a writable C-contiguous
// numpy array (a device pointer: copied in, and back after the run) or bytes (a value).
void emu_launch(const std::string& source, const std::string& label, const std::string& function, const py::list& args,
                const std::vector<uint32_t>& grid, const std::vector<uint32_t>& block, uint32_t shared_mem,
                const std::vector<std::string>& options) {
  EMBER_CHECK(grid.size() == 3 && block.size() == 3, Value, "[cuda] grid and block take 3 sizes");
  cuda::Adapter& a = cuda::emulator_adapter();
  std::vector<cuda::LaunchArg> la(args.size());
  std::vector<std::pair<py::array, size_t>> arrays;  // (array, argument index)
  auto release = [&] {
    for (auto& [arr, i] : arrays) a.free(0, la[i].dptr);
  };
  try {
    for (size_t i = 0; i < args.size(); ++i) {
      py::handle h = args[i];
      if (py::isinstance<py::bytes>(h)) {
        la[i].bytes = h.cast<std::string>();
        continue;
      }
      EMBER_CHECK(py::isinstance<py::array>(h), Value, "[cuda] argument ", i, " must be a numpy array or bytes");
      py::array arr = py::reinterpret_borrow<py::array>(h);
      EMBER_CHECK((arr.flags() & py::array::c_style) && arr.writeable(), Value, "[cuda] argument ", i,
                  " must be a writable C-contiguous array");
      la[i].pointer = true;
      la[i].extent = (uint64_t)arr.nbytes();
      la[i].dptr = a.alloc(0, (size_t)arr.nbytes());
      arrays.push_back({arr, i});
      a.copy_to_device(0, la[i].dptr, arr.data(), (size_t)arr.nbytes());
    }
    {
      py::gil_scoped_release nogil;
      cuda::ModuleHandle m = a.load_module(0, source, label, options);
      a.launch(0, m, function, {grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}, shared_mem, la);
    }
    for (auto& [arr, i] : arrays) a.copy_to_host(0, arr.mutable_data(), la[i].dptr, (size_t)arr.nbytes());
  } catch (...) {
    release();
    throw;
  }
  release();
}

}  // namespace

void bind_cuda_kernels_testing(py::module_& m) {
  m.def("cuda_kernel_files", &cuda::kernel_files, "The embedded kernel files cuda::translated_source knows.");
  m.def("cuda_translated", [](const std::string& file, bool f64) {
    const cuda::TranslatedSource& t = cuda::translated_source(file, f64);
    py::dict d;
    d["text"] = t.text;
    d["label"] = t.label;
    d["kernels"] = sig_dict(t);
    return d;
  }, py::arg("file"), py::arg("f64") = false,
     "cuda::translated_source(file, f64): text, label and {host name: (buffers, value_size, threadgroup)}.");
  m.def("cuda_rewrite", [](const std::string& src, const std::string& name) {
    return metal::emu::rewrite_msl(src, name, metal::emu::RewriteMode::Cuda).text;
  }, py::arg("source"), py::arg("name") = "kernel.metal", "The MSL rewriter's CUDA mode on preprocessed MSL.");
  m.def("cuda_prelude", [] { return std::string(cuda::embedded_source("msl_cuda.h")); },
        "metal/msl_cuda.h, the prelude translated_source puts before every translation.");
  m.def("cuda_emu_compile", [](const std::string& source, const std::string& label, const std::vector<std::string>& options) {
    py::gil_scoped_release nogil;
    cuda::emulator_adapter().load_module(0, source, label, options);
  }, py::arg("source"), py::arg("label"), py::arg("options") = std::vector<std::string>{},
     "Compiles CUDA C++ for the CUDA emulator (through its disk cache), raising its compile errors.");
  m.def("cuda_emu_launch", &emu_launch, py::arg("source"), py::arg("label"), py::arg("function"), py::arg("args"),
        py::arg("grid"), py::arg("block"), py::arg("shared_mem") = 0,
        py::arg("options") = std::vector<std::string>{},
        "One launch on the CUDA emulator: args are numpy arrays (pointers) or bytes (values), in parameter order.");
}

}  // namespace ember::bind
