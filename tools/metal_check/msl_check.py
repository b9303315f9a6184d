"""Static checks of MSL sources without a Mac: each file type-checks as clang C++14 (-Wall -Wextra -Werror)
against metal/msl_static.h, with Metal's address spaces kept distinct and math / simd functions declared
only for the types MSL has them for, and passes a lint for what MSL forbids.

Usage: python tools/metal_check/msl_check.py [file.metal ...]   (default: every metal/*.metal)
"""
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
METAL = ROOT / "metal"

# The attributes MSL defines for compute kernels and their helpers; any other [[name]] is a typo or
# something the emulator does not run.
ATTRIBUTES = {
    "buffer", "threadgroup", "function_constant", "host_name", "kernel", "thread_position_in_grid",
    "thread_position_in_threadgroup", "threadgroup_position_in_grid", "threads_per_threadgroup",
    "dispatch_threads_per_threadgroup", "threads_per_grid", "grid_size", "threadgroups_per_grid",
    "thread_index_in_threadgroup", "thread_index_in_simdgroup", "simdgroup_index_in_threadgroup",
    "simdgroups_per_threadgroup", "dispatch_simdgroups_per_threadgroup", "threads_per_simdgroup",
    "thread_execution_width", "max_total_threads_per_threadgroup",
}
STD_HEADERS = {"metal_stdlib", "metal_math", "metal_simdgroup", "metal_atomic", "metal_compute", "metal_integer",
               "metal_common", "metal_relational", "metal_geometric", "metal_numeric", "metal_types", "metal_pack",
               "metal_simdgroup_matrix"}
FORBIDDEN = [
    (re.compile(r"\bdouble\b"), "double (Metal has no 64-bit float)"),
    (re.compile(r"\b(try|catch|throw)\b"), "exceptions"),
    (re.compile(r"\bnew\s+[A-Za-z_(]|\bdelete\b"), "new/delete (no dynamic allocation)"),
    (re.compile(r"\bstd\s*::"), "the C++ standard library"),
    (re.compile(r"\bvirtual\b"), "virtual functions"),
    (re.compile(r"\bgoto\b"), "goto"),
    (re.compile(r"\(\s*\*\s*[A-Za-z_]\w*\s*\)\s*\("), "function pointers"),
]


def strip_comments_and_strings(src):
    """The source with comments and string/char literals blanked (newlines kept, so line numbers hold)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', blank, src, flags=re.S)


# The thread-position family: MSL requires these inputs of one kernel to be all scalars or all vectors
# of one width (Apple's compiler rejects the kernel, and with it every kernel of its file).
POSITION_FAMILY = ("thread_position_in_grid", "threadgroup_position_in_grid", "thread_position_in_threadgroup",
                   "threads_per_threadgroup", "threadgroups_per_grid", "threads_per_grid",
                   "dispatch_threads_per_threadgroup", "grid_size")
_POSITION = re.compile(r"\b([A-Za-z_]\w*?)([234]?)\s+(?:const\s+)?[A-Za-z_]\w*\s*\[\[\s*(" + "|".join(POSITION_FAMILY) +
                       r")\s*\]\]")


def _open_paren(text, pos):
    """The index of the '(' whose parameter list holds text[pos]."""
    depth = 0
    for i in range(pos - 1, -1, -1):
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            if depth == 0:
                return i
            depth -= 1
    return -1


def _position_widths(name, text):
    lists = {}
    for m in _POSITION.finditer(text):
        lists.setdefault(_open_paren(text, m.start()), []).append(m)
    out = []
    for pos, ms in lists.items():
        if len({m.group(2) or "1" for m in ms}) > 1:
            line = text.count("\n", 0, pos) + 1
            what = ", ".join(f"{m.group(1)}{m.group(2)} [[{m.group(3)}]]" for m in ms)
            out.append(f"{name}:{line}: the thread-position inputs of one kernel must all be scalars or vectors "
                       f"of one width ({what})")
    return out


def _threadgroup_decls(name, text):
    """Threadgroup variables must be declared in a kernel's body, without an initialiser."""
    out = []
    for m in re.finditer(r"\bthreadgroup\b", text):
        before = text[:m.start()].rstrip()
        if before and before[-1] not in ";{}" and not before.endswith("static"):
            continue  # a parameter, a cast or a pointer type, not a declaration
        end = text.find(";", m.end())
        decl = re.sub(r"\[[^\]]*\]", "[]", text[m.end():end])
        if re.search(r"[*&]", decl.split("=")[0]):
            continue  # a pointer or reference to threadgroup memory, itself a thread variable
        line = text.count("\n", 0, m.start()) + 1
        depth = before.count("{") - before.count("}")
        if depth <= 0:
            out.append(f"{name}:{line}: a threadgroup variable at program scope (declare it in the kernel)")
        elif "=" in decl or "{" in decl:
            out.append(f"{name}:{line}: a threadgroup variable cannot have an initialiser")
    return out


