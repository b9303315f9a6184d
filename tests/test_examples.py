"""Runs every script in examples/ as __main__ (each asserts its own results), with --quick for the ones
that train."""
import pathlib
import runpy
import sys

import pytest

EXAMPLES = sorted((pathlib.Path(__file__).resolve().parent.parent / "examples").glob("*.py"))


def test_examples_exist():
    names = {p.stem for p in EXAMPLES}
    assert {"softplus", "hypot_op2", "lerp_op3", "inplace_axpy", "convnet"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs(path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(path), "--quick"])  # examples without options ignore it
    runpy.run_path(str(path), run_name="__main__")
    assert "ok" in capsys.readouterr().out
