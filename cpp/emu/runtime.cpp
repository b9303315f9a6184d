// The emulators' execution engine (Metal's and CUDA's): threadgroups in parallel on ember's pool; within a group, one fiber per
// thread (a small x86-64 context switch, ucontext elsewhere), run in a varying but deterministic order
// between barriers, so a kernel that lacks a barrier reads stale threadgroup memory and fails its test.
// macOS declares the ucontext routines only under _XOPEN_SOURCE (else <ucontext.h> stops with #error),
// which hides MAP_ANONYMOUS / MAP_NORESERVE unless _DARWIN_C_SOURCE is set too; both before any header.
#if defined(__APPLE__)
#ifndef _XOPEN_SOURCE
#define _XOPEN_SOURCE 700
#endif
#ifndef _DARWIN_C_SOURCE
#define _DARWIN_C_SOURCE 1
#endif
#endif
#include "emu/runtime.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "cpu/parallel.h"
#include "error.h"
#include "emu/faults.h"

#if defined(__SANITIZE_THREAD__)
#define EMU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define EMU_TSAN 1
#endif
#endif
#ifdef EMU_TSAN
#include <sanitizer/tsan_interface.h>
extern "C" void AnnotateIgnoreReadsBegin(const char* f, int l);
extern "C" void AnnotateIgnoreReadsEnd(const char* f, int l);
extern "C" void AnnotateIgnoreWritesBegin(const char* f, int l);
extern "C" void AnnotateIgnoreWritesEnd(const char* f, int l);
// The runtime's own bookkeeping is shared by a group's fibers and its scheduler without
// happens-before on purpose (that would hide the kernel's races), so TSan is told to skip it.
#define EMU_IGNORE_BEGIN() (AnnotateIgnoreReadsBegin(__FILE__, __LINE__), AnnotateIgnoreWritesBegin(__FILE__, __LINE__))
#define EMU_IGNORE_END() (AnnotateIgnoreWritesEnd(__FILE__, __LINE__), AnnotateIgnoreReadsEnd(__FILE__, __LINE__))
#else
#define EMU_IGNORE_BEGIN() ((void)0)
#define EMU_IGNORE_END() ((void)0)
#endif

#ifdef EMU_ASAN
// ASan must be told of every stack switch, or it takes the fiber's frames for an overflow of the
// scheduler's stack.
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

// EMBER_EMU_UCONTEXT forces the portable path (what arm64 macOS compiles) on x86-64 Linux too, so CI runs it.
#if defined(__x86_64__) && defined(__linux__) && !defined(EMBER_EMU_UCONTEXT)
#define EMU_ASM_SWITCH 1
// ember_emu_switch(save, load): saves the callee-saved registers and the FP control words on the current
// stack, stores the stack pointer in *save and resumes the context whose stack pointer is `load`.
extern "C" void ember_emu_switch(void** save, void* load);
extern "C" void ember_emu_trampoline();
asm(R"(
  .pushsection .text
  .globl ember_emu_switch
  .hidden ember_emu_switch
  .type ember_emu_switch, @function
ember_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ember_emu_switch, .-ember_emu_switch
  .globl ember_emu_trampoline
  .hidden ember_emu_trampoline
  .type ember_emu_trampoline, @function
ember_emu_trampoline:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size ember_emu_trampoline, .-ember_emu_trampoline
  .popsection
)");
#else
#include <ucontext.h>
// The ucontext routines are deprecated on macOS (still present and working); this file is their only user.
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
#endif
#endif

