"""Check a built site's API reference: every public name of hofem appears in it.

Run after the build (CI does)::

    python -m sphinx -W -b html docs docs/_build/html
    python docs/check_reference.py docs/_build/html

Public names: ``__all__`` of ``hofem``, ``hofem.meshes``, ``hofem.parallel``
and the bake-off modules, and the module-level functions of the QFunction gallery. Exits 1,
listing the missing names, when one is not in the site's ``objects.inv``.
"""

import importlib
import inspect
import sys
from pathlib import Path

from sphinx.ext.autodoc.mock import mock
from sphinx.util.inventory import InventoryFile

MODULES_WITH_ALL = [
    "hofem",
    "hofem.meshes",
    "hofem.parallel",
    "hofem.bakeoff.problems",
    "hofem.bakeoff.distributed",
]
GALLERY = [f"hofem.qfunctions.{name}" for name in ("identity", "mass", "poisson", "vector")]


def public_names():
    """Fully qualified public names, as the reference documents them."""
    for module_name in MODULES_WITH_ALL:
        with mock(["mpi4py"]):  # as conf.py's autodoc_mock_imports
            module = importlib.import_module(module_name)
        yield from (f"{module_name}.{name}" for name in module.__all__)
    for module_name in GALLERY:
        module = importlib.import_module(module_name)
        for name, obj in vars(module).items():
            if inspect.isfunction(obj) and obj.__module__ == module_name and name[0] != "_":
                yield f"{module_name}.{name}"


def main(html_dir):
    with open(Path(html_dir) / "objects.inv", "rb") as f:
        inventory = InventoryFile.load(f, "", lambda base, uri: uri)
    documented = {name for objects in inventory.values() for name in objects}
    missing = [name for name in public_names() if name not in documented]
    if missing:
        print("not in the API reference:", *missing, sep="\n  ")
        return 1
    print(f"API reference: every public name documented ({len(documented)} objects)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "docs/_build/html"))
