"""em.profiler: rows for built-in, custom, fused and backward ops; self time; shapes; bytes; the Chrome trace parses and nests."""
import json

import numpy as np
import pytest

import ember as em
from ember.tensor_type import _wrap


class Double(em.CustomOp1):
    name = "double_prof"

    def cpu_fwd(self, storage, layout):
        x = _wrap(storage, layout, storage.dtype, storage.device)
        with em.no_grad():
            return (x * 2.0).contiguous().copy()._storage, layout.shape

    metal_fwd = cuda_fwd = cpu_fwd

    def bwd(self, arg, res, g):
        return g * 2.0


def _step(device):
    x = em.Var(np.random.default_rng(0).standard_normal((4, 8)), dtype="float32", device=device)
    w = em.Var(np.ones(8), dtype="float32", device=device)
    y = em.nn.ops.rms_norm(x.apply_op1(Double()) @ em.ones(8, 8, device=device), w)
    return (y * y).sum().backward()


def test_rows_name_every_kind_of_op(device, tmp_path):
    with em.profiler.profile(record_shapes=True) as prof:
        _step(device)
    rows = {r["name"]: r for r in prof.key_averages()}
    assert rows["double_prof"]["kind"] == "custom op"
    assert rows["rms_norm"]["kind"] == "custom op" and rows["rms_norm"]["shapes"] == [[[4, 8], [8]]]
    assert rows["matmul"]["kind"] == "op" and rows["matmul"]["device"] == str(em.Device(device) if
                                                                               isinstance(device, str) else device)
    for fwd in ("rms_norm", "double_prof", "matmul"):
        r = rows[f"{fwd}_bwd"]
        assert r["kind"] == "backward" and r["forward_op"] == fwd and r["calls"] == 1
    for r in rows.values():
        assert 0 <= r["self_time"] <= r["wall_time"] + 1e-9
        assert r["timing"] == ("host" if r["device"].startswith(("metal", "cuda")) else "compute")
    assert rows["matmul"]["bytes"] >= 4 * 8 * 4  # its result is alive at the end of the op
    # backward contains the bwd rows: its wall time covers theirs
    assert rows["backward"]["wall_time"] >= rows["rms_norm_bwd"]["wall_time"]
    table = prof.table(sort_by="self_time", row_limit=5)
    assert len(table.splitlines()) >= 7 and "self ms" in table
    assert "rms_norm_bwd (of rms_norm)" in prof.table(sort_by="name", row_limit=None)
    with pytest.raises(em.EmberValueError):
        prof.table(sort_by="nope")


def test_chrome_trace_parses_and_nests(device, tmp_path):
    with em.profiler.profile() as prof:
        _step(device)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    evs = json.loads(path.read_text())["traceEvents"]
    assert evs and all(e["ph"] == "X" and e["dur"] >= 0 and isinstance(e["ts"], (int, float)) for e in evs)
    bwd = [e for e in evs if e["name"] == "backward"][0]
    inner = [e for e in evs if e["cat"] == "backward"]
    assert inner and all(bwd["ts"] <= e["ts"] and e["ts"] + e["dur"] <= bwd["ts"] + bwd["dur"] + 1e-3
                         for e in inner)
    # nesting: on one thread, events either contain one another or do not overlap
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in evs)
    for (_a0, a1), (b0, b1) in zip(spans, spans[1:]):
        assert b0 >= a1 - 1e-3 or b1 <= a1 + 1e-3


def test_off_leaves_every_method_as_it_was():
    before = {k: v for k, v in vars(em.Tensor).items()}
    rules = dict(__import__("ember.grad_rules", fromlist=["RULES"]).RULES)
    with em.profiler.profile():
        assert em.Tensor.__dict__["exp"] is not before.get("exp") or "exp" not in before
        with pytest.raises(em.EmberError):
            with em.profiler.profile():
                pass
    assert dict(vars(em.Tensor)) == before
    assert __import__("ember.grad_rules", fromlist=["RULES"]).RULES == rules
    assert em.apply_op is __import__("ember.custom_op_n", fromlist=["apply_op"]).apply_op