def lint(path, src=None):
    """What MSL forbids, found in the text: a list of "file:line: message"."""
    src = Path(path).read_text() if src is None else src
    text = strip_comments_and_strings(src)
    name = Path(path).name
    problems = []
    for i, line in enumerate(text.splitlines(), 1):
        m = re.match(r"\s*#\s*include\s*[<\"]([^>\"]+)[>\"]", src.splitlines()[i - 1])
        if m and m.group(1) not in STD_HEADERS:
            problems.append(f"{name}:{i}: #include <{m.group(1)}> (only Metal's own headers)")
        if line.lstrip().startswith("#"):
            continue
        for rx, what in FORBIDDEN:
            if rx.search(line):
                problems.append(f"{name}:{i}: {what} is not allowed in MSL")
    for m in re.finditer(r"\[\[\s*([A-Za-z_]\w*)", text):
        if m.group(1) not in ATTRIBUTES:
            line = text.count("\n", 0, m.start()) + 1
            problems.append(f"{name}:{line}: unknown attribute [[{m.group(1)}]]")
    return problems + _position_widths(name, text) + _threadgroup_decls(name, text)


def _stub_include_dir():
    d = Path(tempfile.mkdtemp(prefix="ember-msl-check-"))
    for h in STD_HEADERS:
        (d / h).write_text("")
    return d


def preprocess(path):
    """The file after the C preprocessor (macros such as an instantiate() helper expanded, line markers kept)."""
    inc = _stub_include_dir()
    cxx = os.environ.get("CXX", "c++")
    p = subprocess.run([cxx, "-E", "-x", "c++", "-std=c++14", "-D__METAL_VERSION__=310", "-I", str(inc), str(path)],
                       capture_output=True, text=True, timeout=120)
    for f in inc.iterdir():
        f.unlink()
    inc.rmdir()
    if p.returncode != 0:
        raise RuntimeError(f"preprocessing {path} failed:\n{p.stderr}")
    return p.stdout


def _clang_args():
    gcc_inc = subprocess.run(["gcc", "-print-file-name=include"], capture_output=True, text=True).stdout.strip()
    # MSL 3.1 is C++14 with Metal's restrictions; warnings are errors, as scripts/metal_smoke.sh compiles on
    # a Mac, and an implicit float -> half / bfloat narrowing is one (MSL allows it; ember writes the cast).
    return ["-x", "c++", "-std=c++14", "-fsyntax-only", "-include", str(METAL / "msl_static.h"),
            "-isystem", gcc_inc, "-Wall", "-Wextra", "-Werror", "-Wimplicit-float-conversion",
            "-Wno-unknown-attributes"]


def _line_map(text):
    """For each line of preprocessed text, the (file name, line) it came from, read off the line markers."""
    out, name, n = [], "?", 0
    for line in text.splitlines():
        m = re.match(r'#\s*(\d+)\s+"([^"]*)"', line)
        out.append((name, n))
        if m:
            n, name = int(m.group(1)) - 1, Path(m.group(2)).name
        n += 1
    return out


def _callees(cursor, ci):
    for c in cursor.walk_preorder():
        if c.kind == ci.CursorKind.CALL_EXPR and c.referenced is not None:
            yield c.referenced.canonical


def compile_check(path):
    """Type-checks the file under clang with distinct address spaces; returns (problems, recursion problems)."""
    import clang.cindex as ci

    from ember import _C_testing

    path = Path(path)
    text = _C_testing.metal_rewrite(preprocess(path), path.name, True)
    with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as f:
        f.write(text)
        tmp = f.name
    try:
        tu = ci.Index.create().parse(tmp, args=_clang_args())
        lines = _line_map(text)
        problems = []
        for d in tu.diagnostics:
            if d.severity >= ci.Diagnostic.Error:
                loc = d.location
                if loc.file and loc.file.name == tmp and 0 < loc.line <= len(lines):
                    f, n = lines[loc.line - 1]
                    problems.append(f"{f}:{n}: {d.spelling}")
                else:
                    problems.append(f"{path.name}: {d.spelling}")
        # recursion: a cycle in the call graph of the functions this file defines
        graph = {}
        kinds = {ci.CursorKind.FUNCTION_DECL, ci.CursorKind.FUNCTION_TEMPLATE, ci.CursorKind.CXX_METHOD}
        for c in tu.cursor.walk_preorder():
            if c.kind in kinds and c.is_definition() and c.location.file and c.location.file.name == tmp:
                graph[c.canonical] = (c.spelling, c.location.line, set(_callees(c, ci)))
        problems += _cycles(graph, path.name)
        return problems
    finally:
        os.unlink(tmp)


def _cycles(graph, name):
    out, state = [], {}

    def visit(n, stack):
        state[n] = 1
        for m in graph[n][2]:
            if m not in graph:
                continue
            if state.get(m) == 1:
                chain = [graph[k][0] for k in stack[stack.index(m):]] + [graph[m][0]]
                out.append(f"{name}: recursion ({' -> '.join(chain)}) is not allowed in MSL")
            elif m not in state:
                visit(m, stack + [m])
        state[n] = 2

    for n in graph:
        if n not in state:
            visit(n, [n])
    return out


def check(path):
    """Every problem the static checks find in one .metal file."""
    return lint(path) + compile_check(path)


def main(argv):
    files = [Path(a) for a in argv] or sorted(METAL.glob("*.metal"))
    bad = 0
    for f in files:
        problems = check(f)
        for p in problems:
            print(p)
        bad += bool(problems)
        print(f"{f.name}: {'FAIL' if problems else 'ok'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "python"))
    sys.exit(main(sys.argv[1:]))
