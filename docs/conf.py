"""Sphinx configuration of the hofem site: ``python -m sphinx -W -b html docs docs/_build/html``.

Markdown pages through myst-parser, the API reference by autodoc + napoleon
from the NumPy-style docstrings, tutorials executed at build time by
sphinx-gallery (``docs/tutorials/*.py`` → ``docs/auto_tutorials/``).
"""

import os
import socket
import urllib.parse

import hofem

os.environ.setdefault("MPLBACKEND", "Agg")

project = "hofem"
author = "the hofem developers"
copyright = "2026, the hofem developers"
release = version = hofem.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = [
    "_build",
    "tutorials",
    "auto_tutorials/*.ipynb",
    "auto_tutorials/*.py",
    "**.zip",
]
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = f"hofem {release}"

# NumPy-style docstrings; shapes and dtypes are free text, not cross-references
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_use_ivar = True
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": False}
autodoc_typehints = "none"
# hofem.parallel imports mpi4py; its reference needs no MPI installation
autodoc_mock_imports = ["mpi4py"]

_INVENTORIES = {
    "python": "https://docs.python.org/3/",
    "numpy": "https://numpy.org/doc/stable/",
    "scipy": "https://docs.scipy.org/doc/scipy/",
    "cupy": "https://docs.cupy.dev/en/stable/",
}


def _reachable(url):
    """Whether the inventory's host answers: offline builds (CI) link those names as text."""
    host = urllib.parse.urlsplit(url).hostname
    try:
        socket.create_connection((host, 443), timeout=3).close()
    except OSError:
        print(f"hofem docs: {host} unreachable, no intersphinx links to it in this build")
        return False
    return True


intersphinx_mapping = {
    name: (url, None)
    for name, url in _INVENTORIES.items()
    if not os.environ.get("HOFEM_DOCS_OFFLINE") and _reachable(url)
}

sphinx_gallery_conf = {
    "examples_dirs": "tutorials",
    "gallery_dirs": "auto_tutorials",
    "filename_pattern": r"/plot_",  # every tutorial runs at build time
    "within_subsection_order": "FileNameSortKey",
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "image_scrapers": ("matplotlib",),
}
