"""Sphinx configuration of the bayes_scalerl documentation.

Build from the repository root (this is what ``.ci/docs`` runs)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

The notebooks of ``notebooks/`` are executed as pages: they are copied into
``docs/notebooks/`` (git-ignored) when this file is read, so the copies always match the
originals, and run with small sample counts (``BAYES_SCALERL_NB_SAMPLES``).
"""

from __future__ import annotations

import os
import pkgutil
import re
import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
sys.path.insert(0, str(REPO))  # the package of this checkout, also without an install

# -- the notebooks: copies of ../notebooks/*.ipynb, run with small sample counts -------------
os.environ.setdefault("BAYES_SCALERL_NB_SAMPLES", "300")
# Headless figures: the kernels draw with matplotlib's inline backend (Agg underneath), which
# also puts each figure into the page; plain ``Agg`` (what the tests use) would draw none, and
# one set in the environment would silently empty the notebook pages, so it is overridden.
os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
# tqdm.auto warns in a kernel without ipywidgets ("IProgress not found"); not for these pages
os.environ["PYTHONWARNINGS"] = ",".join(
    filter(None, [os.environ.get("PYTHONWARNINGS"), "ignore:IProgress not found"])
)
# the folder notebooks/03_real_runs.ipynb looks in from its own folder (shared/ beside the repo)
os.environ.setdefault("BAYES_SCALERL_DAPO_DIR", str(REPO.parent / "shared" / "data" / "dapo-metrics"))


def _copy_notebooks() -> None:
    src, dst = REPO / "notebooks", DOCS / "notebooks"
    dst.mkdir(exist_ok=True)
    wanted = {p.name: p for p in sorted(src.glob("*.ipynb"))}
    for stale in dst.glob("*.ipynb"):
        if stale.name not in wanted:
            stale.unlink()
    for name, path in wanted.items():
        target = dst / name
        if not target.exists() or target.read_bytes() != path.read_bytes():
            shutil.copy2(path, target)  # keeps the mtime, so Sphinx rebuilds only changed notebooks


_copy_notebooks()

# -- project -------------------------------------------------------------------------------
import bayes_scalerl  # noqa: E402

project = "bayes_scalerl"
author = "bayes_scalerl contributors"
copyright = "the bayes_scalerl contributors; Apache-2.0"
version = release = bayes_scalerl.__version__

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "sphinx.ext.viewcode",
    "sphinxarg.ext",
]

exclude_patterns = ["_build", "**.ipynb_checkpoints", ".gitignore"]
templates_path = ["_templates"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"

# -- API reference -------------------------------------------------------------------------
autosummary_generate = True
autosummary_ignore_module_all = False  # a module's __all__ is its public API
autodoc_typehints = "none"  # the numpydoc docstrings state the types
autodoc_member_order = "bysource"
numpydoc_show_class_members = False  # autodoc lists the members itself
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False


# Each name of ``bayes_scalerl.__all__`` has its own page (api/index.md); the page of the module
# it lives in links there instead of documenting it a second time.
PUBLIC = {name: getattr(bayes_scalerl, name) for name in bayes_scalerl.__all__ if name != "__version__"}
TOPLEVEL_BY_MODULE: dict[str, list[str]] = {}
for _name, _obj in PUBLIC.items():
    TOPLEVEL_BY_MODULE.setdefault(_obj.__module__, []).append(_name)
# the modules of each subpackage (names relative to it), found without importing them
# (importing ``cli/__main__`` would run the command line)
SUBMODULES = {
    f"bayes_scalerl.{pkg}": [
        mod
        for _, mod, _ in pkgutil.iter_modules([str(Path(bayes_scalerl.__file__).parent / pkg)])
        if not mod.startswith("_")
    ]
    for _, pkg, ispkg in pkgutil.iter_modules(bayes_scalerl.__path__)
    if ispkg
}
autosummary_context = {"toplevel": TOPLEVEL_BY_MODULE, "submodules": SUBMODULES}
_PUBLIC_IDS = {id(obj) for obj in PUBLIC.values()}


def _skip_member(app, what, name, obj, skip, options):
    if what == "module" and id(obj) in _PUBLIC_IDS:
        return True
    # a NamedTuple's fields are described in its Attributes section already
    if what == "class" and (getattr(obj, "__doc__", None) or "").startswith("Alias for field number"):
        return True
    return None


# Fix-ups of docstrings that are valid numpydoc but not valid reST once rendered; each is a
# no-op when the docstring no longer has the pattern.
_SHAPE = re.compile(r"shape \(([^)]*)\)")


def _fix_docstring(app, what, name, obj, options, lines):
    for i, line in enumerate(lines):
        # ``ary : array_like, shape (chain, draw, *batch)``: numpydoc puts a type in emphasis,
        # where a bare ``*`` opens another one
        if " : " in line or line.startswith(("numpy", "    numpy")):
            lines[i] = _SHAPE.sub(lambda m: "shape (" + re.sub(r"(?<!\\)\*(?=\w)", r"\\*", m[1]) + ")", line)
    for i in range(len(lines) - 1):
        # a definition-list term with no definition before the next term: ``run`` in
        # identifiability's Returns
        term, nxt = lines[i], lines[i + 1]
        indent = term[: len(term) - len(term.lstrip())]
        if term.strip() == "``run``" and nxt.startswith(indent + "``") and nxt.rstrip().endswith("``"):
            lines.insert(i + 1, indent + "    The run's name.")
            break


def _check_api_index(app):
    """Every public name is listed in api/index.md (a new one must not go undocumented)."""
    from sphinx.util import logging

    text = (DOCS / "api" / "index.md").read_text()
    listed = {line.strip() for line in text.splitlines() if line.startswith("   ")}
    for name in sorted(set(PUBLIC) - listed):
        logging.getLogger(__name__).warning(
            f"bayes_scalerl.{name} is in bayes_scalerl.__all__ but not listed in docs/api/index.md"
        )


def setup(app):
    app.connect("autodoc-skip-member", _skip_member)
    app.connect("autodoc-process-docstring", _fix_docstring, priority=100)  # before numpydoc
    app.connect("builder-inited", _check_api_index)


# -- MyST and MyST-NB ----------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
nb_execution_mode = os.environ.get("BAYES_SCALERL_DOCS_EXECUTE", "force")
nb_execution_timeout = 600
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True

# -- HTML ----------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"bayes_scalerl {release}"
html_theme_options = {
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "show_prev_next": True,
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
# pages without sub-pages get no (empty) left sidebar
html_sidebars = {
    page: []
    for page in (
        "index",
        "getting-started",
        "model",
        "extrapolation",
        "comparing",
        "scaling",
        "reports",
        "cli",
        "development",
    )
}
html_static_path: list[str] = []
html_show_sourcelink = False
