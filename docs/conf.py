"""Sphinx configuration: the Markdown pages in docs/ plus an API reference from docstrings.

Build with ``pip install ".[docs]" && sphinx-build -b html docs docs/_build``.
"""

project = "effth"
author = "effth developers"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.mathjax"]
try:  # myst-nb renders the notebooks (docs/notebooks links to ../notebooks) from their stored outputs
    import myst_nb  # noqa: F401
except ImportError:  # without it the Markdown pages still build; the notebooks page lists the files
    extensions.insert(0, "myst_parser")
    source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
    exclude_patterns_nb = ["notebooks"]
else:
    extensions.insert(0, "myst_nb")
    nb_execution_mode = "off"  # never execute: the notebooks are stored rendered
    exclude_patterns_nb = []
root_doc = "index"
exclude_patterns = ["_build", "dev_contract.md", "**/.ipynb_checkpoints"] + exclude_patterns_nb
myst_enable_extensions = ["dollarmath", "amsmath"]
napoleon_numpy_docstring = True
napoleon_google_docstring = False
autodoc_member_order = "bysource"
html_theme = "alabaster"
suppress_warnings = ["myst.header", "myst.xref_missing"]
