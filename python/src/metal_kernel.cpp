// Binding of em.metal.Kernel: a user's MSL source and function, dispatched through the Metal backend's
// Launch API (the device's pipeline cache, hazard tracker and shared encoder). Arguments are checked
// by python/ember/metal_kernel.py first; what is checked again here guards the C++ side.
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common.h"
#include "metal/launch.h"

namespace ember::bind {

// python/src/metal.cpp: the one reader of function constants.
metal::FunctionConstant parse_function_constant(py::handle index, const std::string& type, py::handle value);

namespace {

using metal::FunctionConstant;

// One Kernel object: its source (hashed once) and options. Nothing is compiled until a first call.
struct UserKernel {
  std::shared_ptr<metal::KernelSource> src;
  std::string name;
  std::vector<FunctionConstant> constants;
  std::string options_key;  // the constants, as the cache key names them
};

// What em.metal.cache_info() reports per device: the distinct (source hash, name, options) that were
// compiled there and the calls that found theirs compiled. The device's pipeline cache keeps every
// pipeline for the life of the process, so the first call of a key is the one compile.
struct Counts {
  std::set<std::string> keys;
  uint64_t compiles = 0, hits = 0;
};
std::mutex g_mu;
std::map<int, Counts> g_counts;

metal::MetalStorage& metal_storage(const StoragePtr& s, const char* what, size_t i) {
  EMBER_CHECK(s != nullptr, Type, "[metal.Kernel] ", what, "[", i, "] is None");
  EMBER_CHECK(s->device().kind == DeviceKind::Metal, Device, "[metal.Kernel] ", what, "[", i, "] is a storage on ",
              s->device().str(), ", expected a MetalStorage");
  return metal::as_metal(*s);
}

void call(const UserKernel& k, const std::vector<StoragePtr>& inputs, const std::vector<StoragePtr>& outputs,
          const std::vector<std::string>& scalars, const std::array<uint32_t, 3>& grid,
          const std::array<uint32_t, 3>& group) {
  EMBER_CHECK(!inputs.empty() || !outputs.empty(), Value,
              "[metal.Kernel] ", k.name, ": give at least one input or output storage (it names the device)");
  EMBER_CHECK(inputs.size() + outputs.size() + scalars.size() <= 31, Value, "[metal.Kernel] ", k.name,
              ": more than 31 buffer bindings");
  metal::MetalDevice& dev = metal_storage(inputs.empty() ? outputs[0] : inputs[0], inputs.empty() ? "outputs" : "inputs", 0)
                                .metal_device();
  for (const char* what : {"inputs", "outputs"}) {
    const auto& v = what[0] == 'i' ? inputs : outputs;
    for (size_t i = 0; i < v.size(); ++i)
      EMBER_CHECK(&metal_storage(v[i], what, i).metal_device() == &dev, Device, "[metal.Kernel] ", what, "[", i,
                  "] is on ", v[i]->device().str(), ", another device than the first storage's");
  }
  const uint64_t threads = (uint64_t)group[0] * group[1] * group[2];
  const uint32_t limit = dev.adapter().max_threads_per_threadgroup();
  EMBER_CHECK(threads >= 1 && threads <= limit, Value, "[metal.Kernel] ", k.name, ": threads_per_threadgroup (",
              group[0], ", ", group[1], ", ", group[2], ") holds ", threads, " threads; this device allows 1 to ",
              limit);
  metal::Launch launch(dev, *k.src, k.name);
  for (const auto& c : k.constants) {
    switch (c.type) {
      case FunctionConstant::Type::Bool: launch.constant(c.index, c.value != 0); break;
      case FunctionConstant::Type::Int: launch.constant(c.index, (int32_t)c.value); break;
      case FunctionConstant::Type::UInt: launch.constant(c.index, (uint32_t)c.value); break;
      case FunctionConstant::Type::Float: launch.constant(c.index, (float)c.value); break;
    }
  }
  for (const auto& s : inputs) launch.input(metal::as_metal(*s));
  // Outputs may also be read (an in-place op's operand): registered as read and write for hazards.
  for (const auto& s : outputs) launch.inout(metal::as_metal(*s));
  for (const auto& b : scalars) launch.bytes(b.data(), b.size());
  const std::string key = k.src->hash + "\n" + k.name + "\n" + k.options_key;
  // The outputs are written, as by storage.cpp's in-place entry points: their versions move before and
  // after, so a graph that saved one of them raises InplaceModifiedError in backward.
  for (const auto& s : outputs) s->bump_version();
  launch.dispatch({grid[0], grid[1], grid[2]}, {group[0], group[1], group[2]});
  for (const auto& s : outputs) s->bump_version();
  // Counted once the dispatch is encoded: a compile error leaves nothing cached.
  std::lock_guard<std::mutex> lock(g_mu);
  Counts& c = g_counts[dev.device().index];
  if (c.keys.insert(key).second) ++c.compiles;
  else ++c.hits;
}

}  // namespace

void bind_metal_kernel(py::module_& m) {
  py::class_<UserKernel, std::shared_ptr<UserKernel>>(m, "_MetalKernel",
                                                      "A user's Metal kernel (source, function, options); see em.metal.Kernel.")
      .def_property_readonly("source_hash", [](const UserKernel& k) { return k.src->hash; },
                             "The digest of the source text (part of the pipeline cache key).");
  m.def("_metal_kernel_new", [](const std::string& source, const std::string& name, const std::string& label,
                                const py::list& constants) {
    auto k = std::make_shared<UserKernel>();
    k->src = std::make_shared<metal::KernelSource>(source, label);
    k->name = name;
    for (const auto& item : constants) {
      const py::tuple t = item.cast<py::tuple>();
      EMBER_CHECK(t.size() == 3, Value, "[metal] a constant is (index, type, value)");
      const std::string type = t[1].cast<std::string>();
      const FunctionConstant c = parse_function_constant(t[0], type, t[2]);
      k->constants.push_back(c);
      k->options_key += cat_str(c.index, ":", type, ":", c.value, ";");
    }
    return k;
  }, py::arg("source"), py::arg("name"), py::arg("label"), py::arg("constants"));
  m.def("_metal_kernel_call", [](const UserKernel& k, const std::vector<StoragePtr>& inputs,
                                 const std::vector<StoragePtr>& outputs, const std::vector<py::bytes>& scalars,
                                 const std::array<uint32_t, 3>& grid, const std::array<uint32_t, 3>& group) {
    std::vector<std::string> sc(scalars.begin(), scalars.end());
    py::gil_scoped_release release;  // a first call compiles (seconds under the emulator)
    call(k, inputs, outputs, sc, grid, group);
  }, py::arg("kernel"), py::arg("inputs"), py::arg("outputs"), py::arg("scalars"), py::arg("grid_threads"),
     py::arg("threads_per_threadgroup"));
  m.def("_metal_kernel_cache_info", [] {
    std::lock_guard<std::mutex> lock(g_mu);
    py::dict d;
    for (const auto& [index, c] : g_counts) {
      py::dict e;
      e["compiles"] = c.compiles;
      e["hits"] = c.hits;
      d[py::int_(index)] = e;
    }
    return d;
  }, "Per Metal device index: the em.metal.Kernel pipelines compiled there and the calls that reused one.");
}

}  // namespace ember::bind
