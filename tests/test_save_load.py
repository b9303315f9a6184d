"""em.save / em.load: nested structures of tensors and plain values round trip through one safetensors
file (readable by the safetensors package), and hostile structures are refused cleanly."""
import json
import math
import struct

import numpy as np
import pytest
from safetensors.numpy import load_file

import ember as em

from conftest import FLOATS, INTS, NP


def _meta_file(path, structure, tensors=None):
    """A safetensors file whose ember structure is ``structure`` (a JSON string or an object)."""
    text = structure if isinstance(structure, str) else json.dumps(structure)
    em.save_safetensors(tensors or {"a": em.tensor([1.0, 2.0])}, path, metadata={"ember.structure": text})
    return path


def _eq(a, b):
    if isinstance(a, em.Tensor):
        assert isinstance(b, em.Tensor) and a.dtype == b.dtype and a.shape == b.shape and a.device == b.device
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        assert type(a) is type(b)
        return
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _eq(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _eq(x, y)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert a == b


def test_round_trip_of_a_training_checkpoint(tmp_path, device):
    model = em.nn.Sequential(em.nn.Linear(4, 3), em.nn.LayerNorm(3))
    opt = em.optim.AdamW(model.parameters(), lr=0.01)
    x = em.randn(5, 4)
    opt.backward_step(model(x).sqr().mean())
    ck = {"model": model.state_dict(), "optim": opt.state_dict(), "step": 10, "note": "héllo", "best": None,
          "flags": (True, False), "losses": [1.5, float("inf"), -0.0, float("nan"), 1e-310], "big": 2**70}
    em.save(ck, tmp_path / "ck.safetensors")
    back = em.load(tmp_path / "ck.safetensors")
    _eq(back, ck)
    assert list(back["optim"]["state"]) == [0, 1, 2, 3]  # int keys stay ints
    # The file is ordinary safetensors: the package reads the tensors under their structural names.
    raw = load_file(str(tmp_path / "ck.safetensors"))
    np.testing.assert_array_equal(raw["model.0.weight"], ck["model"]["0.weight"].numpy())
    assert em.load_safetensors(tmp_path / "ck.safetensors").keys() == raw.keys()


@pytest.mark.parametrize("dtype", FLOATS + INTS + [em.bool], ids=lambda d: d.name)
def test_dtypes_views_and_devices(tmp_path, dtype, device):
    base = em.tensor((np.arange(24) % 5).astype(NP[dtype.name]).reshape(4, 6), device=device)
    views = [base, base.t(), base[1:3, ::2], em.tensor(np.zeros((0, 3), NP[dtype.name]), device=device), base[2, 3]]
    em.save({"v": views}, tmp_path / "d.safetensors")
    back = em.load(tmp_path / "d.safetensors", device="cpu")
    for a, b in zip(views, back["v"]):
        assert b.device == em.cpu and b.dtype == dtype and b.shape == a.shape
        np.testing.assert_array_equal(b.numpy(), a.numpy())
    assert em.load(tmp_path / "d.safetensors")["v"][0].device == em.get_default_device()
    assert em.load(tmp_path / "d.safetensors", device=device)["v"][0].device == device


def test_vars_shared_tensors_and_top_level_values(tmp_path):
    w = em.Var(np.ones(3, np.float32))
    t = em.tensor([1, 2])
    em.save({"w": w, "again": w, "t": [t, t]}, tmp_path / "s.safetensors")
    back = em.load(tmp_path / "s.safetensors")
    assert isinstance(back["w"], em.Var) and back["w"].is_variable and back["again"] is back["w"]
    assert not back["t"][0].is_variable and back["t"][0] is back["t"][1]
    assert len(em.load_safetensors(tmp_path / "s.safetensors")) == 2  # each tensor stored once
    for obj in (5, "x", None, [], {}, (), em.tensor(3.0), {"a.b": {"c": em.ones(1)}, "a": {"b.c": em.zeros(1)}}):
        em.save(obj, tmp_path / "o.safetensors")
        _eq(em.load(tmp_path / "o.safetensors"), obj)


def test_plain_safetensors_file_loads_as_dict(tmp_path):
    em.save_safetensors({"x": em.ones(2), "y": em.zeros(3)}, tmp_path / "p.safetensors")
    back = em.load(tmp_path / "p.safetensors")
    assert sorted(back) == ["x", "y"] and back["y"].shape == (3,)


@pytest.mark.parametrize("obj,match", [
    ({"a": object()}, r"^\[save\] obj\['a'\] is a object; em.save writes tensors"),
    ([np.ones(2)], r"^\[save\] obj\[0\] is a ndarray"),
    ({(1, 2): 3}, r"^\[save\] obj has a key of type tuple"),
    ({1, 2}, r"^\[save\] obj is a set"),
])
def test_save_refuses_other_types(tmp_path, obj, match):
    with pytest.raises(em.EmberTypeError, match=match):
        em.save(obj, tmp_path / "x.safetensors")
    assert not (tmp_path / "x.safetensors").exists()


def test_save_refuses_cycles_deep_nesting_and_bad_paths(tmp_path):
    a = []
    a.append(a)
    with pytest.raises(em.EmberValueError, match=r"^\[save\] obj\[0\] contains itself"):
        em.save(a, tmp_path / "c")
    deep = 1
    for _ in range(300):
        deep = [deep]
    with pytest.raises(em.EmberValueError, match=r"^\[save\] .*nesting deeper than 200"):
        em.save(deep, tmp_path / "c")
    with pytest.raises(em.EmberTypeError, match=r"^\[save\] path must be"):
        em.save({}, None)
    with pytest.raises(em.EmberTypeError, match=r"^\[load\] path must be"):
        em.load(3.5)
    with pytest.raises(em.EmberIOError, match=r"^\[load\]"):
        em.load(tmp_path / "missing")


def _deep(n):
    node = {"int": 1}
    for _ in range(n):
        node = {"list": [node]}
    return node


@pytest.mark.parametrize("structure,match", [
    ("{not json", r"the structure is not valid JSON"),
    ("[" * 100_000 + "]" * 100_000, r"the structure is not valid JSON"),  # deeper than the JSON parser goes
    ("1" * 5000, r"the structure is not valid JSON"),  # past Python's integer digit limit
    ({"tensor": "missing"}, r"bad structure: a reference to a tensor the file lacks \('missing'\)"),
    ({"var": 5}, r"bad structure: a reference to a tensor the file lacks"),
    ({"list": [{"tensor": "a"}, {"tensor": "b"}]}, r"bad structure: a reference to a tensor the file lacks \('b'\)"),
    (_deep(250), r"bad structure: nesting deeper than 200"),
    ({"int": 1, "str": "x"}, r"bad structure: a node must be an object with one tag"),
    ([1, 2], r"bad structure: a node must be an object with one tag"),
    ({"pickle": "cos\nsystem\n"}, r"bad structure: unknown node"),
    ({"int": "1"}, r"bad structure: unknown node"),
    ({"int": 1.5}, r"bad structure: unknown node"),
    ({"bool": 1}, r"bad structure: unknown node"),
    ({"float": "1e999x"}, r"bad structure: '1e999x' is not a float"),
    ({"float": "1e999"}, r"bad structure: unknown node"),  # only inf/nan spelled as repr writes them
    ({"float": 1.5}, r"bad structure: unknown node"),
    ({"list": {"int": 1}}, r"bad structure: unknown node"),
    ({"dict": [[{"int": 1}]]}, r"bad structure: a dict entry must be a \[key, value\] pair"),
    ({"dict": [[{"list": []}, {"int": 1}]]}, r"bad structure: a dict key must be a str, int"),
    ({"dict": [[{"tensor": "a"}, {"int": 1}]]}, r"bad structure: a dict key must be a str, int"),
    ({"dict": [[{"str": "k"}, {"int": 1}], [{"str": "k"}, {"int": 2}]]}, r"bad structure: the key 'k' appears twice"),
])
def test_hostile_structures_are_refused(tmp_path, structure, match):
    path = _meta_file(tmp_path / "h.safetensors", structure)
    with pytest.raises(em.EmberValueError, match=r"^\[load\] .*h.safetensors: " + match):
        em.load(path)


def test_huge_counts_are_bounded_by_the_file(tmp_path):
    # A structure may only list what its bytes spell out: a million references cost a million nodes'
    # parsing and give one shared tensor, never a million copies.
    path = _meta_file(tmp_path / "m.safetensors", {"list": [{"tensor": "a"}] * 1_000_000})
    back = em.load(path)
    assert len(back) == 1_000_000 and all(t is back[0] for t in back[:10])
    # A header that claims more bytes than the file holds is refused before anything is read.
    data = (tmp_path / "m.safetensors").read_bytes()
    (tmp_path / "n.safetensors").write_bytes(struct.pack("<Q", 2**62) + data[8:])
    with pytest.raises(em.EmberValueError, match=r"^\[load\] .*header length"):
        em.load(tmp_path / "n.safetensors")


def test_hostile_tensor_entries_get_load_safetensors_checks(tmp_path):
    text = json.dumps({"__metadata__": {"ember.structure": json.dumps({"tensor": "a"})},
                       "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
    (tmp_path / "e.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + b"\0" * 8)
    with pytest.raises(em.EmberValueError, match=r"^\[load\] .*data_offsets \[0, 8\] of 'a' do not match"):
        em.load(tmp_path / "e.safetensors")
