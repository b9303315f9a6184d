// Bindings for the Metal layer: which backend exists, the embedded kernel sources, and private entry points
// that run a kernel under the MSL emulator on numpy-backed buffers (tests and docs/metal.md use them).
#include "common.h"
#include "metal/adapter.h"
#include "metal/embedded.h"
#include "metal/emu/compiler.h"
#include "metal/emu/rewrite.h"

namespace ember::bind {

void bind_metal_storage(py::module_& m);  // metal_storage.cpp

namespace {

using metal::FunctionConstant;

metal::Dim3 dim3(const std::vector<uint32_t>& v, const char* what) {
  EMBER_CHECK(v.size() >= 1 && v.size() <= 3, Value, "[metal] ", what, " takes 1 to 3 sizes, got ", v.size());
  metal::Dim3 d;
  d.x = v[0];
  if (v.size() > 1) d.y = v[1];
  if (v.size() > 2) d.z = v[2];
  return d;
}

FunctionConstant constant(const py::tuple& t) {
  EMBER_CHECK(t.size() == 3, Value, "[metal] a constant is (index, type, value)");
  FunctionConstant c;
  c.index = t[0].cast<uint32_t>();
  const std::string ty = t[1].cast<std::string>();
  if (ty == "bool") c.type = FunctionConstant::Type::Bool;
  else if (ty == "int") c.type = FunctionConstant::Type::Int;
  else if (ty == "uint") c.type = FunctionConstant::Type::UInt;
  else if (ty == "float") c.type = FunctionConstant::Type::Float;
  else throw Error(ErrorKind::Value, "[metal] constant type must be bool, int, uint or float, got " + ty);
  c.value = t[2].cast<double>();
  return c;
}

// Compiles `source`, binds args[i] to [[buffer(i)]] (a writable C-contiguous numpy array: copied into a
// device buffer and back after the run; bytes: set_bytes; None: unbound), dispatches once and waits.
void emu_run(const std::string& source, const std::string& function, const py::list& args,
             const std::vector<uint32_t>& grid, const std::vector<uint32_t>& group, const py::list& constants,
             const std::vector<uint64_t>& threadgroup_memory, const std::string& label) {
  metal::Adapter& a = metal::emulator_adapter();
  std::vector<FunctionConstant> cs;
  for (const auto& c : constants) cs.push_back(constant(c.cast<py::tuple>()));
  const metal::Dim3 g = dim3(grid, "grid_threads"), tg = dim3(group, "threads_per_threadgroup");
  struct Bound {
    py::array array;
    metal::BufferHandle buffer;
  };
  std::vector<Bound> arrays;
  std::vector<std::string> bytes(args.size());
  std::vector<int> kinds(args.size(), 0);  // 0 unbound, 1 array, 2 bytes
  auto release_all = [&] {
    for (auto& b : arrays) a.release(b.buffer);
  };
  try {
    for (size_t i = 0; i < args.size(); ++i) {
      py::handle h = args[i];
      if (h.is_none()) continue;
      if (py::isinstance<py::bytes>(h)) {
        bytes[i] = h.cast<std::string>();
        kinds[i] = 2;
        continue;
      }
      EMBER_CHECK(py::isinstance<py::array>(h), Value, "[metal] argument ", i, " must be a numpy array, bytes or None");
      py::array arr = py::reinterpret_borrow<py::array>(h);
      EMBER_CHECK((arr.flags() & py::array::c_style) && arr.writeable(), Value, "[metal] argument ", i,
                  " must be a writable C-contiguous array");
      arrays.push_back({arr, a.new_buffer(arr.data(), (size_t)arr.nbytes())});
      kinds[i] = 1;
    }
    metal::PipelineHandle p;
    {
      py::gil_scoped_release nogil;  // a first use compiles (seconds): other Python threads go on meanwhile
      p = a.new_pipeline(source, label, function, cs);
    }
    std::unique_ptr<metal::CommandBuffer> cb = a.new_command_buffer();
    {
      py::gil_scoped_release nogil;
      metal::Encoder& enc = cb->compute_encoder();
      enc.set_pipeline(p);
      size_t ai = 0;
      for (size_t i = 0; i < kinds.size(); ++i) {
        if (kinds[i] == 1) enc.set_buffer(arrays[ai++].buffer, 0, (uint32_t)i);
        if (kinds[i] == 2) enc.set_bytes(bytes[i].data(), bytes[i].size(), (uint32_t)i);
      }
      for (size_t i = 0; i < threadgroup_memory.size(); ++i) enc.set_threadgroup_memory(threadgroup_memory[i], (uint32_t)i);
      enc.dispatch_threads(g, tg);
      enc.end_encoding();
      cb->commit();
    }
    a.release(p);
    cb->wait();
    for (auto& b : arrays) std::memcpy(b.array.mutable_data(), a.contents(b.buffer), (size_t)b.array.nbytes());
  } catch (...) {
    release_all();
    throw;
  }
  release_all();
}

}  // namespace

void bind_metal(py::module_& m) {
#if defined(EMBER_HAS_METAL_CPP)
  m.attr("_metal_apple_built") = true;
  // True when the metal-cpp adapter finds a device (a headless or virtual Mac may have none).
  m.def("_metal_apple_available", [] {
    try {
      metal::apple_adapter();
      return true;
    } catch (const Error&) {
      return false;
    }
  });
#else
  m.attr("_metal_apple_built") = false;
  m.def("_metal_apple_available", [] { return false; });
#endif
  m.def("_metal_emu_run", &emu_run, py::arg("source"), py::arg("function"), py::arg("args"), py::arg("grid_threads"),
        py::arg("threads_per_threadgroup"), py::arg("constants") = py::list(),
        py::arg("threadgroup_memory") = std::vector<uint64_t>{}, py::arg("label") = "kernel.metal");
  m.def("_metal_emu_stats", [] {
    const auto s = metal::emu::compile_stats();
    py::dict d;
    d["compiles"] = s.compiles;
    d["disk_hits"] = s.disk_hits;
    d["memory_hits"] = s.memory_hits;
    return d;
  });
  m.def("_metal_emu_cache_dir", &metal::emu::cache_dir);
  m.def("_metal_rewrite", [](const std::string& src, const std::string& name, bool static_mode) {
    return metal::emu::rewrite_msl(src, name, static_mode ? metal::emu::RewriteMode::Static
                                                          : metal::emu::RewriteMode::Emulate).text;
  }, py::arg("source"), py::arg("name") = "kernel.metal", py::arg("static") = false);
  m.def("_metal_source", [](const std::string& name) -> py::object {
    const char* s = metal::embedded_source(name.c_str());
    if (!s) return py::none();
    return py::str(s);
  }, py::arg("name"));
  bind_metal_policy(m);
  bind_metal_storage(m);
  m.def("_metal_sources", [] {
    std::vector<std::string> names;
    for (int i = 0; i < metal::embedded_source_count(); ++i) names.push_back(metal::embedded_source_name(i));
    return names;
  });
}

}  // namespace ember::bind