namespace ember::emu {
namespace {

#if defined(EMU_TSAN) || defined(EMU_ASAN)
constexpr size_t kStackBytes = 512 * 1024;
#else
constexpr size_t kStackBytes = 64 * 1024;  // kernels keep small locals; a guard page catches overflow
#endif
// Bytes after each threadgroup variable that must still hold kGuardByte when the group is done: a
// kernel that writes past the end of a threadgroup array is reported, not left to corrupt memory.
constexpr uint64_t kGuardBytes = 256;
constexpr unsigned char kGuardByte = 0xa5;
// A group's threadgroup memory (its variables and their guard bands) is a mapping of its own between
// inaccessible pages, so a write far outside it through a pointer faults at once (a wild access)
// instead of reaching the scheduler's state. Only address space: MAP_NORESERVE, PROT_NONE.
// Only the first 2 * (the launch's limit) bytes are accessible (arena_window): the rest stays a guard.
constexpr size_t kArenaBytes = 256 * 1024;  // above every dialect's limit plus guards
constexpr size_t kArenaGuard = size_t(1) << 20;

char* map_arena() {
  void* p = ::mmap(nullptr, kArenaBytes + 2 * kArenaGuard, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  EMBER_CHECK(p != MAP_FAILED, Memory, "[emulator] cannot map group memory for the emulator");
  return static_cast<char*>(p) + kArenaGuard;
}

struct Fiber {
#ifdef EMU_ASM_SWITCH
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
};

struct Stack {
  char* base = nullptr;  // lowest usable byte (a PROT_NONE guard page lies below it)
  size_t size = 0;
};

Stack make_stack() {
  const size_t page = (size_t)::sysconf(_SC_PAGESIZE);
  void* p = ::mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  EMBER_CHECK(p != MAP_FAILED, Memory, "[emulator] cannot map a fiber stack for the emulator");
  ::mprotect(p, page, PROT_NONE);
  return {static_cast<char*>(p) + page, kStackBytes};
}

void fiber_main(void* arg);

#ifdef EMU_ASM_SWITCH
void init_fiber(Fiber& f, const Stack& s, void* arg) {
#ifdef EMU_ASAN
  // A reused stack may still carry the redzones of a fiber that never returned (it ended in yield,
  // or its group failed); a new fiber starts on clean memory.
  __asan_unpoison_memory_region(s.base, s.size);
#endif
  const uintptr_t top = (uintptr_t)(s.base + s.size) & ~(uintptr_t)15;
  uint64_t* frame = reinterpret_cast<uint64_t*>(top - 128);
  frame[0] = 0x1F80ull | (0x037Full << 32);  // default MXCSR, x87 control word
  frame[1] = frame[2] = 0;                   // r15, r14
  frame[3] = (uint64_t)(uintptr_t)&fiber_main;  // r13: the function the trampoline calls
  frame[4] = (uint64_t)(uintptr_t)arg;          // r12: its argument
  frame[5] = frame[6] = 0;                      // rbx, rbp
  frame[7] = (uint64_t)(uintptr_t)&ember_emu_trampoline;
  f.sp = frame;
}
inline void switch_to(Fiber& from, Fiber& to) { ember_emu_switch(&from.sp, to.sp); }
#else
void uc_entry(unsigned hi, unsigned lo) { fiber_main((void*)(((uintptr_t)hi << 32) | (uintptr_t)lo)); }
void init_fiber(Fiber& f, const Stack& s, void* arg) {
#ifdef EMU_ASAN
  __asan_unpoison_memory_region(s.base, s.size);
#endif
  ::getcontext(&f.uc);
  f.uc.uc_stack.ss_sp = s.base;
  f.uc.uc_stack.ss_size = s.size;
  f.uc.uc_link = nullptr;
  const uintptr_t a = (uintptr_t)arg;
  ::makecontext(&f.uc, (void (*)())uc_entry, 2, (unsigned)(a >> 32), (unsigned)(a & 0xffffffffu));
}
inline void switch_to(Fiber& from, Fiber& to) { ::swapcontext(&from.uc, &to.uc); }
#endif

enum State : uint8_t { Ready, WaitBarrier, WaitSimd, Done };

struct Group;
struct FiberArg {
  Group* g;
  uint32_t i;
};

// The state of the threadgroup a worker is running; reused from group to group.
struct Group {
  const Launch* launch = nullptr;
  uint32_t count = 0, simds = 0;
  bool fibered = false;
  std::vector<msl_abi::Thread> threads;
  std::vector<Fiber> fibers;
  std::vector<FiberArg> args;
  std::vector<uint8_t> state;
  std::vector<uint32_t> simd_op;
  std::vector<uint64_t> simd_mask;
  std::vector<uint32_t> sg_counter;
  std::vector<char> simd_slots;
  std::vector<int64_t> site_off;
  std::vector<std::pair<uint64_t, uint64_t>> guards;  // (offset, bytes) of each variable's guard band
  std::vector<uint64_t> param_off;
  // The arena holds the variables and, after each, a guard band (not counted against the dialect's limit).
  char* tg_mem = map_arena();
  size_t window = 0;  // the accessible bytes of tg_mem
  uint64_t tg_used = 0, tg_logical = 0, tg_limit = kMaxThreadgroupMemory;
  bool failed = false;
  bool ignoring = false;  // the scheduler's TSan ignore scope is open (a fault's jump skips its end)
  ErrorKind error_kind = ErrorKind::Value;
  std::string error;
  Fiber* sched = nullptr;
#ifdef EMU_ASAN
  const void* asan_sched_bottom = nullptr;  // the scheduler's stack, learned when a fiber first runs
  size_t asan_sched_size = 0;
#endif
#ifdef EMU_TSAN
  std::vector<void*> tsan_fibers;
  std::vector<char> tsan_first;
  void* tsan_sched = nullptr;
  char barrier_sync = 0, done_sync = 0;
  std::vector<char> simd_sync;
#endif
  Group() = default;
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  ~Group() { ::munmap(tg_mem - kArenaGuard, kArenaBytes + 2 * kArenaGuard); }
};

struct Worker {
  std::vector<Stack> stacks;
  Fiber sched;
  Group group;
  FaultJump jump;
  void* altstack = fault_thread_init();
  const char* stack_lo = nullptr;  // this thread's own stack, where kernels without barriers run
  const char* stack_hi = nullptr;
  Worker() {
#if defined(__linux__)
    pthread_attr_t a;
    void* addr = nullptr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &a) == 0) {
      if (pthread_attr_getstack(&a, &addr, &size) == 0) stack_lo = static_cast<char*>(addr), stack_hi = stack_lo + size;
      pthread_attr_destroy(&a);
    }
#endif
  }
  ~Worker() {
    fault_thread_exit(altstack);
    const size_t page = (size_t)::sysconf(_SC_PAGESIZE);
    for (const Stack& s : stacks) {
#ifdef EMU_ASAN
      // The redzones of fibers that ended in yield would outlive the mapping: whatever the kernel maps
      // at this address next (a Python arena, say) would then read as a stack-buffer-underflow.
      __asan_unpoison_memory_region(s.base, s.size);
#endif
      ::munmap(s.base - page, s.size + page);
    }
  }
};
Worker& worker() {
  thread_local std::unique_ptr<Worker> w = std::make_unique<Worker>();
  return *w;
}

thread_local msl_abi::Thread* t_cur = nullptr;

std::string where(const Group& g, uint32_t i) {
  const msl_abi::Thread& t = g.threads[i];
  const Dialect& d = *g.launch->dialect;
  return cat_str("[", d.tag, "] kernel '", g.launch->kernel->name, "' (", g.launch->label, ") ", d.group, " (", t.tgpig[0],
                 ", ", t.tgpig[1], ", ", t.tgpig[2], ") thread (", t.tpitg[0], ", ", t.tpitg[1], ", ", t.tpitg[2],
                 "): ");
}

void fail(Group& g, uint32_t i, const std::string& msg, ErrorKind kind = ErrorKind::Value) {
  if (g.failed) return;
  g.failed = true;
  g.error_kind = kind;
  g.error = where(g, i) + msg;
}

// Hands control from fiber i back to its group's scheduler.
void yield(Group& g, uint32_t i) {
  EMU_IGNORE_BEGIN();
  Fiber& me = g.fibers[i];
  Fiber& sched = *g.sched;
#ifdef EMU_TSAN
  void* to = g.tsan_sched;
#endif
  EMU_IGNORE_END();
#ifdef EMU_TSAN
  __tsan_switch_to_fiber(to, __tsan_switch_to_fiber_no_sync);
#endif
#ifdef EMU_ASAN
  void* fake = nullptr;
  // A finished fiber is never resumed: a null save slot lets ASan drop its fake stack.
  __sanitizer_start_switch_fiber(g.state[i] == Done ? nullptr : &fake, g.asan_sched_bottom, g.asan_sched_size);
#endif
  switch_to(me, sched);
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

void fiber_main(void* arg) {
  FiberArg* a = static_cast<FiberArg*>(arg);
  Group& g = *a->g;
  const uint32_t i = a->i;
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g.asan_sched_bottom, &g.asan_sched_size);
#endif
  g.launch->kernel->entry(&g.threads[i]);  // never throws: a fault jumps back to run_group (msl_abi.h)
  EMU_IGNORE_BEGIN();
  g.state[i] = Done;
  EMU_IGNORE_END();
#ifdef EMU_TSAN
  __tsan_release(&g.done_sync);
#endif
  yield(g, i);
  std::abort();  // a finished fiber is never resumed
}

Group& group_of(msl_abi::Thread* t) {
  Group& g = *static_cast<Group*>(t->group);
  if (!g.fibered) fault_raise(ErrorKind::Value, "barrier or simd op in a kernel the emulator runs without fibers");
  return g;
}

// ---- the services a kernel module calls ------------------------------------------------------------
msl_abi::Thread* api_current() {
  EMU_IGNORE_BEGIN();
  msl_abi::Thread* t = t_cur;
  EMU_IGNORE_END();
  return t;
}

void api_barrier(msl_abi::Thread* t) {
  Group& g = group_of(t);
#ifdef EMU_TSAN
  __tsan_release(&g.barrier_sync);
#endif
  EMU_IGNORE_BEGIN();
  g.state[t->tiitg] = WaitBarrier;
  EMU_IGNORE_END();
  yield(g, t->tiitg);
#ifdef EMU_TSAN
  __tsan_acquire(&g.barrier_sync);
#endif
}

char* api_simd_begin(msl_abi::Thread* t) {
  Group& g = group_of(t);
  EMU_IGNORE_BEGIN();
  const uint32_t parity = g.sg_counter[t->simd_id] & 1;
  EMU_IGNORE_END();
  return g.simd_slots.data() + (size_t)(t->simd_id * 2 + parity) * msl_abi::kSimdWidth * msl_abi::kSimdSlotBytes;
}

uint64_t api_simd_end(msl_abi::Thread* t, uint32_t op) {
  Group& g = group_of(t);
#ifdef EMU_TSAN
  __tsan_release(&g.simd_sync[t->simd_id]);
#endif
  EMU_IGNORE_BEGIN();
  g.state[t->tiitg] = WaitSimd;
  g.simd_op[t->tiitg] = op;
  EMU_IGNORE_END();
  yield(g, t->tiitg);
#ifdef EMU_TSAN
  __tsan_acquire(&g.simd_sync[t->simd_id]);
#endif
  EMU_IGNORE_BEGIN();
  const uint64_t m = g.simd_mask[t->tiitg];
  EMU_IGNORE_END();
  return m;
}

void* api_tg_alloc(msl_abi::Thread* t, uint32_t site, uint64_t size, uint64_t align) {
  Group& g = *static_cast<Group*>(t->group);
  EMU_IGNORE_BEGIN();
  if (site >= g.site_off.size()) g.site_off.resize(site + 1, -1);
  if (g.site_off[site] < 0) {
    const uint64_t off = (g.tg_used + align - 1) / align * align;
    const uint64_t logical = (g.tg_logical + align - 1) / align * align + size;
    if (logical > g.tg_limit || off + size + kGuardBytes > g.window) {
      EMU_IGNORE_END();
      char m[160];
      std::snprintf(m, sizeof m, "the kernel's %s memory reaches %llu bytes; %s allows %llu",
                    g.launch->dialect->memory, (unsigned long long)logical, g.launch->dialect->api,
                    (unsigned long long)g.tg_limit);
      fault_raise(ErrorKind::Value, m);  // no exception through the kernel's frames (msl_abi.h)
    }
    g.site_off[site] = (int64_t)off;
    g.tg_logical = logical;
    g.tg_used = off + size + kGuardBytes;
    std::memset(g.tg_mem + off, 0xff, size);  // uninitialised threadgroup memory reads as NaN / all ones
    std::memset(g.tg_mem + off + size, kGuardByte, kGuardBytes);
    g.guards.emplace_back(off + size, kGuardBytes);
  }
  void* p = g.tg_mem + g.site_off[site];
  EMU_IGNORE_END();
  return p;
}

void* api_tg_param(msl_abi::Thread* t, uint32_t index, uint64_t* size) {
  Group& g = *static_cast<Group*>(t->group);
  if (index >= g.param_off.size() || g.launch->threadgroup_mem[index] == 0) {
    if (g.launch->dialect == &kCudaDialect)
      fault_raise(ErrorKind::Value, "the kernel uses extern __shared__ memory; the launch gave shared_mem=0");
    char m[96];
    std::snprintf(m, sizeof m, "[[threadgroup(%u)]] has no memory set on the encoder", index);
    fault_raise(ErrorKind::Value, m);
  }
  *size = g.launch->threadgroup_mem[index];
  return g.tg_mem + g.param_off[index];
}

void api_fault(msl_abi::Thread*, uint32_t kind, const char* message) {
  fault_raise(kind == msl_abi::kFaultIndex ? ErrorKind::Index : ErrorKind::Value, message);
}

const msl_abi::Api kApi = {msl_abi::kVersion, api_current, api_barrier, api_simd_begin, api_simd_end,
                           api_tg_alloc, api_tg_param, api_fault};

// ---- the scheduler ----------------------------------------------------------------------------------
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Completes simd ops whose lanes have all arrived, or a barrier that every thread reached.
// Returns 0 to keep running, 1 when every thread has finished, -1 on an error.
int resolve(Group& g) {
  bool progressed = false;
  for (uint32_t s = 0; s < g.simds; ++s) {
    const uint32_t b = s * msl_abi::kSimdWidth, e = std::min(g.count, b + msl_abi::kSimdWidth);
    uint64_t mask = 0;
    uint32_t op = ~0u;
    for (uint32_t i = b; i < e; ++i) {
      if (g.state[i] != WaitSimd) continue;
      mask |= 1ull << (i - b);
      if (op == ~0u) {
        op = g.simd_op[i];
      } else if (op != g.simd_op[i]) {
        fail(g, i, cat_str("the lanes of ", g.launch->dialect->simd, " ", s, " reached different ",
                           g.launch->dialect->simd_ops, " (divergent control flow)"));
        return -1;
      }
    }
    if (!mask) continue;
    // Every live lane is blocked here, so the lanes that arrived are the active ones (divergence).
    char* slots = g.simd_slots.data() + (size_t)(s * 2 + (g.sg_counter[s] & 1)) * msl_abi::kSimdWidth * msl_abi::kSimdSlotBytes;
    for (uint32_t l = 0; l < msl_abi::kSimdWidth; ++l)
      if (!((mask >> l) & 1)) std::memset(slots + l * msl_abi::kSimdSlotBytes, 0xff, msl_abi::kSimdSlotBytes);
    for (uint32_t i = b; i < e; ++i)
      if (g.state[i] == WaitSimd) {
        g.simd_mask[i] = mask;
        g.state[i] = Ready;
      }
    ++g.sg_counter[s];
    progressed = true;
  }
  if (progressed) return 0;
  uint32_t live = 0, waiting = 0, first_done = ~0u;
  for (uint32_t i = 0; i < g.count; ++i) {
    if (g.state[i] == Done) {
      if (first_done == ~0u) first_done = i;
      continue;
    }
    ++live;
    waiting += g.state[i] == WaitBarrier;
  }
  if (live == 0) return 1;
  if (waiting == live) {
    const Dialect& d = *g.launch->dialect;
    if (live != g.count) {
      fail(g, first_done, cat_str(d.barrier, " reached by ", live, " of the ", d.member, "'s ", g.count,
                                  " threads; this one returned before it (undefined behaviour on a GPU)"));
      return -1;
    }
    // A shim that knows its barriers' call sites (CUDA's: the source line) reports threads waiting at
    // different ones: on a GPU that deadlocks or is undefined, here it would pass silently.
    for (uint32_t i = 1; i < g.count; ++i)
      if (g.threads[i].sync_site != g.threads[0].sync_site) {
        fail(g, i, cat_str("barrier divergence: this thread waits at the ", d.barrier, " of line ",
                           g.threads[i].sync_site, ", thread 0 of its ", d.group, " at the one of line ",
                           g.threads[0].sync_site, " (undefined behaviour on a GPU)"));
        return -1;
      }
    for (uint32_t i = 0; i < g.count; ++i) g.state[i] = Ready;
    return 0;
  }
  fail(g, 0, "the threadgroup's threads are blocked and none can proceed");
  return -1;
}

void check_guards(Group& g) {
  if (g.failed) return;
  for (const auto& [off, n] : g.guards)
    for (uint64_t b = 0; b < n; ++b)
      if ((unsigned char)g.tg_mem[off + b] != kGuardByte) {
        fail(g, 0, cat_str("the kernel wrote past the end of a ", g.launch->dialect->memory,
                           " variable (into the guard bytes after it); a GPU reports nothing, the emulator stops"),
             ErrorKind::Index);
        return;
      }
}

void run_group_body(Worker& w, const Launch& L, uint64_t gi, const uint32_t ng[3], uint64_t tg_limit) {
  Group& g = w.group;
  g.launch = &L;
  g.failed = false;
  g.error.clear();
  g.sched = &w.sched;
  g.fibered = L.kernel->uses_sync != 0;
  const uint32_t gx = (uint32_t)(gi % ng[0]), gy = (uint32_t)(gi / ng[0] % ng[1]), gz = (uint32_t)(gi / ng[0] / ng[1]);
  const uint32_t gp[3] = {gx, gy, gz};
  uint32_t as[3];
  for (int d = 0; d < 3; ++d) as[d] = std::min(L.group[d], L.grid[d] - gp[d] * L.group[d]);
  g.count = as[0] * as[1] * as[2];
  g.simds = (g.count + msl_abi::kSimdWidth - 1) / msl_abi::kSimdWidth;
  g.threads.resize(g.count);
  for (uint32_t i = 0; i < g.count; ++i) {
    msl_abi::Thread& t = g.threads[i];
    const uint32_t lp[3] = {i % as[0], i / as[0] % as[1], i / as[0] / as[1]};
    for (int d = 0; d < 3; ++d) {
      t.tpitg[d] = lp[d];
      t.tgpig[d] = gp[d];
      t.tpig[d] = gp[d] * L.group[d] + lp[d];
      t.tptg[d] = as[d];
      t.dtptg[d] = L.group[d];
      t.tpg[d] = L.grid[d];
      t.tgpg[d] = ng[d];
    }
    t.tiitg = i;
    t.sync_site = 0;
    t.lane = i % msl_abi::kSimdWidth;
    t.simd_id = i / msl_abi::kSimdWidth;
    t.simds = g.simds;
    t.buffers = L.buffers.data();
    t.num_buffers = (uint32_t)L.buffers.size();
    t.group = &g;
  }
  g.site_off.assign(g.site_off.size(), -1);
  g.param_off.resize(L.threadgroup_mem.size());
  g.guards.clear();
  g.tg_used = g.tg_logical = 0;
  g.tg_limit = tg_limit;
  // Twice the limit (variables plus their guard bands), at least Metal's 64 KiB; past it, a wild access.
  const size_t window = std::min(kArenaBytes, (size_t)std::max<uint64_t>(2 * tg_limit, 2 * kMaxThreadgroupMemory));
  if (window != g.window) {
    EMBER_CHECK(::mprotect(g.tg_mem, window, PROT_READ | PROT_WRITE) == 0 &&
                    (window == kArenaBytes || ::mprotect(g.tg_mem + window, kArenaBytes - window, PROT_NONE) == 0),
                Memory, "[emulator] cannot map group memory for the emulator");
    g.window = window;
  }
  for (size_t n = 0; n < L.threadgroup_mem.size(); ++n) {
    const uint64_t len = (L.threadgroup_mem[n] + 15) / 16 * 16;
    g.param_off[n] = g.tg_used;
    std::memset(g.tg_mem + g.tg_used, 0xff, L.threadgroup_mem[n]);
    std::memset(g.tg_mem + g.tg_used + len, kGuardByte, kGuardBytes);
    g.guards.emplace_back(g.tg_used + len, kGuardBytes);
    g.tg_used += len + kGuardBytes;
    g.tg_logical += len;
  }
  if (!g.fibered) {
    for (uint32_t i = 0; i < g.count && !g.failed; ++i) {
      t_cur = &g.threads[i];
      L.kernel->entry(&g.threads[i]);
    }
    t_cur = nullptr;
    check_guards(g);
    return;
  }
#ifdef EMU_TSAN
  std::vector<void*> new_fibers(g.count);
  for (uint32_t i = 0; i < g.count; ++i) new_fibers[i] = __tsan_create_fiber(0);
#endif
  // The scheduler's bookkeeping (and the stacks it reuses) is hidden from TSan, the kernel's accesses
  // (on the fibers, created above so that they do not inherit the ignoring) are not.
  struct IgnoreScope {
    bool& on;
    explicit IgnoreScope(bool& o) : on(o) { EMU_IGNORE_BEGIN(), on = true; }
    ~IgnoreScope() { on = false, EMU_IGNORE_END(); }
  } ignore_scope(g.ignoring);
#ifdef EMU_TSAN
  g.tsan_sched = __tsan_get_current_fiber();
  g.tsan_fibers.swap(new_fibers);
  g.tsan_first.assign(g.count, 1);
  g.simd_sync.resize(g.simds);
#endif
  while (w.stacks.size() < g.count) w.stacks.push_back(make_stack());
  g.fibers.resize(g.count);
  g.args.resize(g.count);
  g.state.assign(g.count, Ready);
  g.simd_op.assign(g.count, 0);
  g.simd_mask.assign(g.count, 0);
  g.sg_counter.assign(g.simds, 0);
  g.simd_slots.resize((size_t)g.simds * 2 * msl_abi::kSimdWidth * msl_abi::kSimdSlotBytes);
  for (uint32_t i = 0; i < g.count; ++i) {
    g.args[i] = {&g, i};
    init_fiber(g.fibers[i], w.stacks[i], &g.args[i]);
  }
  std::vector<uint32_t> order(g.count);
  uint64_t pass = 0;
  for (;;) {
    // One pass runs every ready thread until it blocks, in an order that changes from pass to pass.
    for (uint32_t i = 0; i < g.count; ++i) order[i] = i;
    uint64_t r = mix(gi * 0x100000001b3ull ^ mix(++pass));
    for (uint32_t i = g.count; i > 1; --i) {
      r = mix(r);
      std::swap(order[i - 1], order[r % i]);
    }
    for (uint32_t k = 0; k < g.count && !g.failed; ++k) {
      const uint32_t i = order[k];
      if (g.state[i] != Ready) continue;
      t_cur = &g.threads[i];
      // Before TSan is told of the switch: this write is the scheduler's, to its own thread's state.
      fault_set_stack(w.stacks[i].base, w.stacks[i].base + w.stacks[i].size);
      w.jump.on_fiber = true;
#ifdef EMU_TSAN
      w.jump.tsan_home = g.tsan_sched;
      __tsan_switch_to_fiber(g.tsan_fibers[i], g.tsan_first[i] ? 0 : __tsan_switch_to_fiber_no_sync);
      g.tsan_first[i] = 0;
#endif
#ifdef EMU_ASAN
      void* fake = nullptr;
      __sanitizer_start_switch_fiber(&fake, w.stacks[i].base, w.stacks[i].size);
#endif
#ifdef EMU_ASAN
      w.jump.home_bottom = &g.asan_sched_bottom, w.jump.home_size = &g.asan_sched_size;
#endif
      switch_to(w.sched, g.fibers[i]);
      w.jump.on_fiber = false;
      fault_set_stack(w.stack_lo, w.stack_hi);
#ifdef EMU_ASAN
      __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    }
    if (g.failed || resolve(g) != 0) break;
  }
  t_cur = nullptr;
  check_guards(g);
#ifdef EMU_TSAN
  __tsan_acquire(&g.done_sync);
  for (void* f : g.tsan_fibers) __tsan_destroy_fiber(f);
  g.tsan_fibers.clear();
#endif
}

// Runs one group with its faults armed (faults.h): SIGFPE, a stack overflow or the watchdog in the kernel
// come back here by siglongjmp, abandoning the group's fibers (their stacks are reset by the next group)
// and whatever run_group_body had allocated.
void run_group(Worker& w, const Launch& L, uint64_t gi, const uint32_t ng[3], uint64_t tg_limit) {
  if (sigsetjmp(w.jump.env, 0) != 0) {
    Group& g = w.group;
    const msl_abi::Thread* t = t_cur;
    t_cur = nullptr;
    fault_set_stack(w.stack_lo, w.stack_hi);
#ifdef EMU_ASAN
    if (w.jump.on_fiber) __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
#ifdef EMU_TSAN
    if (w.jump.on_fiber && !w.jump.tsan_home_now) __tsan_switch_to_fiber(g.tsan_sched, 0);
    w.jump.tsan_home_now = false;
    // The abandoned fibers' accesses (their Thread records, say) happen before the next group's writes.
    for (void* f : g.tsan_fibers) __tsan_switch_to_fiber(f, 0), __tsan_switch_to_fiber(g.tsan_sched, 0);
    for (void* f : g.tsan_fibers) __tsan_destroy_fiber(f);
    g.tsan_fibers.clear();
#endif
    if (g.ignoring) g.ignoring = false, EMU_IGNORE_END();
    w.jump.on_fiber = false;
    const uint32_t i = t && t >= g.threads.data() && t < g.threads.data() + g.count ? (uint32_t)(t - g.threads.data()) : 0;
    g.failed = false;  // the fault is what happened, whatever was noted before it
    fail(g, i, w.jump.message, w.jump.kind);
    return;
  }
  fault_set_stack(w.stack_lo, w.stack_hi);
  fault_arm(&w.jump);
  struct Disarm {
    ~Disarm() { fault_disarm(); }
  } disarm;
  run_group_body(w, L, gi, ng, tg_limit);
}

}  // namespace

