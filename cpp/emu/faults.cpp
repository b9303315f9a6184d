// The emulator's fault handling: signal handlers that turn a kernel's SIGFPE, stack overflow or wild access
// into an error of its threadgroup (siglongjmp back to run_group), and the watchdog thread (timeout, Ctrl-C).
#include "emu/faults.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__linux__)
#include <link.h>
#include <ucontext.h>
#endif

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "cpu/parallel.h"

#ifdef EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(__SANITIZE_THREAD__)
#define EMU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define EMU_TSAN 1
#endif
#endif
#ifdef EMU_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace ember::emu {
namespace {

// Read by the signal handlers, so initial-exec: no lazy TLS allocation inside a handler.
#define EMU_TLS thread_local __attribute__((tls_model("initial-exec")))
EMU_TLS FaultJump* t_jump = nullptr;
EMU_TLS const char* t_stack_lo = nullptr;
EMU_TLS const char* t_stack_hi = nullptr;
EMU_TLS int t_slot = -1;

// The executable segments of the loaded kernel modules (append-only; read without a lock by handlers).
constexpr int kMaxRanges = 4096;
std::atomic<uintptr_t> g_code_lo[kMaxRanges], g_code_hi[kMaxRanges];
std::atomic<int> g_ranges{0};
std::mutex g_range_mu;

bool in_kernel_code(uintptr_t pc) {
  const int n = g_ranges.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (pc >= g_code_lo[i].load(std::memory_order_relaxed) && pc < g_code_hi[i].load(std::memory_order_relaxed))
      return true;
  return false;
}

uintptr_t pc_of(void* ctx) {
  auto* uc = static_cast<ucontext_t*>(ctx);
#if defined(__linux__) && defined(__x86_64__)
  return (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__linux__) && defined(__aarch64__)
  return (uintptr_t)uc->uc_mcontext.pc;
#elif defined(__APPLE__) && defined(__aarch64__)
  return (uintptr_t)uc->uc_mcontext->__ss.__pc;
#elif defined(__APPLE__) && defined(__x86_64__)
  return (uintptr_t)uc->uc_mcontext->__ss.__rip;
#else
  (void)uc;
  return 0;
#endif
}

struct sigaction g_prev_fpe, g_prev_segv, g_prev_bus;
int g_wd_signal = 0;

// Not ours: hand the signal to whoever had it (Python's faulthandler, a sanitizer), or let the default
// action happen (the faulting instruction runs again and the process ends as it would have).
void chain(int sig, siginfo_t* si, void* ctx, const struct sigaction& prev) {
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) return prev.sa_sigaction(sig, si, ctx);
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    return prev.sa_handler(sig);
  }
  ::signal(sig, SIG_DFL);
}

[[noreturn]] void jump(FaultJump* j, ErrorKind kind, const char* msg) {
  std::snprintf(j->message, sizeof j->message, "%s", msg);
  j->kind = kind;
  t_jump = nullptr;
#ifdef EMU_ASAN
  if (j->on_fiber && j->home_bottom) __sanitizer_start_switch_fiber(nullptr, *j->home_bottom, *j->home_size);
#endif
  siglongjmp(j->env, 1);
}

void on_fault(int sig, siginfo_t* si, void* ctx) {
  FaultJump* j = t_jump;
  if (j) {
    const bool kernel = in_kernel_code(pc_of(ctx));
    const char* a = static_cast<const char*>(si->si_addr);
    if (sig == SIGFPE && kernel)
      jump(j, ErrorKind::Value,
           "integer division or remainder by zero, or INT_MIN / -1, in the kernel (a GPU gives an undefined "
           "value; the emulator stops)");
    // The guard page below a fiber's stack, or below the thread's own stack for kernels without barriers.
    if ((sig == SIGSEGV || sig == SIGBUS) && t_stack_lo && a < t_stack_lo && a + 65536 >= t_stack_lo) {
      char m[200];
      std::snprintf(m, sizeof m,
                    "the kernel overflowed its thread's stack of %zu KiB (large per-thread arrays or deep "
                    "recursion); keep per-thread data small, or in threadgroup or device memory",
                    (size_t)(t_stack_hi - t_stack_lo) / 1024);
      jump(j, ErrorKind::Value, m);
    }
    if ((sig == SIGSEGV || sig == SIGBUS) && kernel) {
      char m[200];
      std::snprintf(m, sizeof m, "the kernel accessed the invalid address %p (through a pointer the emulator "
                    "does not check: threadgroup, thread or a cast)", si->si_addr);
      jump(j, ErrorKind::Index, m);
    }
  }
  chain(sig, si, ctx, sig == SIGFPE ? g_prev_fpe : sig == SIGSEGV ? g_prev_segv : g_prev_bus);
}

