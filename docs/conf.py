"""Sphinx configuration of ember's documentation (built strict in CI: every warning fails)."""
import re

# autodoc imports ember: the installed package (pip install ".[docs]"), or a developer build with
# PYTHONPATH=python.

project = "ember"
author = "the ember developers"
copyright = "2026, the ember developers"

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode"]
source_suffix = {".md": "markdown"}
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
exclude_patterns = ["_build"]

autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "alabaster"
html_title = "ember"


# pybind11 lists the overloads of a bound function as numbered signatures. ember's bindings add a
# catch-all overload (*args, **kwargs) that only raises a clear error: drop it and the "Overloaded
# function." line, and show the real signature as code.
_OVERLOAD = re.compile(r"^\d+\. (\w+\(.*\)(?: -> \S+)?)$")


def _clean_pybind_overloads(app, what, name, obj, options, lines):
    out = []
    for line in lines:
        m = _OVERLOAD.match(line)
        if line.strip() == "Overloaded function.":
            continue
        if m:
            if "*args" not in m.group(1):
                out.append(f"``{m.group(1)}``")
            continue
        out.append(line)
    lines[:] = out


def setup(app):
    app.connect("autodoc-process-docstring", _clean_pybind_overloads)
