// ember._C_testing's CUDA hooks: pieces of the CUDA backend that the tests check without a GPU.
#include <pybind11/stl.h>

#include "common.h"
#include "cuda/cublas.h"

namespace ember::bind {

void bind_cuda_testing(py::module_& m) {
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