// ---- the watchdog ------------------------------------------------------------------------------------
struct Slot {
  std::atomic<bool> used{false};
  std::atomic<uint64_t> start{0};  // the launch's start (ns); 0: not in a launch
  std::atomic<uint64_t> since{0};  // the interrupt count at the launch's start
  std::atomic<int> reason{0};      // 1: timeout, 2: Ctrl-C
  pthread_t tid{};
};
constexpr int kSlots = 2048;
Slot g_slots[kSlots];
std::atomic<bool> g_wd_running{false};
std::mutex g_wd_mu;

double watchdog_seconds() {
  static const double s = [] {
    if (const char* e = std::getenv("EMBER_METAL_EMU_WATCHDOG"); e && *e) {
      char* end = nullptr;
      const double v = std::strtod(e, &end);
      if (end != e && *end == '\0' && v >= 0 && v < 1e9) return v;
      std::fprintf(stderr, "ember: EMBER_METAL_EMU_WATCHDOG=%s is not a number of seconds; using 600\n", e);
    }
    return 600.0;
  }();
  return s;
}

void on_watchdog(int, siginfo_t*, void* ctx) {
  FaultJump* j = t_jump;
  const int slot = t_slot;
  // Only while kernel code runs (never in the runtime, libc or malloc); otherwise the watchdog asks again.
  if (!j || slot < 0 || !in_kernel_code(pc_of(ctx))) return;
  const int r = g_slots[slot].reason.load();
  if (r == 0) return;
  char m[200];
  if (r == 2) {
    jump(j, ErrorKind::Interrupted, "interrupted (SIGINT)");
  }
  std::snprintf(m, sizeof m, "the kernel ran for more than %g s (the emulator's watchdog, "
                "EMBER_METAL_EMU_WATCHDOG; 0 turns it off); an endless loop?", watchdog_seconds());
  jump(j, ErrorKind::Value, m);
}

void watchdog_loop() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const double limit = watchdog_seconds();
    const uint64_t now = now_ns(), ints = cpu::interrupt_count();
    for (Slot& s : g_slots) {
      const uint64_t start = s.start.load(std::memory_order_acquire);
      if (!start) continue;
      int r = s.reason.load();
      if (!r && ints != s.since.load()) r = 2;
      // A launch may begin after `now` was read: its start is later, and unsigned now - start would wrap.
      if (!r && limit > 0 && start < now && (double)(now - start) > limit * 1e9) r = 1;
      if (!r) continue;
      // Only for the launch whose start was read: a new launch clears reason and must not inherit it.
      if (s.start.load(std::memory_order_acquire) != start) continue;
      s.reason.store(r);
      if (s.start.load(std::memory_order_acquire) == start) pthread_kill(s.tid, g_wd_signal);
    }
  }
}

void fork_child() {
  // The parent's workers and watchdog thread do not exist here.
  g_wd_running.store(false);
  for (int i = 0; i < kSlots; ++i) {
    if (i == t_slot) continue;
    g_slots[i].start.store(0);
    g_slots[i].used.store(false);
  }
}

void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    // SA_NODEFER: a handler that leaves by siglongjmp must not leave its signal blocked.
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sa.sa_sigaction = on_fault;
    sigaction(SIGFPE, &sa, &g_prev_fpe);
    sigaction(SIGSEGV, &sa, &g_prev_segv);
    sigaction(SIGBUS, &sa, &g_prev_bus);
#if defined(SIGRTMIN)
    g_wd_signal = SIGRTMIN + 6;  // a real-time signal nobody else uses
