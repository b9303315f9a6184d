"""Every public name has a docstring that says what it does and names its arguments."""
import inspect

import pytest

import ember as em

# The public modules and the names each hands out (their __all__).
MODULES = ["ember", "ember.nn", "ember.nn.ops", "ember.nn.utils", "ember.optim", "ember.optim.lr_scheduler",
           "ember.testing", "ember.models"]
# Classes whose public methods and properties users call directly.
CLASSES = ["Tensor", "Var", "GradStore", "CustomOp1", "CustomOp2", "CustomOp3", "InplaceOp1", "InplaceOp2",
           "InplaceOp3", "Layout", "Storage", "CpuStorage", "DType", "Device"]


def _module(name):
    mod = em
    for part in name.split(".")[1:]:
        mod = getattr(mod, part)
    return mod


def _public_names():
    for modname in MODULES:
        mod = _module(modname)
        assert hasattr(mod, "__all__"), f"{modname} defines no __all__"
        for name in mod.__all__:
            yield f"{modname}.{name}", getattr(mod, name)


def _members(cls):
    for name, value in vars(cls).items():
        if name.startswith("_") and name not in ("__init__", "__call__", "__getitem__", "__setitem__"):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if callable(value) or isinstance(value, property) or type(value).__name__ in ("getset_descriptor",
                                                                                       "instancemethod"):
            yield name, getattr(cls, name, value) if not isinstance(value, property) else value


def _params(obj):
    """Parameter names a docstring must mention (none for C functions without a signature)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    return [p.name for p in sig.parameters.values()
            if p.name not in ("self", "cls", "args", "kwargs") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _own_text(obj):
    """The docstring without pybind11's generated signature lines, which say nothing by themselves."""
    doc = inspect.getdoc(obj) or ""
    name = getattr(obj, "__name__", None) or getattr(getattr(obj, "fget", None), "__name__", "")
    lines = [ln for ln in doc.splitlines() if not (name and ln.startswith(name + "(") and ") ->" in ln)]
    lines = [ln for ln in lines if not (ln[:1].isdigit() and ". " + name + "(" in ln)]  # overload lists
    return "\n".join(ln for ln in lines if ln.strip() != "Overloaded function.")


def _problems(qualname, obj):
    if isinstance(obj, (int, float, str, tuple, em.DType, em.Device)):
        return []  # constants (dtypes, devices, ALL_DTYPES) are documented where they are listed
    if inspect.ismodule(obj):
        return [] if (obj.__doc__ or "").strip() else [f"{qualname}: module without a docstring"]
    doc = _own_text(obj)
    if not doc.strip():
        return [f"{qualname}: no docstring"]
    fn = obj.fget if isinstance(obj, property) else obj
    if inspect.isclass(fn):
        fn = fn.__init__ if "__init__" in vars(fn) else None
        if fn is not None:
            doc = doc + "\n" + _own_text(fn)
    missing = [p for p in (_params(fn) if fn is not None else []) if p not in doc]
    return [f"{qualname}: docstring does not mention argument(s) {', '.join(missing)}"] if missing else []


def test_public_modules_define_all_and_document_every_name():
    bad = [p for q, obj in _public_names() for p in _problems(q, obj)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("clsname", CLASSES)
def test_public_methods_are_documented(clsname):
    cls = getattr(em, clsname)
    bad = [p for name, m in _members(cls) for p in _problems(f"{clsname}.{name}", m)]
    assert not bad, "\n".join(bad)


def test_custom_op_help_explains_the_contract():
    # help(em.CustomOp1) is where a user learns the custom-op contract: every part of it is there.
    doc = inspect.getdoc(em.CustomOp1)
    for needle in ("name", "cpu_fwd", "metal_fwd", "bwd", "out_dtype", "layout", "apply_op1", "EmberError",
                   "BackwardNotSupported", "check_op"):
        assert needle in doc, f"help(em.CustomOp1) does not explain {needle!r}"


def test_tensor_docs_table_has_no_dead_entries():
    # An entry for a method that was renamed, removed or documented in place would be dead text.
    from ember import tensor_docs

    assert tensor_docs.unused_entries(em.Tensor, em.Var) == []
