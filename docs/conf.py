"""Sphinx configuration: the Markdown pages in docs/ plus an API reference from docstrings.

Build with ``pip install ".[docs]" && sphinx-build -b html docs docs/_build``.
"""

project = "effth"
author = "effth developers"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.mathjax"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "dev_contract.md"]
myst_enable_extensions = ["dollarmath", "amsmath"]
napoleon_numpy_docstring = True
napoleon_google_docstring = False
autodoc_member_order = "bysource"
html_theme = "alabaster"
suppress_warnings = ["myst.header", "myst.xref_missing"]
