"""python/ember's import graph, built from the source with ast: no cycles, no sys.modules / importlib, no late imports."""
import ast
from pathlib import Path

import ember as em

PKG = Path(em.__file__).resolve().parent
# late imports allowed: optional dependencies loaded lazily (each site carries a one-line reason)
OPTIONAL = {"ml_dtypes", "transformers", "tokenizers", "torch", "huggingface_hub", "safetensors"}


def _modules():
    """Maps each module name (ember, ember.nn, ember.nn.ops, ...) to its source file."""
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    for path in sorted(PKG.glob("*.so")) + sorted(PKG.glob("*.pyd")):  # the extension: a node with no source
        out.setdefault(f"{PKG.name}.{path.name.split('.')[0]}", None)
    return out


def _package_of(name, path):
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _targets(node, name, path, mods):
    """The ember modules an import statement loads by name (parent packages' __init__ left out)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in mods]
    if node.level:
        base = _package_of(name, path).split(".")
        base = base[:len(base) - (node.level - 1)]
        mod = ".".join(base + ([node.module] if node.module else []))
    else:
        mod = node.module or ""
    if mod != "ember" and not mod.startswith("ember."):
        return []
    out = []
    for a in node.names:
        sub = f"{mod}.{a.name}"
        if sub in mods:  # `from . import x` loads the submodule x
            out.append(sub)
        elif mod in mods:
            out.append(mod)
    return out


def _walk(tree):
    """Yields (import node, is_late): late = inside a function body."""
    def visit(node, late):
        for child in ast.iter_child_nodes(node):
            inner = late or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, late
            yield from visit(child, inner)
    yield from visit(tree, False)


def import_graph():
    """Returns ({module: set of imported ember modules}, [(module, line, what) of late ember imports])."""
    mods = _modules()
    graph, late_ember = {}, []
    for name, path in mods.items():
        edges = set()
        if path is None:
            graph[name] = edges
            continue
        for node, late in _walk(ast.parse(path.read_text(), str(path))):
            for t in _targets(node, name, path, mods):
                if t != name:
                    edges.add(t)
                if late:
                    late_ember.append((name, node.lineno, t))
        graph[name] = edges
    return graph, late_ember


def strongly_connected(graph):
    """Tarjan's components of size > 1 (each a list of module names), iteratively."""
    index, low, on, stack, comps, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        comps.append(sorted(comp))
    return comps


def _one_cycle(graph, comp):
    """A shortest cycle through comp's first module, as a path a -> b -> ... -> a."""
    members, start = set(comp), comp[0]
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return " -> ".join(reversed(path)) + f" -> {start}"
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return " -> ".join(comp)


def test_ast_graph_resolves_relative_and_submodule_imports():
    # guards the checker itself: a known edge of each kind must be found
    graph, _ = import_graph()
    assert "ember._C" in graph["ember"]  # `from . import _C` names the submodule
    assert "ember.nn" in graph["ember"] and "ember.errors" in graph["ember.dtypes"]


def test_no_import_cycles():
    graph, _ = import_graph()
    comps = strongly_connected(graph)
    msg = "\n".join(f"{len(c)} modules: {_one_cycle(graph, c)}" for c in comps)
    assert not comps, f"import cycles in python/ember:\n{msg}"


def test_no_late_imports_of_ember_modules():
    _, late = import_graph()
    assert not late, "imports of ember modules inside functions:\n" + "\n".join(
        f"{m}:{line} imports {t}" for m, line, t in late)


def test_no_sys_modules_or_importlib():
    bad = []
    for name, path in _modules().items():
        if path is None:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "modules" and \
                    isinstance(node.value, ast.Name) and node.value.id == "sys":
                bad.append(f"{name}:{node.lineno} sys.modules")
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "importlib" for a in node.names):
                bad.append(f"{name}:{node.lineno} import importlib")
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "importlib":
                bad.append(f"{name}:{node.lineno} from importlib")
    assert not bad, "\n".join(bad)


def test_late_imports_only_for_optional_dependencies():
    bad = []
    for name, path in _modules().items():
        if path is None:
            continue
        for node, late in _walk(ast.parse(path.read_text(), str(path))):
            if not late or getattr(node, "level", 0) or (isinstance(node, ast.ImportFrom) and
                                                         (node.module or "").split(".")[0] == "ember"):
                continue  # ember's own late imports are reported by the test above
            roots = [a.name.split(".")[0] for a in node.names] if isinstance(node, ast.Import) else \
                [(node.module or "").split(".")[0]]
            bad += [f"{name}:{node.lineno} {r}" for r in roots if r not in OPTIONAL]
    assert not bad, "late imports of non-optional modules:\n" + "\n".join(bad)


def test_nn_imports_no_tensor_internals():
    # nn builds on ops (kernel_result, args, ...): from the Tensor module it takes the type, never a private
    bad = []
    for name, path in _modules().items():
        if path is None or not (name == "ember.nn" or name.startswith(("ember.nn.", "ember.optim", "ember.models"))):
            continue
        for node, _ in _walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("tensor_type"):
                bad += [f"{name}:{node.lineno} {a.name}" for a in node.names if a.name.startswith("_")]
    assert not bad, "nn imports the Tensor module's internals:\n" + "\n".join(bad)
