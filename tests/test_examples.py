"""Runs every script in examples/ as __main__ (each asserts its own results), with --quick for the ones
that train."""
import pathlib
import runpy
import sys

import pytest

import ember as em

EXAMPLES = sorted((pathlib.Path(__file__).resolve().parent.parent / "examples").glob("*.py"))


def test_examples_exist():
    names = {p.stem for p in EXAMPLES}
    assert {"softplus", "hypot_op2", "lerp_op3", "inplace_axpy", "convnet"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs(path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(path), "--quick"])  # examples without options ignore it
    # A script starts on the CPU, as in a fresh interpreter: the examples are cpu_fwd custom ops with
    # float64 gradchecks, and their Metal parts (softplus, metal_fused_op) name the device themselves.
    em.set_default_device(em.cpu)  # the conftest fixture restores the session's device afterwards
    runpy.run_path(str(path), run_name="__main__")
    assert "ok" in capsys.readouterr().out
