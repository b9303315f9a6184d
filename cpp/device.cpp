// The device registry (one DeviceBackend per device, others than the CPU through providers) and the
// one global random generator every device draws from.
#include "device.h"

#include <atomic>

#include "cpu/cpu_backend.h"

namespace ember {
namespace {

// Indexed by DeviceKind; written at load time by the libraries that provide a backend.
std::atomic<BackendProvider> g_providers[kNumDeviceKinds] = {};

BackendProvider provider(DeviceKind kind) { return g_providers[(int)kind].load(std::memory_order_acquire); }

DeviceBackend* find_backend(Device d) {
  switch (d.kind) {
    case DeviceKind::Cpu: return d.index == 0 ? &cpu::backend() : nullptr;
    case DeviceKind::Metal:
    case DeviceKind::Cuda: {
      BackendProvider p = provider(d.kind);
      return p && d.index >= 0 ? p(d.index) : nullptr;
    }
  }
  return nullptr;
}

const char* why_absent(Device d) {
  switch (d.kind) {
    case DeviceKind::Cpu: return "the CPU has only device 0";
    case DeviceKind::Metal:
      return provider(d.kind) ? "no such Metal device (set EMBER_METAL=emulate to use the emulator)"
                              : "this build has no Metal backend";
    case DeviceKind::Cuda:
      return provider(d.kind) ? "no such CUDA device (set EMBER_CUDA=emulate to use the emulator)"
                              : "this build has no CUDA backend";
  }
  return "unknown device kind";
}

// splitmix64's finaliser: seeds are mixed once, so nearby seeds give unrelated streams.
uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
std::atomic<uint64_t> g_seed{0x853c49e6748fea9bULL};
std::atomic<uint64_t> g_counter{0};

}  // namespace

void set_backend_provider(DeviceKind kind, BackendProvider p) {
  EMBER_CHECK(kind != DeviceKind::Cpu, Value, "[device] the CPU backend is built in");
  g_providers[(int)kind].store(p, std::memory_order_release);
}

DeviceBackend& device_backend(Device d, const char* op) {
  if (DeviceBackend* b = find_backend(d)) return *b;
  throw Error(ErrorKind::Device, cat_str("[", op, "] device ", d.str(), " is not available (", why_absent(d), ")"));
}

bool device_available(Device d) { return find_backend(d) != nullptr; }

namespace {
struct LocalGen {
  bool on = false;
  uint64_t seed = 0, counter = 0;
};
thread_local LocalGen tl_gen;
}  // namespace

void rng_install(uint64_t mixed_seed, uint64_t counter) {
  EMBER_CHECK(!tl_gen.on, Value, "[Generator] a generator is already installed on this thread");
  tl_gen = {true, mixed_seed, counter};
}

uint64_t rng_uninstall() {
  tl_gen.on = false;
  return tl_gen.counter;
}

uint64_t rng_mix(uint64_t seed) { return mix(seed); }

RngDraw rng_reserve(uint64_t n) {
  if (tl_gen.on) {  // an em.Generator's own stream: the draw sees the same (seed, counter) scheme
    const RngDraw d{tl_gen.seed, tl_gen.counter};
    tl_gen.counter += n;
    return d;
  }
  // The seed is read first: a draw racing manual_seed gets either stream, never a torn one.
  const uint64_t seed = g_seed.load();
  return {seed, g_counter.fetch_add(n)};
}

void manual_seed(uint64_t seed) {
  g_seed.store(mix(seed));
  g_counter.store(0);
}

RngDraw rng_state() { return {g_seed.load(), g_counter.load()}; }

void set_rng_state(uint64_t seed, uint64_t counter) {
  g_seed.store(seed);  // already mixed: it was read by rng_state
  g_counter.store(counter);
}

}  // namespace ember
