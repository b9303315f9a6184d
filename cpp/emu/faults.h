// The emulator's kernel faults: SIGFPE, a stack overflow, a wild access in kernel code, the watchdog and Ctrl-C
// end the running threadgroup with an error (a GPU gives an undefined value or kills the command buffer;
// the emulator must not kill the process or hang).
#pragma once
#include <setjmp.h>

#include <cstddef>
#include <cstdint>

#include "error.h"

// EMU_ASAN: built under AddressSanitizer (GCC spells it __SANITIZE_ADDRESS__, Clang __has_feature).
#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif

namespace ember::emu {

// Where a worker goes back to when its kernel faults: run_group sigsetjmp()s here before it runs threads.
struct FaultJump {
  sigjmp_buf env;
  char message[320];  // what happened, filled by the handler
  ErrorKind kind = ErrorKind::Value;
  // Set by the scheduler around each switch to a fiber: ASan must hear of the jump back to its stack.
  bool on_fiber = false;
  const void* const* home_bottom = nullptr;  // the scheduler's stack as ASan knows it (learned by a fiber)
  const size_t* home_size = nullptr;
  // TSan: the scheduler's fiber, where sigsetjmp ran; fault_raise switches to it before its siglongjmp
  // (TSan finds the jump buffer only there) and sets tsan_home_now.
  void* tsan_home = nullptr;
  bool tsan_home_now = false;
};

// Sets up this thread to run kernels (signal handlers once per process; an alternate signal stack for
// this thread when it has none). Returns the stack to remove in fault_thread_exit, or nullptr.
void* fault_thread_init();
void fault_thread_exit(void* altstack);

// While a FaultJump is armed on a thread, a fault in kernel code on that thread siglongjmp()s to it.
// `stack_lo`/`stack_hi` bound the stack the kernel runs on (its guard page lies just below stack_lo).
void fault_arm(FaultJump* j);
void fault_set_stack(const char* stack_lo, const char* stack_hi);
void fault_disarm();
// Ends the running group from kernel or runtime code on this thread as a fault does (the message is
// copied); how a kernel module reports its faults (msl_abi::Api::fault), with no C++ exception.
[[noreturn]] void fault_raise(ErrorKind kind, const char* message);

// A launch's watchdog: from begin to end, this thread is stopped (its group fails) once the launch has
// run for longer than $EMBER_METAL_EMU_WATCHDOG seconds (default 600; 0: never), or when Ctrl-C is noted.
void watchdog_begin(uint64_t launch_start_ns, uint64_t interrupts_at_start);
void watchdog_end();
uint64_t now_ns();

// Remembers the code of a loaded kernel module: only a fault whose PC lies there ends a group
// asynchronously (the watchdog), so the runtime, libc and malloc are never abandoned midway.
void register_kernel_code(void* dl_handle);

}  // namespace ember::emu
