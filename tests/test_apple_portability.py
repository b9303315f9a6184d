"""What a macOS build compiles must not lean on Linux: every C++ file of ember (the core, the CPU kernels, the
Metal host code and emulator, the bindings) is scanned for Linux-only or GCC-only names, each allowed only
where the file guards it (the list below says how), and the emulator's ucontext path is declared as the
macOS SDK demands."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(p for d in ("cpp", "python/src", "metal") for p in (ROOT / d).rglob("*")
               if p.suffix in (".cpp", ".h", ".hpp", ".cc") and p.is_file())

# name -> why it breaks on macOS
LINUX_ONLY = {
    r"/proc/": "there is no /proc on macOS",
    r"\bMAP_(ANONYMOUS|NORESERVE|POPULATE|HUGETLB|LOCKED|GROWSDOWN|FIXED_NOREPLACE)\b":
        "MAP_ANONYMOUS / MAP_NORESERVE need _DARWIN_C_SOURCE beside _XOPEN_SOURCE; the others are Linux-only",
    r"\bstd::aligned_alloc\b|(?<![\w:])aligned_alloc\s*\(": "std::aligned_alloc is macOS 10.15+ only (use posix_memalign)",
    r"\b__builtin_ia32_\w+|\b__builtin_cpu_(init|supports)\b|<cpuid\.h>|\b__get_cpuid\w*|\bxgetbv\b":
        "x86-only builtins, cpuid and xgetbv (arm64 macOS)",
    r"\bpthread_\w+_np\b": "pthread *_np extensions differ between glibc and macOS",
    r"\b(sched_setaffinity|sched_getaffinity|sched_getcpu|gettid|prctl|epoll_\w+|eventfd|memfd_create|mremap|"
    r"malloc_usable_size|mallinfo2?|get_nprocs|sysinfo)\s*\(": "a Linux-only call",
    r"#\s*include\s*<(malloc\.h|sys/sysinfo\.h|sys/prctl\.h|sys/epoll\.h|endian\.h|features\.h|bits/[^>]*)>":
        "a Linux-only header",
    r"\b__float128\b": "no __float128 on arm64 (__int128 is fine on every 64-bit clang target)",
}

# (file, pattern) -> how the file keeps it off macOS (checked below to be true)
GUARDED = {
    ("cpp/emu/runtime.cpp", r"\bMAP_(ANONYMOUS|NORESERVE|POPULATE|HUGETLB|LOCKED|GROWSDOWN|FIXED_NOREPLACE)\b"):
        "defines _XOPEN_SOURCE and _DARWIN_C_SOURCE on __APPLE__ before any header",
    ("cpp/cpu/parallel.cpp", r"\b__builtin_ia32_\w+|\b__builtin_cpu_(init|supports)\b|<cpuid\.h>|\b__get_cpuid\w*|\bxgetbv\b"):
        "inside #if defined(__x86_64__) || defined(__i386__)",
    ("cpp/cpu/dispatch.cpp", r"\b__builtin_ia32_\w+|\b__builtin_cpu_(init|supports)\b|<cpuid\.h>|\b__get_cpuid\w*|\bxgetbv\b"):
        "inside #if defined(EMBER_X86), which CMake sets only for x86-64",
    ("cpp/emu/runtime.cpp", r"\bpthread_\w+_np\b"): "pthread_getattr_np inside #if defined(__linux__)",
    # macOS's <sys/mman.h> defines MAP_ANONYMOUS unless a strict POSIX level is asked for, as faults.cpp does not
    ("cpp/emu/faults.cpp", r"\bMAP_(ANONYMOUS|NORESERVE|POPULATE|HUGETLB|LOCKED|GROWSDOWN|FIXED_NOREPLACE)\b"):
        "MAP_ANONYMOUS alone, without _XOPEN_SOURCE / _POSIX_C_SOURCE in the file",
}


def strip_comments(text):
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)


def test_no_linux_only_names_outside_their_guards():
    found = []
    for f in FILES:
        rel = f.relative_to(ROOT).as_posix()
        text = strip_comments(f.read_text())
        for pat, why in LINUX_ONLY.items():
            for m in re.finditer(pat, text):
                if (rel, pat) not in GUARDED:
                    found.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)} ({why})")
    assert found == []


def test_the_guards_are_there():
    runtime = (ROOT / "cpp/emu/runtime.cpp").read_text()
    first_include = runtime.index("#include")
    head = runtime[:first_include]
    assert re.search(r"#if defined\(__APPLE__\).*#define _XOPEN_SOURCE.*#define _DARWIN_C_SOURCE", head, re.S)
    assert "EMBER_EMU_UCONTEXT" in runtime  # CI forces the ucontext path on Linux (tools/metal_ucontext.sh)
    assert re.search(r"#if defined\(__linux__\)\s*\n\s*pthread_attr_t a;[^#]*pthread_getattr_np", runtime)
    faults = strip_comments((ROOT / "cpp/emu/faults.cpp").read_text())
    assert "_XOPEN_SOURCE" not in faults and "_POSIX_C_SOURCE" not in faults
    assert re.findall(r"MAP_\w+", faults) and set(re.findall(r"MAP_\w+", faults)) <= {"MAP_PRIVATE", "MAP_ANONYMOUS", "MAP_FAILED"}
    parallel = (ROOT / "cpp/cpu/parallel.cpp").read_text()
    assert re.search(r"#if defined\(__x86_64__\) \|\| defined\(__i386__\)\s*\n\s*__builtin_ia32_pause", parallel)
    dispatch = (ROOT / "cpp/cpu/dispatch.cpp").read_text()
    assert re.search(r"#if defined\(EMBER_X86\)\s*\n#include <cpuid.h>", dispatch)
    assert re.search(r"#if defined\(EMBER_X86\)\s*\n// cpuid and xgetbv", dispatch)
    cmake = (ROOT / "cpp/CMakeLists.txt").read_text()
    # EMBER_X86 is set inside the x86-64 branch (before its else())
    assert re.search(r'if\(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64\|AMD64\|amd64"\)(?:(?!\nelse\(\)).)*EMBER_X86=1',
                     cmake, re.S)


def test_no_overloads_on_both_long_and_int64():
    # int64_t is long on Linux but long long on macOS: an overload set on both compiles here and is
    # ambiguous (or picks another function) there. ember spells 64-bit integers int64_t on the host.
    found = []
    for f in FILES:
        if f.suffix == ".metal" or f.parent.name == "metal" and f.name.startswith("msl_"):
            continue  # MSL's own `long` (the kernels' 64-bit integer, the same width on both)
        text = strip_comments(f.read_text())
        for m in re.finditer(r"[(,]\s*(const\s+)?(unsigned\s+)?long(?!\s+long)\s*[&*]?\s*[A-Za-z_]\w*\s*[,)=]", text):
            found.append(f"{f.relative_to(ROOT).as_posix()}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}")
    assert found == []
