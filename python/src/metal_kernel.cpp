// Binding of em.metal.Kernel over the Metal backend's public surface (metal/api.h): its one user-kernel
// dispatcher. Arguments are checked by python/ember/metal_kernel.py first; what is checked again in C++
// guards the C++ side.
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "metal/api.h"

namespace ember::bind {
namespace {

// inputs -> In, outputs -> InOut (an output may also be read: an in-place op's operand), scalars -> Bytes.
std::vector<KernelArg> kernel_args(const std::vector<StoragePtr>& inputs, const std::vector<StoragePtr>& outputs,
                                   const std::vector<py::bytes>& scalars) {
  std::vector<KernelArg> args;
  for (size_t i = 0; i < inputs.size(); ++i)
    args.push_back({KernelArg::Role::In, inputs[i], {}, cat_str("inputs[", i, "]")});
  for (size_t i = 0; i < outputs.size(); ++i)
    args.push_back({KernelArg::Role::InOut, outputs[i], {}, cat_str("outputs[", i, "]")});
  for (size_t i = 0; i < scalars.size(); ++i)
    args.push_back({KernelArg::Role::Bytes, nullptr, std::string(scalars[i]), cat_str("scalars[", i, "]")});
  return args;
}

}  // namespace

void bind_metal_kernel(py::module_& m) {
  py::class_<metal::UserKernel, std::shared_ptr<metal::UserKernel>>(
      m, "_MetalKernel", "A user's Metal kernel (source, function, options); see em.metal.Kernel.")
      .def_property_readonly("source_hash", [](const metal::UserKernel& k) { return metal::source_hash(k); },
                             "The digest of the source text (part of the pipeline cache key).");
  m.def("_metal_kernel_new", [](const std::string& source, const std::string& name, const std::string& label,
                                const py::list& constants) {
    return metal::new_user_kernel(source, name, label, parse_function_constants(constants, "metal.Kernel"));
  }, py::arg("source"), py::arg("name"), py::arg("label"), py::arg("constants"));
  m.def("_metal_kernel_call", [](const metal::UserKernel& k, const std::vector<StoragePtr>& inputs,
                                 const std::vector<StoragePtr>& outputs, const std::vector<py::bytes>& scalars,
                                 const std::array<uint32_t, 3>& grid, const std::array<uint32_t, 3>& group) {
    const std::vector<KernelArg> args = kernel_args(inputs, outputs, scalars);
    py::gil_scoped_release release;  // a first call compiles (seconds under the emulator)
    metal::dispatch_user_kernel(k, args, grid, group, "metal.Kernel");
  }, py::arg("kernel"), py::arg("inputs"), py::arg("outputs"), py::arg("scalars"), py::arg("grid_threads"),
     py::arg("threads_per_threadgroup"));
  m.def("_metal_kernel_cache_info", [] {
    py::dict d;
    for (const auto& [index, c] : metal::user_kernel_cache_info()) {
      py::dict e;
      e["compiles"] = c.first;
      e["hits"] = c.second;
      d[py::int_(index)] = e;
    }
    return d;
  }, "Per Metal device index: the em.metal.Kernel pipelines compiled there and the calls that reused one.");
}

}  // namespace ember::bind