const msl_abi::Api* runtime_api() { return &kApi; }

const Dialect kMetalDialect = {"metal", "Metal", "threadgroup", "group", "threadgroup", "threadgroup_barrier",
                               "simdgroup", "simd_* operations"};
const Dialect kCudaDialect = {"cuda", "CUDA", "block", "block", "shared", "__syncthreads", "warp", "warp intrinsics"};

uint64_t threadgroup_memory_limit() {
  const char* e = std::getenv("EMBER_METAL_EMU_TG_MEMORY");
  if (!e || !*e) return kMaxThreadgroupMemory;
  char* end = nullptr;
  const long long v = std::strtoll(e, &end, 10);
  EMBER_CHECK(end != e && *end == '\0' && v >= 1024 && v <= (long long)kMaxThreadgroupMemory, Value,
              "[metal] EMBER_METAL_EMU_TG_MEMORY=", e, ": bytes from 1024 to ", kMaxThreadgroupMemory);
  return (uint64_t)v;
}

const char* fiber_kind() {
#ifdef EMU_ASM_SWITCH
  return "asm";
#else
  return "ucontext";
#endif
}

void run_launch(const Launch& L) {
  const Dialect& d = *L.dialect;
  EMBER_CHECK(L.kernel != nullptr, Value, "[", d.tag, "] dispatch without a pipeline");
  const std::string kn = cat_str("[", d.tag, "] kernel '", L.kernel->name, "': ");
  uint64_t threads = 1;
  for (int k = 0; k < 3; ++k) {
    EMBER_CHECK(L.group[k] >= 1, Value, kn, "threads per ", d.group, " must be at least 1 in each dimension");
    threads *= L.group[k];
  }
  EMBER_CHECK(threads <= L.max_group_threads, Value, kn, "a ", d.group, " of ", threads, " threads; ", d.api,
              " allows at most ", L.max_group_threads);
  for (const msl_abi::BufferUse* u = L.kernel->buffers; u->index != 0xffffffffu; ++u) {
    EMBER_CHECK(u->index < L.buffers.size() && L.buffers[u->index].data != nullptr, Value, kn, "buffer(", u->index,
                ") is not bound");
    EMBER_CHECK(L.buffers[u->index].size >= u->min_size, Value, kn, "buffer(", u->index, ") has ",
                L.buffers[u->index].size, " bytes; the kernel reads ", u->min_size);
  }
  uint64_t tg = 0;
  for (uint64_t m : L.threadgroup_mem) tg += (m + 15) / 16 * 16;
  const uint64_t tg_limit = L.group_memory_limit ? L.group_memory_limit : threadgroup_memory_limit();
  EMBER_CHECK(tg <= tg_limit && tg_limit < kArenaBytes / 2, Value, kn, d.memory, " memory of ", tg, " bytes; ",
              d.api, " allows ", tg_limit);
  uint32_t ng[3];
  uint64_t groups = 1;
  for (int k = 0; k < 3; ++k) {
    if (L.grid[k] == 0) return;
    // In 64 bits: a grid near 2^32 must not wrap to zero threadgroups (which would run nothing).
    ng[k] = (uint32_t)(((uint64_t)L.grid[k] + L.group[k] - 1) / L.group[k]);
    EMBER_CHECK(groups <= (uint64_t)INT64_MAX / ng[k], Value, kn, "a grid of (", L.grid[0], ", ", L.grid[1], ", ",
                L.grid[2], ") threads in groups of (", L.group[0], ", ", L.group[1], ", ", L.group[2],
                ") holds more than 2^63 ", d.group, "s");
    groups *= ng[k];
  }
  std::mutex mu;
  const uint64_t start = now_ns(), interrupts = cpu::interrupt_count();
  std::atomic<bool> failed{false};
  uint64_t err_group = ~0ull;
  std::string err;
  ErrorKind err_kind = ErrorKind::Value;
  cpu::parallel_for((int64_t)groups, 1, [&](int64_t b, int64_t e) {
    Worker& w = worker();
    watchdog_begin(start, interrupts);
    struct End {
      ~End() { watchdog_end(); }
    } end;
    for (int64_t gi = b; gi < e && !failed.load(std::memory_order_relaxed); ++gi) {
      run_group(w, L, (uint64_t)gi, ng, tg_limit);
      if (w.group.failed) {
        std::lock_guard<std::mutex> lock(mu);
        if ((uint64_t)gi < err_group) {  // the lowest failing group, whichever worker saw it first
          err_group = (uint64_t)gi;
          err = w.group.error;
          err_kind = w.group.error_kind;
        }
        failed.store(true, std::memory_order_relaxed);
      }
    }
  });
  if (failed.load()) throw Error(err_kind, err);
}

}  // namespace ember::emu
