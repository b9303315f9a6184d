"""em.save / em.load: nested dicts, lists and tuples of tensors and plain values in one safetensors file."""
from __future__ import annotations

import json
import math

from .errors import EmberTypeError, EmberValueError
from .io import _path, _refuse, read_tensors, save_safetensors
from .tensor_type import Tensor
from .variable import Var

__all__ = ["load", "save"]

_KEY = "ember.structure"  # the metadata entry that holds the structure (JSON)
_MAX_DEPTH = 200  # nesting deeper than this is refused on save and on load
# Each node of the structure is a JSON object with one tag: tensor, var, int, float, str, bool, None,
# list, tuple, dict (a list of [key node, value node] pairs, so int keys such as an optimizer's survive).
_SCALAR_KEYS = (bool, int, float, str, type(None))


def _where(path):
    return "obj" + "".join(f"[{k!r}]" for k in path)


def save(obj, path) -> None:
    """Writes ``obj`` (nested dicts, lists and tuples of tensors and plain values) to ``path``.

    The file is a safetensors file: its tensors are the tensors of ``obj`` (named after where they sit,
    such as ``model.fc.weight``), and its metadata holds the structure as JSON under
    ``"ember.structure"``. Nothing is pickled, so loading a file cannot run code. A typical
    checkpoint::

        em.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": 10}, "ck.safetensors")

    Args:
        obj: a tensor, int, float, str, bool or None, or a dict, list or tuple of them at any depth up to
            200. Dict keys may be str, int, float, bool or None. A tensor that appears twice is stored
            once; ``em.Var`` s load back as ``em.Var`` s.
        path: a ``str`` or ``os.PathLike``; written atomically (a temporary file, then a rename).

    Raises:
        EmberTypeError: a value or key of another type (named by where it sits), or a bad path type.
        EmberValueError: nesting deeper than 200, or a structure that contains itself.
    """
    path = _path(path, "save")
    tensors, names = {}, {}  # name -> tensor; id(tensor) -> name
    active = set()  # ids of the containers being encoded (a cycle would recurse forever)

    def name_for(t, where):
        if id(t) in names:
            return names[id(t)]
        base = ".".join(str(k) for k in where) or "tensor"
        name, i = base, 1
        while name in tensors or name == "__metadata__":
            name, i = f"{base}#{i}", i + 1
        tensors[name] = t
        names[id(t)] = name
        return name

    def enc(x, where):
        if len(where) > _MAX_DEPTH:
            raise EmberValueError(f"[save] {_where(where[:3])}...: nesting deeper than {_MAX_DEPTH}")
        if isinstance(x, Tensor):
            return {"var" if x.is_variable else "tensor": name_for(x, where)}
        if x is None or isinstance(x, bool):
            return {"none": None} if x is None else {"bool": x}
        if isinstance(x, int):
            return {"int": int(x)}
        if isinstance(x, float):
            return {"float": repr(float(x))}  # a string: JSON has no inf or nan
        if isinstance(x, str):
            return {"str": x}
        if isinstance(x, (dict, list, tuple)):
            if id(x) in active:
                raise EmberValueError(f"[save] {_where(where)} contains itself")
            active.add(id(x))
            try:
                if isinstance(x, dict):
                    items = []
                    for k, v in x.items():
                        if not isinstance(k, _SCALAR_KEYS):
                            raise EmberTypeError(f"[save] {_where(where)} has a key of type {type(k).__name__}; keys "
                                                 "must be str, int, float, bool or None")
                        items.append([enc(k, where), enc(v, (*where, k))])
                    return {"dict": items}
                return {"list" if isinstance(x, list) else "tuple": [enc(v, (*where, i)) for i, v in enumerate(x)]}
            finally:
                active.discard(id(x))
        raise EmberTypeError(f"[save] {_where(where)} is a {type(x).__name__}; em.save writes tensors, dicts, lists, "
                             "tuples, int, float, str, bool and None (never pickle)")

    structure = enc(obj, ())
    meta = {_KEY: json.dumps(structure, separators=(",", ":"), allow_nan=False), "format": "ember"}
    save_safetensors({n: t.detach() for n, t in tensors.items()}, path, metadata=meta)


def load(path, device=None):
    """Reads back what ``em.save`` wrote.

    The file is checked as ``em.load_safetensors`` checks any safetensors file, then its structure is
    checked node by node (known tags only, existing tensors only, nesting up to 200); a file without
    the structure (one from ``save_safetensors`` or another library) loads as ``{name: Tensor}``.

    Args:
        path: a ``str`` or ``os.PathLike``.
        device: where the tensors go (default: the default device).

    Returns:
        The saved object: dicts, lists and tuples as saved, tensors (``em.Var`` s where a Var was
        saved) and plain values. A tensor saved twice in one object is one tensor again.

    Raises:
        EmberIOError: the file cannot be opened or is not a regular file.
        EmberValueError: a malformed file or structure (bad JSON, an unknown node, a reference to a
            tensor the file lacks, nesting deeper than 200).
        DTypeError: a tensor of a dtype ember cannot hold.
    """
    path = _path(path, "load")
    tensors, header = read_tensors(path, device, "load")
    text = (header.get("__metadata__") or {}).get(_KEY)
    if text is None:
        return tensors
    try:
        structure = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise _refuse("load", path, f"the structure is not valid JSON ({str(e)[:200]})") from None
    made = {}  # name -> the (Var) tensor handed out, so shared tensors stay shared

    def bad(why):
        return _refuse("load", path, f"bad structure: {why}")

    def tensor_ref(name, var):
        if not isinstance(name, str) or name not in tensors:
            raise bad(f"a reference to a tensor the file lacks ({str(name)[:100]!r})")
        if name not in made:
            made[name] = Var(tensors[name]) if var else tensors[name]
        return made[name]

    def dec(node, depth, key=False):
        if depth > _MAX_DEPTH:
            raise bad(f"nesting deeper than {_MAX_DEPTH}")
        if not isinstance(node, dict) or len(node) != 1:
            raise bad(f"a node must be an object with one tag, got {str(node)[:100]}")
        (tag, v), = node.items()
        if tag == "none" and v is None:
            return None
        if tag == "bool" and isinstance(v, bool):
            return v
        if tag == "int" and type(v) is int:
            return v
        if tag == "float" and isinstance(v, str) and len(v) < 40:
            try:
                f = float(v)
            except ValueError:
                raise bad(f"{v!r} is not a float") from None
            if math.isfinite(f) or v in ("inf", "-inf", "nan"):
                return f
        if tag == "str" and isinstance(v, str):
            return v
        if key:
            raise bad(f"a dict key must be a str, int, float, bool or None node, got {str(node)[:100]}")
        if tag in ("tensor", "var"):
            return tensor_ref(v, tag == "var")
        if tag in ("list", "tuple") and isinstance(v, list):
            out = [dec(x, depth + 1) for x in v]
            return out if tag == "list" else tuple(out)
        if tag == "dict" and isinstance(v, list):
            out = {}
            for pair in v:
                if not isinstance(pair, list) or len(pair) != 2:
                    raise bad("a dict entry must be a [key, value] pair")
                k = dec(pair[0], depth + 1, key=True)
                if k in out:
                    raise bad(f"the key {k!r} appears twice in a dict")
                out[k] = dec(pair[1], depth + 1)
            return out
        raise bad(f"unknown node {str(node)[:100]}")

    return dec(structure, 0)
