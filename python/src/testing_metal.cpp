// The testing extension's Metal hooks: the emulator run directly on numpy-backed buffers (its own emulator
// instance: this module links its own copy of the backend), its compile counters, the rewriter, the embedded
// kernel sources and whether the Apple backend was built. Tests and docs/metal.md use them; ember never does.
#include <cmath>
#include <map>
#include <memory>

#include "common.h"
#include "metal/adapter.h"
#include "metal/embedded.h"
#include "metal/emu/compiler.h"
#include "msl/rewrite.h"
#include "emu/runtime.h"

namespace ember::bind {

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

}  // namespace

namespace {

// Compiles `source`, binds args[i] to [[buffer(i)]] (a writable C-contiguous numpy array: copied into a
// device buffer and back after the run; bytes: set_bytes; None: unbound), dispatches once and waits.
void emu_run(const std::string& source, const std::string& function, const py::list& args,
             const std::vector<uint32_t>& grid, const std::vector<uint32_t>& group, const py::list& constants,
             const std::vector<uint64_t>& threadgroup_memory, const std::string& label) {
  metal::Adapter& a = metal::emulator_adapter();
  const std::vector<FunctionConstant> cs = parse_function_constants(constants, "metal");
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
      metal::LibraryHandle lib = a.new_library(source, label);
      try {
        p = a.new_pipeline(lib, function, cs);
      } catch (...) {
        a.release(lib);
        throw;
      }
      a.release(lib);
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

// Runs `steps` on numpy-backed buffers through the emulator's command buffers, as a backend would encode
// them, without ember's hazard tracker (tests of the emulator's ordering): ("dispatch", function, [buffer
// index or None per [[buffer(n)]]], grid, group), ("barrier",), ("commit",) (commits the open command
// buffer; a new one opens), ("update_fence", k), ("wait_fence", k), ("read", b) (a host read of buffer b
// now, before any wait). At the end the open buffer is committed, every buffer waited on in commit order
// and the arrays receive the buffers' contents. Returns the host reads, as bytes.
py::list emu_sequence(const std::string& source, const py::list& arrays, const py::list& steps,
                      const std::string& label) {
  metal::Adapter& a = metal::emulator_adapter();
  std::vector<py::array> arr;
  std::vector<metal::BufferHandle> bufs;
  std::map<int64_t, metal::FenceHandle> fences;
  std::map<std::string, metal::PipelineHandle> pipes;
  std::vector<std::unique_ptr<metal::CommandBuffer>> cbs;
  py::list reads;
  auto cleanup = [&] {
    for (auto& cb : cbs) {
      try {
        if (cb) cb->wait();
      } catch (...) {
      }
    }
    cbs.clear();
    for (auto& [n, p] : pipes) a.release(p);
    for (auto& [k, f] : fences) a.release(f);
    for (auto& b : bufs) a.release(b);
  };
  try {
    for (const auto& h : arrays) {
      py::array x = py::reinterpret_borrow<py::array>(h);
      EMBER_CHECK((x.flags() & py::array::c_style) && x.writeable(), Value, "[metal] arrays must be writable C-contiguous");
      arr.push_back(x);
      bufs.push_back(a.new_buffer(x.data(), (size_t)x.nbytes()));
    }
    std::unique_ptr<metal::CommandBuffer> cb = a.new_command_buffer();
    auto fence = [&](int64_t k) {
      auto it = fences.find(k);
      return it != fences.end() ? it->second : (fences[k] = a.new_fence());
    };
    for (const auto& h : steps) {
      const py::tuple t = h.cast<py::tuple>();
      const std::string op = t[0].cast<std::string>();
      if (op == "dispatch") {
        const std::string fn = t[1].cast<std::string>();
        if (!pipes.count(fn)) {
          const metal::LibraryHandle lib = a.new_library(source, label);
          try {
            pipes[fn] = a.new_pipeline(lib, fn, {});
          } catch (...) {
            a.release(lib);
            throw;
          }
          a.release(lib);
        }
        metal::Encoder& enc = cb->compute_encoder();
        enc.set_pipeline(pipes[fn]);
        const py::list bind = t[2].cast<py::list>();
        for (size_t i = 0; i < bind.size(); ++i)
          if (!bind[i].is_none()) enc.set_buffer(bufs.at(bind[i].cast<size_t>()), 0, (uint32_t)i);
        enc.dispatch_threads(dim3(t[3].cast<std::vector<uint32_t>>(), "grid_threads"),
                             dim3(t[4].cast<std::vector<uint32_t>>(), "threads_per_threadgroup"));
      } else if (op == "barrier") {
        cb->compute_encoder().memory_barrier();
      } else if (op == "update_fence") {
        cb->compute_encoder().update_fence(fence(t[1].cast<int64_t>()));
      } else if (op == "wait_fence") {
        cb->compute_encoder().wait_for_fence(fence(t[1].cast<int64_t>()));
      } else if (op == "commit") {
        cb->commit();
        cbs.push_back(std::move(cb));
        cb = a.new_command_buffer();
      } else if (op == "read") {
        const size_t b = t[1].cast<size_t>();
        reads.append(py::bytes(static_cast<const char*>(a.contents(bufs.at(b))), a.length(bufs.at(b))));
      } else {
        throw Error(ErrorKind::Value, "[metal] unknown step " + op);
      }
    }
    cb->commit();
    cbs.push_back(std::move(cb));
    std::unique_ptr<Error> first;
    {
      py::gil_scoped_release nogil;
      for (auto& c : cbs) {
        try {
          c->wait();
        } catch (const Error& e) {
          if (!first) first = std::make_unique<Error>(e);
        }
      }
    }
    for (size_t i = 0; i < arr.size(); ++i) std::memcpy(arr[i].mutable_data(), a.contents(bufs[i]), (size_t)arr[i].nbytes());
    if (first) throw *first;
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
  return reads;
}

}  // namespace

void bind_metal_testing(py::module_& m) {
#if defined(EMBER_HAS_METAL_CPP)
  m.attr("metal_apple_built") = true;
  // True when the metal-cpp adapter finds a device (a headless or virtual Mac may have none).
  m.def("metal_apple_available", [] {
    try {
      metal::apple_adapter();
      return true;
    } catch (const Error&) {
      return false;
    }
  });
#else
  m.attr("metal_apple_built") = false;
  m.def("metal_apple_available", [] { return false; });
#endif
  m.def("metal_emu_run", &emu_run, py::arg("source"), py::arg("function"), py::arg("args"), py::arg("grid_threads"),
        py::arg("threads_per_threadgroup"), py::arg("constants") = py::list(),
        py::arg("threadgroup_memory") = std::vector<uint64_t>{}, py::arg("label") = "kernel.metal");
  m.def("metal_emu_sequence", &emu_sequence, py::arg("source"), py::arg("arrays"), py::arg("steps"),
        py::arg("label") = "kernel.metal");
  m.def("metal_emu_stats", [] {
    const auto s = metal::emu::compile_stats();
    py::dict d;
    d["compiles"] = s.compiles;
    d["disk_hits"] = s.disk_hits;
    d["memory_hits"] = s.memory_hits;
    return d;
  });
  m.def("metal_emu_cache_dir", &metal::emu::cache_dir);
  m.def("metal_emu_fibers", [] { return std::string(metal::emu::fiber_kind()); });
  m.def("metal_rewrite", [](const std::string& src, const std::string& name, bool static_mode) {
    return metal::emu::rewrite_msl(src, name, static_mode ? metal::emu::RewriteMode::Static
                                                          : metal::emu::RewriteMode::Emulate).text;
  }, py::arg("source"), py::arg("name") = "kernel.metal", py::arg("static") = false);
  m.def("metal_source", [](const std::string& name) -> py::object {
    const char* s = metal::embedded_source(name.c_str());
    if (!s) return py::none();
    return py::str(s);
  }, py::arg("name"));
  m.def("metal_sources", [] {
    std::vector<std::string> names;
    for (int i = 0; i < metal::embedded_source_count(); ++i) names.push_back(metal::embedded_source_name(i));
    return names;
  });
  bind_metal_policy(m);
}

}  // namespace ember::bind
