"""The on-disk kernel cache (cpp/kernel_cache.cpp) through the MSL emulator: no code runs from a place another
user can write, no planted, truncated or foreign file is loaded, builds never collide. Each case runs ember in a
fresh subprocess (the cache directory is chosen once per process) with HOME / XDG_CACHE_HOME in temp dirs."""
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ember as em

PYDIR = str(Path(em.__file__).resolve().parents[1])
WARNING = "not using the kernel cache directory"
TRAILER = 64 + 64 + 16 + 8

# A one-line kernel; %s makes each source (and so each cache entry) distinct.
RUN = textwrap.dedent("""
    import numpy as np, ember as em
    from ember import _C_testing as _T
    def run(add):
        src = ('kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) '
               '{ x[i] = x[i] * 2.0f + %s; }' % add)
        x = np.arange(4, dtype=np.float32)
        _T.metal_emu_run(src, 'k', [x], [4], [4])
        return x.tolist()
""")


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if k not in ("EMBER_METAL_CACHE", "XDG_CACHE_HOME")}
    env.update(HOME=str(tmp_path / "home"), PYTHONPATH=PYDIR)
    (tmp_path / "home").mkdir(exist_ok=True)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _python(code, env, timeout=300):
    p = subprocess.run([sys.executable, "-c", RUN + textwrap.dedent(code)], env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


CHECK = """
    assert run('1.0f') == [1.0, 3.0, 5.0, 7.0]
    assert run('2.0f') == [2.0, 4.0, 6.0, 8.0]
    s = _T.metal_emu_stats()
    print(_T.metal_emu_cache_dir())
    print(s['compiles'], s['disk_hits'])
"""


def test_a_fresh_cache_directory_is_made_private_and_reused(tmp_path):
    env = _env(tmp_path, XDG_CACHE_HOME=tmp_path / "xdg")
    p = _python(CHECK, env)
    d = tmp_path / "xdg" / "ember" / "msl-emu"
    assert p.stdout.split() == [str(d), "2", "0"]
    assert WARNING not in p.stderr
    for part in (tmp_path / "xdg" / "ember", d):
        assert stat.S_IMODE(part.stat().st_mode) == 0o700
    files = sorted(d.iterdir())
    assert [f.suffix for f in files] == [".so", ".so"]  # no build directories or temporaries left behind
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
        assert f.read_bytes()[-8:] == b"EMBERKC1"
    assert _python(CHECK, env).stdout.split() == [str(d), "0", "2"]  # the next process loads them


def _refused(tmp_path, cache, reason):
    p = _python(CHECK, _env(tmp_path, EMBER_METAL_CACHE=cache))
    used, compiles, _ = p.stdout.split()
    assert used != str(cache) and compiles == "2"
    assert p.stderr.count(WARNING) == 1, p.stderr  # said once, however many kernels compile
    assert reason in p.stderr, p.stderr
    assert not os.path.exists(used)  # the private directory is removed at exit
    return p


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_a_cache_directory_others_can_write_is_refused(tmp_path, mode):
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(mode)
    _refused(tmp_path, d, "writable by its group or by others")
    assert list(d.iterdir()) == []


def test_a_cache_directory_owned_by_another_user_is_refused(tmp_path):
    if os.geteuid() == 0:
        d = tmp_path / "theirs"
        d.mkdir(mode=0o700)
        os.chown(d, 65534, 65534)
        _refused(tmp_path, d, "is owned by uid 65534")
        assert list(d.iterdir()) == []
        # a link on the way that another user owns could be repointed at their directory
        link = tmp_path / "via"
        link.symlink_to(tmp_path / "home")
        os.lchown(link, 65534, 65534)
        _refused(tmp_path, link / "cache", "symbolic link owned by another user")
        assert not (tmp_path / "home" / "cache").exists()
    else:
        _refused(tmp_path, Path("/usr"), "is owned by uid 0")


def test_a_symlinked_cache_directory_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    _refused(tmp_path, tmp_path / "link", "is a symbolic link")
    assert list(real.iterdir()) == []


def test_the_old_shared_tmp_default_planted_by_another_user_is_not_used(tmp_path):
    # With no HOME and no XDG_CACHE_HOME the cache goes to $TMPDIR/ember-msl-emu-<uid>; another user may
    # have made that directory first (here: a world-writable one) and planted kernels in it.
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    tmpdir.chmod(0o1777)
    planted = tmpdir / f"ember-msl-emu-{os.geteuid()}"
    planted.mkdir()
    planted.chmod(0o777)
    env = _env(tmp_path, TMPDIR=tmpdir)
    del env["HOME"]
    p = _python(CHECK, env)
    assert p.stdout.split()[0] != str(planted) and p.stderr.count(WARNING) == 1
    assert list(planted.iterdir()) == []


def _one_kernel(tmp_path):
    """A cache directory holding the compiled kernel of run('1.0f'), and that file."""
    env = _env(tmp_path, EMBER_METAL_CACHE=tmp_path / "cache")
    _python("assert run('1.0f') == [1.0, 3.0, 5.0, 7.0]", env)
    (so,) = (tmp_path / "cache").glob("*.so")
    return env, so


RERUN = """
    assert run('1.0f') == [1.0, 3.0, 5.0, 7.0]
    s = _T.metal_emu_stats()
    print(s['compiles'], s['disk_hits'])
"""


def test_a_planted_shared_object_with_the_right_name_is_never_loaded(tmp_path):
    env, so = _one_kernel(tmp_path)
    legit = so.read_bytes()
    marker = tmp_path / "marker"
    src = tmp_path / "plant.c"
    src.write_text('#include <stdio.h>\n__attribute__((constructor)) static void plant(void) {\n'
                   f'  FILE* f = fopen("{marker}", "w"); if (f) {{ fputs("ran", f); fclose(f); }}\n}}\n')
    plant = tmp_path / "plant.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(plant), str(src)], check=True, timeout=120)
    # a bare planted object, then one that carries the legitimate file's trailer (its hash does not match)
    for payload in (plant.read_bytes(), plant.read_bytes() + legit[-TRAILER:]):
        so.write_bytes(payload)
        assert _python(RERUN, env).stdout.split() == ["1", "0"]  # rebuilt, not loaded
        assert not marker.exists()
        assert so.read_bytes()[-8:] == b"EMBERKC1"
    assert _python(RERUN, env).stdout.split() == ["0", "1"]  # and the rebuilt file is used again


@pytest.mark.parametrize("keep", [0, 100, 0.5, -1])
def test_a_truncated_or_corrupt_cached_object_is_rebuilt_without_a_crash(tmp_path, keep):
    env, so = _one_kernel(tmp_path)
    data = so.read_bytes()
    if keep == -1:  # one flipped byte in the middle
        data = data[: len(data) // 2] + bytes([data[len(data) // 2] ^ 1]) + data[len(data) // 2 + 1:]
    else:
        data = data[: int(len(data) * keep) if isinstance(keep, float) else keep]
    so.write_bytes(data)
    assert _python(RERUN, env).stdout.split() == ["1", "0"]
    assert _python(RERUN, env).stdout.split() == ["0", "1"]


def test_a_link_planted_where_the_compiler_version_log_went_clobbers_nothing(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    # the log used to be <cache>/.cxx-version.<pid>, opened O_CREAT|O_TRUNC through any link
    code = f"""
        import os
        os.symlink({str(victim)!r}, os.path.join({str(cache)!r}, '.cxx-version.%d' % os.getpid()))
        assert run('1.0f') == [1.0, 3.0, 5.0, 7.0]
    """
    _python(code, _env(tmp_path, EMBER_METAL_CACHE=cache))
    assert victim.read_text() == "precious"


def test_build_directories_are_fresh_so_planted_ones_poison_nothing(tmp_path):
    # Build directories used to be <cache>/tmp-<pid>-<n>: one another process (another PID namespace on a
    # shared volume) had made was reused, files and links included.
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    code = f"""
        import os
        for n in range(4):
            d = os.path.join({str(cache)!r}, 'tmp-%d-%d' % (os.getpid(), n))
            os.makedirs(d + '/inc')
            for f in ('kernel.cpp', 'kernel.so', 'pre.ii', 'log.txt', 'inc/msl_cpu.h'):
                os.symlink({str(victim)!r}, os.path.join(d, f))
        assert run('1.0f') == [1.0, 3.0, 5.0, 7.0]
        assert run('2.0f') == [2.0, 4.0, 6.0, 8.0]
    """
    _python(code, _env(tmp_path, EMBER_METAL_CACHE=cache))
    assert victim.read_text() == "precious"


def test_two_processes_compiling_the_same_source_both_get_it_right(tmp_path):
    env = _env(tmp_path, EMBER_METAL_CACHE=tmp_path / "cache")
    code = RUN + "\nfor a in ('3.0f', '4.0f', '5.0f'):\n    x = run(a)\n    assert x == [float(a[0]) + 2 * i for i in range(4)], x\n"
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert len(list((tmp_path / "cache").glob("*.so"))) == 3
    assert sorted(p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".so")) == []
    assert _python(RERUN.replace("1.0f", "3.0f").replace("[1.0, 3.0, 5.0, 7.0]", "[3.0, 5.0, 7.0, 9.0]"),
                   env).stdout.split() == ["0", "1"]


def test_threads_compiling_the_same_source_build_it_once(tmp_path):
    code = """
        import threading
        out = []
        ts = [threading.Thread(target=lambda: out.append(run('6.0f'))) for _ in range(4)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        assert out == [[6.0, 8.0, 10.0, 12.0]] * 4, out
        s = _T.metal_emu_stats()
        print(s['compiles'], s['disk_hits'], s['memory_hits'])
    """
    p = _python(code, _env(tmp_path, EMBER_METAL_CACHE=tmp_path / "cache"))
    assert p.stdout.split() == ["1", "0", "3"]


def test_fork_while_another_thread_compiles_leaves_the_child_working(tmp_path):
    # A compiler that takes a few seconds, so the fork lands inside the build of the other thread.
    slow = tmp_path / "slow-c++"
    slow.write_text('#!/bin/sh\ncase "$*" in *-shared*) sleep 3;; esac\nexec c++ "$@"\n')
    slow.chmod(0o755)
    code = """
        import os, threading, time
        out = []
        t = threading.Thread(target=lambda: out.append(run('7.0f')))
        t.start()
        time.sleep(1.0)
        pid = os.fork()
        if pid == 0:
            try:
                ok = run('7.0f') == [7.0, 9.0, 11.0, 13.0] and run('8.0f') == [8.0, 10.0, 12.0, 14.0]
            except BaseException:
                ok = False
            os._exit(0 if ok else 3)
        t.join()
        _, status = os.waitpid(pid, 0)
        assert out == [[7.0, 9.0, 11.0, 13.0]] and status == 0, (out, status)
        print("ok")
    """
    p = _python(code, _env(tmp_path, EMBER_METAL_CACHE=tmp_path / "cache", EMBER_METAL_CXX=slow), timeout=120)
    assert p.stdout.split() == ["ok"]
