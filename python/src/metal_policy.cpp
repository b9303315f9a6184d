// Test hooks for the Metal policy classes (cpp/metal/policy/, and the pool and cache in cpp/gpu/), instantiated over integer handles so
// tests/test_metal_policy.py can drive them without a device: _C_testing.metal_policy.*.
#include <chrono>
#include <thread>

#include "common.h"
#include "metal/emu/compiler.h"
#include "gpu/buffer_pool.h"
#include "gpu/pipeline_cache.h"
#include "metal/policy/commit_policy.h"
#include "metal/policy/hazard_tracker.h"

namespace ember::bind {
namespace {

using namespace metal::policy;
using gpu::BufferPool;
using gpu::PipelineCache;
using gpu::bucket_size;

// A pool over fake buffers: handles count up from 1; released handles are recorded in order.
struct FakePool {
  int64_t next = 1;
  std::vector<int64_t> released;
  std::vector<size_t> made;
  BufferPool<int64_t> pool;
  FakePool(size_t limit, size_t cache_limit, size_t page)
      : pool([this](size_t n) { made.push_back(n); return next++; }, [this](int64_t b) { released.push_back(b); },
             limit, cache_limit, page) {}
};

// A pipeline cache whose "compile" takes a while and counts itself; function "bad" fails to compile.
struct FakeCache {
  PipelineCache<int64_t> cache;
  std::atomic<int64_t> next{1};
  int64_t get(const std::string& source, const std::string& fn, const std::string& constants, int sleep_us) {
    return cache.get({metal::emu::digest(source), fn, constants}, [&] {
      if (sleep_us) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      EMBER_CHECK(fn != "bad", Value, "[metal] compile error in ", fn);
      return next++;
    });
  }
  // n threads each ask for every key in `fns` (same source); returns the handle each got, per thread.
  std::vector<std::vector<int64_t>> stress(int threads, const std::string& source, const std::vector<std::string>& fns) {
    std::vector<std::vector<int64_t>> got(threads);
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        for (const auto& f : fns) got[t].push_back(get(source, f, "", 200));
      });
    for (auto& t : ts) t.join();
    return got;
  }
};

}  // namespace

void bind_metal_policy(py::module_& parent) {
  py::module_ m = parent.def_submodule("metal_policy", "test hooks for cpp/metal/policy over integer handles");
  m.def("bucket_size", &bucket_size, py::arg("n"), py::arg("page"));
  py::class_<FakePool>(m, "BufferPool")
      .def(py::init<size_t, size_t, size_t>(), py::arg("memory_limit"), py::arg("cache_limit"), py::arg("page") = 16384)
      .def("alloc", [](FakePool& p, size_t n) {
        size_t got = 0;
        const int64_t b = p.pool.alloc(n, &got);
        return py::make_tuple(b, got);
      })
      .def("free", [](FakePool& p, int64_t b, size_t size) { p.pool.free(b, size); })
      .def("empty_cache", [](FakePool& p) { p.pool.empty_cache(); })
      .def("set_memory_limit", [](FakePool& p, size_t n) { p.pool.set_memory_limit(n); })
      .def("set_cache_limit", [](FakePool& p, size_t n) { p.pool.set_cache_limit(n); })
      .def("reset_peak", [](FakePool& p) { p.pool.reset_peak(); })
      .def_readonly("released", &FakePool::released)
      .def_readonly("made", &FakePool::made)
      .def("stats", [](FakePool& p) {
        const auto s = p.pool.stats();
        py::dict d;
        d["active_bytes"] = s.active_bytes, d["cached_bytes"] = s.cached_bytes, d["peak_bytes"] = s.peak_bytes;
        d["cached_buffers"] = s.cached_buffers, d["hits"] = s.hits, d["misses"] = s.misses;
        d["memory_limit"] = s.memory_limit, d["cache_limit"] = s.cache_limit;
        return d;
      });
  py::class_<HazardTracker<int64_t>>(m, "HazardTracker")
      .def(py::init<>())
      .def("dispatch", &HazardTracker<int64_t>::dispatch, py::arg("reads"), py::arg("writes"))
      .def("end_encoder", &HazardTracker<int64_t>::end_encoder, py::arg("id"))
      .def("fences_for", [](const HazardTracker<int64_t>& h, const std::vector<int64_t>& reads,
                            const std::vector<int64_t>& writes) { return h.fences_for(reads, writes); },
           py::arg("reads"), py::arg("writes") = std::vector<int64_t>{})
      .def("completed", &HazardTracker<int64_t>::completed, py::arg("id"))
      .def_property_readonly("barriers", &HazardTracker<int64_t>::barriers)
      .def_property_readonly("pending_outputs", &HazardTracker<int64_t>::pending_outputs);
  py::class_<FakeCache>(m, "PipelineCache")
      .def(py::init<>())
      .def("get", &FakeCache::get, py::arg("source"), py::arg("function"), py::arg("constants") = "",
           py::arg("sleep_us") = 0)
      .def("stress", &FakeCache::stress, py::arg("threads"), py::arg("source"), py::arg("functions"),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("size", [](FakeCache& c) { return c.cache.size(); })
      .def_property_readonly("compiles", [](FakeCache& c) { return c.cache.compiles(); })
      .def_property_readonly("hits", [](FakeCache& c) { return c.cache.hits(); });
  py::class_<CommitPolicy>(m, "CommitPolicy")
      .def(py::init<uint32_t, size_t>(), py::arg("max_ops"), py::arg("max_mb"))
      .def_static("from_env", &CommitPolicy::from_env, py::arg("ops") = 40, py::arg("mb") = 40)
      .def("dispatch", &CommitPolicy::dispatch, py::arg("bytes"))
      .def("committed", &CommitPolicy::committed)
      .def_property_readonly("ops", &CommitPolicy::ops)
      .def_property_readonly("bytes", &CommitPolicy::bytes);
}

}  // namespace ember::bind
