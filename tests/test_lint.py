"""The Python sources (package, tests, benchmarks, tools) pass the linter with the rules in pyproject.toml."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_sources_pass_ruff():
    # ruff is a test extra, pinned so a new release's rules cannot turn CI red on unchanged code
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
