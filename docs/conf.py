"""Sphinx configuration for the hpcfutures documentation.

Build with warnings as errors (as CI does)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html
"""

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Document the checkout this file belongs to, and find the local extension.
sys.path[:0] = [str(HERE.parent), str(HERE / "_ext")]

import hpcfutures  # noqa: E402

project = "hpcfutures"
author = "the hpcfutures developers"
copyright = "the hpcfutures developers"
release = version = hpcfutures.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "hpcfutures_docs",  # docs/_ext: configuration tables generated from the code
]

exclude_patterns = ["_build"]
templates_path: list[str] = []
html_static_path: list[str] = []

html_theme = "furo"
html_title = f"hpcfutures {release}"

# Docstrings are Google style.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

# Cubed supports Python 3.11 and later: on 3.10 (the floor's interpreter) hpcfutures.cubed
# is documented against stand-ins for Cubed's classes.
if importlib.util.find_spec("cubed") is None:
    autodoc_mock_imports = ["cubed"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
autodoc_preserve_defaults = True
autoclass_content = "class"

pygments_style = "sphinx"
pygments_dark_style = "monokai"

# Every reference to a public hpcfutures name must resolve (so a renamed class
# breaks the build); references to the standard library and to private
# modules are not checked, since the build uses no network (no intersphinx).
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(?!hpcfutures\b).*"),
    (r"py:.*", r"hpcfutures(\.\w+)*\._.*"),
]
