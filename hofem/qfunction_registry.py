"""The registry of named QFunctions (libCEED's gallery names) that the gallery fills.

The gallery modules (:mod:`hofem.qfunctions`) register their factories here with
:func:`register_gallery` when they are imported; :func:`gallery_entry`, which
``Ceed.QFunctionByName`` calls, imports the gallery on its first lookup. So
``import hofem`` imports no gallery module, and neither this module nor
:mod:`hofem.qfunction` imports the gallery that imports them.
"""

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["gallery_entry", "gallery_names", "register_gallery"]

# name -> factory(**kwargs) returning (func, inputs, outputs, context)
_GALLERY: dict[str, Callable] = {}
# the package whose import registers the gallery (loaded on the first lookup)
_GALLERY_PACKAGE = "hofem.qfunctions"


def register_gallery(name: str) -> Callable[[Callable], Callable]:
    """Decorator: register a gallery factory under libCEED's QFunction ``name``.

    The factory takes keyword arguments (e.g. ``size``) and returns
    ``(func, inputs, outputs, context)`` as accepted by :class:`hofem.QFunction`.
    """

    def decorator(factory: Callable) -> Callable:
        _GALLERY[name] = factory
        return factory

    return decorator


def _load_gallery() -> None:
    if not _GALLERY:
        importlib.import_module(_GALLERY_PACKAGE)


def gallery_names() -> list[str]:
    """The registered gallery names, sorted (the gallery is loaded first)."""
    _load_gallery()
    return sorted(_GALLERY)


def gallery_entry(name: str, **kwargs: Any) -> tuple:
    """Look up a gallery QFunction, importing the gallery on first use.

    Returns
    -------
    (func, inputs, outputs, context)
        What the factory registered under ``name`` returns for ``kwargs``.

    Raises
    ------
    ValueError
        No gallery QFunction of that name (the message lists the available ones).
    """
    _load_gallery()
    if name not in _GALLERY:
        raise ValueError(
            f"no gallery QFunction named {name!r}; available: {', '.join(sorted(_GALLERY))}"
        )
    return _GALLERY[name](**kwargs)
