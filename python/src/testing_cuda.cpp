// ember._C_testing's CUDA hooks: pieces of the CUDA backend that the tests check without a GPU.
#include <pybind11/stl.h>

#include "common.h"
#include "cuda/cublas.h"
#include "cuda/cuda_storage.h"
#include "cuda/device.h"
#include "gpu/launch.h"

namespace ember::bind {
namespace {

// One launch of a hand-written kernel in the translation's contract (cuda/kernels.h) through the GPU layer's
// Launch on cuda:0, for tests of CudaDevice's side of the contract before every translated kernel runs.
// bindings: ("in" | "out" | "inout", float32 array[, element offset]) | ("bytes", bytes) | ("skip",).
// Returns the "out" / "inout" arrays' values after the launch. `function` (default: name) is what is launched.
py::list gpu_launch(const std::string& text, const std::string& name, const std::string& buffers,
                    const std::vector<uint32_t>& value_size, const std::vector<uint32_t>& threadgroup,
                    const py::list& bindings, const py::list& constants,
                    const std::vector<std::pair<uint32_t, size_t>>& tg_memory, std::array<uint32_t, 3> grid,
                    std::array<uint32_t, 3> group, const std::string& function) {
  std::string why;
  cuda::CudaDevice* dev = cuda::CudaDevice::get(0, &why);
  EMBER_CHECK(dev != nullptr, Device, "[gpu_launch] no cuda:0 (", why, ")");
  cuda::TranslatedSource ts;
  ts.text = text;
  ts.label = "test.metal (CUDA)";
  ts.kernels[name] = cuda::KernelSig{buffers, value_size, threadgroup};
  gpu::Launch launch(*dev, dev->add_source(ts), function.empty() ? name : function);
  for (const auto& c : parse_function_constants(constants, "gpu_launch")) {
    switch (c.type) {
      case gpu::FunctionConstant::Type::Bool: launch.constant(c.index, c.value != 0); break;
      case gpu::FunctionConstant::Type::Int: launch.constant(c.index, (int32_t)c.value); break;
      case gpu::FunctionConstant::Type::UInt: launch.constant(c.index, (uint32_t)c.value); break;
      case gpu::FunctionConstant::Type::Float: launch.constant(c.index, (float)c.value); break;
    }
  }
  std::vector<std::shared_ptr<gpu::GpuStorage>> outs;
  for (py::handle h : bindings) {
    const py::tuple b = py::reinterpret_borrow<py::tuple>(h);
    const std::string role = b[0].cast<std::string>();
    if (role == "skip") {
      launch.skip();
    } else if (role == "bytes") {
      const std::string v = b[1].cast<py::bytes>();
      launch.bytes(v.data(), v.size());
    } else {
      const auto arr = b[1].cast<py::array_t<float, py::array::c_style | py::array::forcecast>>();
      const int64_t off = b.size() > 2 ? b[2].cast<int64_t>() : 0;
      auto s = dev->new_storage(DType::F32, (int64_t)arr.size(), "gpu_launch");
      s->write(arr.data(), (size_t)arr.size() * 4);
      if (role == "in") launch.input(*s, off);
      else if (role == "out") launch.output(*s, off);
      else launch.inout(*s, off);
      if (role != "in") outs.push_back(s);
    }
  }
  for (const auto& [index, bytes] : tg_memory) launch.threadgroup_memory(bytes, index);
  {
    py::gil_scoped_release nogil;
    launch.dispatch({grid[0], grid[1], grid[2]}, {group[0], group[1], group[2]});
    dev->synchronize();
  }
  py::list result;
  for (const auto& s : outs) {
    py::array_t<float> a(s->numel());
    s->read(a.mutable_data(), (size_t)s->numel() * 4);
    result.append(a);
  }
  return result;
}

}  // namespace

void bind_cuda_testing(py::module_& m) {
  m.def("cuda_gpu_launch", &gpu_launch, py::arg("text"), py::arg("name"), py::arg("buffers"), py::arg("value_size"),
        py::arg("threadgroup"), py::arg("bindings"), py::arg("constants"), py::arg("tg_memory"), py::arg("grid"),
        py::arg("group"), py::arg("function") = "",
        "Launches a hand-written kernel in the translation's contract through gpu::Launch on cuda:0 (EMBER_CUDA "
        "must name a device); returns the written float32 arrays.");
  m.def("cublas_plan", [](int64_t m_, int64_t n, int64_t k, int64_t batch, std::vector<int64_t> a_strides,
                          std::vector<int64_t> b_strides) -> py::object {
    // a_strides / b_strides: (row, col, batch) element strides of the row-major operands
    cuda::RowMajorGemm g;
    g.m = m_, g.n = n, g.k = k, g.batch = batch;
    g.a_row = a_strides.at(0), g.a_col = a_strides.at(1), g.a_batch = a_strides.at(2);
    g.b_row = b_strides.at(0), g.b_col = b_strides.at(1), g.b_batch = b_strides.at(2);
    cuda::CublasCall c;
    if (!cuda::cublas_plan(g, &c)) return py::none();
    py::dict d;
    d["op_first"] = c.op_first, d["op_second"] = c.op_second, d["m"] = c.m, d["n"] = c.n, d["k"] = c.k;
    d["ld_first"] = c.ld_first, d["ld_second"] = c.ld_second, d["ld_c"] = c.ld_c;
    d["stride_first"] = c.stride_first, d["stride_second"] = c.stride_second, d["stride_c"] = c.stride_c;
    return d;
  }, py::arg("m"), py::arg("n"), py::arg("k"), py::arg("batch"), py::arg("a_strides"), py::arg("b_strides"),
     "The cublasGemmStridedBatchedEx parameters matmul would use for a row-major float32 product, or None.");
}

}  // namespace ember::bind
