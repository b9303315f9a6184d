"""bench/bench_fused.py --device metal|cuda runs end to end on an emulated device (small shapes), so the script
a real GPU's first session depends on (scripts/cuda_smoke.sh) has run before it meets one."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ember as em

ROOT = Path(__file__).resolve().parents[1]
ROWS = ["softmax_last_dim", "rms_norm", "layer_norm", "cross_entropy", "sdpa", "sdpa causal", "matmul"]


def _run(kind, *extra):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), EMBER_METAL="emulate", EMBER_CUDA="emulate")
    env.pop("EMBER_TEST_DEVICE", None)
    return subprocess.run([sys.executable, str(ROOT / "bench" / "bench_fused.py"), "--device", kind, *extra],
                          env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.cpu_only(reason="starts its own emulated device in a subprocess; once per suite is enough")
@pytest.mark.parametrize("kind", ["metal"])
def test_gpu_bench_runs_on_the_emulator(kind):
    r = _run(kind, "--allow-emulator")
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert "EMULATED" in lines[0] and em.Device(kind, 0).type in lines[0]
    for row in ROWS:
        got = [ln for ln in lines if ln[:18].rstrip() == row]
        assert len(got) == 2, (row, r.stdout)  # fwd and fwd+bwd
        for ln in got:
            assert float(ln.split("|")[0].split()[-2]) > 0, ln  # ember's ms (torch's column is "-" here)


@pytest.mark.cpu_only(reason="starts its own emulated device in a subprocess; once per suite is enough")
@pytest.mark.parametrize("kind", ["metal", "cuda"])
def test_gpu_bench_refuses_an_emulator_without_the_flag(kind):
    r = _run(kind)
    assert r.returncode != 0
    assert "needs a real GPU" in r.stderr and "emulator" in r.stderr