#else
    g_wd_signal = SIGURG;  // ignored by default, should one arrive after the handler is gone
#endif
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER | SA_RESTART;
    sa.sa_sigaction = on_watchdog;
    sigaction(g_wd_signal, &sa, nullptr);
    pthread_atfork(nullptr, nullptr, fork_child);
  });
}

constexpr size_t kAltStack = 64 * 1024;

}  // namespace

uint64_t now_ns() {
  return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count() + 1;
}

void* fault_thread_init() {
  install();
  for (int i = 0; i < kSlots && t_slot < 0; ++i) {
    bool f = false;
    if (g_slots[i].used.compare_exchange_strong(f, true)) {
      g_slots[i].tid = pthread_self();
      t_slot = i;
    }
  }
  stack_t cur;
  if (sigaltstack(nullptr, &cur) == 0 && !(cur.ss_flags & SS_DISABLE) && cur.ss_size >= 16384) return nullptr;
  void* p = ::mmap(nullptr, kAltStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  stack_t ss;
  ss.ss_sp = p;
  ss.ss_size = kAltStack;
  ss.ss_flags = 0;
  if (sigaltstack(&ss, nullptr) != 0) {
    ::munmap(p, kAltStack);
    return nullptr;
  }
  return p;
}

void fault_thread_exit(void* altstack) {
  if (t_slot >= 0) {
    g_slots[t_slot].start.store(0);
    g_slots[t_slot].used.store(false);
    t_slot = -1;
  }
  if (!altstack) return;
  stack_t ss;
  std::memset(&ss, 0, sizeof ss);
  ss.ss_flags = SS_DISABLE;
  sigaltstack(&ss, nullptr);
  ::munmap(altstack, kAltStack);
}

void fault_arm(FaultJump* j) { t_jump = j; }
void fault_set_stack(const char* lo, const char* hi) {
  t_stack_lo = lo;
  t_stack_hi = hi;
}
void fault_disarm() { t_jump = nullptr; }

void fault_raise(ErrorKind kind, const char* message) {
  FaultJump* j = t_jump;
  if (!j) {  // kernels run only inside run_group, which arms the jump: this is a bug in the emulator
    std::fprintf(stderr, "ember: an emulated kernel fault outside a dispatch: %s\n", message);
    std::abort();
  }
#ifdef EMU_TSAN
  if (j->on_fiber && j->tsan_home) {
    __tsan_switch_to_fiber(j->tsan_home, 0);
    j->tsan_home_now = true;
  }
#endif
  jump(j, kind, message);
}

void watchdog_begin(uint64_t launch_start_ns, uint64_t interrupts_at_start) {
  if (t_slot < 0) return;
  Slot& s = g_slots[t_slot];
  s.reason.store(0);
  s.since.store(interrupts_at_start);
  s.start.store(launch_start_ns, std::memory_order_release);
  if (!g_wd_running.load()) {
    std::lock_guard<std::mutex> lk(g_wd_mu);
    if (!g_wd_running.exchange(true)) std::thread(watchdog_loop).detach();
  }
}

void watchdog_end() {
  if (t_slot >= 0) g_slots[t_slot].start.store(0, std::memory_order_release);
}

void register_kernel_code(void* handle) {
#if defined(__linux__)
  struct link_map* lm = nullptr;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm) return;
  struct Ctx {
    uintptr_t base;
  } c{(uintptr_t)lm->l_addr};
  std::lock_guard<std::mutex> lk(g_range_mu);
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* arg) -> int {
        auto* c = static_cast<Ctx*>(arg);
        if ((uintptr_t)info->dlpi_addr != c->base) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
          const int n = g_ranges.load();
          if (n >= kMaxRanges) return 1;
          g_code_lo[n].store(info->dlpi_addr + ph.p_vaddr);
          g_code_hi[n].store(info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
          g_ranges.store(n + 1, std::memory_order_release);
        }
        return 1;
      },
      &c);
#else
  (void)handle;  // elsewhere: faults are still caught by their address (stack) and SIGFPE is not, for now
#endif
}

}  // namespace ember::emu
