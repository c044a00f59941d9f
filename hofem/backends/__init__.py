"""Backend registry: resource strings -> backend classes.

A backend is a class that implements the heavy arithmetic of the interface
objects (restriction gather/scatter, basis actions, operator apply and
assembly).  Backends form a delegation chain by inheritance: a backend
overrides only what it speeds up and inherits the rest from the next simpler
one (``/cpu/self/numba`` -> ``/cpu/self/ref``; ``/gpu/cuda/gen`` ->
``/gpu/cuda/batched`` -> ``/gpu/cuda/ref``).

Backends are registered lazily, by module path, so that importing hofem never
imports Numba or CuPy.  A backend whose extra is missing is *unavailable*:
asking for it by full name raises an error that names the extra; a prefix such
as ``/cpu/self`` resolves to the available backend of highest priority.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .contract import Backend

__all__ = [
    "BackendUnavailable",
    "array_backend",
    "available",
    "prefixes",
    "register",
    "registered",
    "resolve",
]


class BackendUnavailable(RuntimeError):
    """A registered backend cannot run here (missing extra or device)."""


# resource -> (module path, class name, priority); higher priority is preferred
_REGISTRY = {}


def register(resource: str, module: str, cls: str, priority: int) -> None:
    """Register a backend class by module path (imported on first use).

    Parameters
    ----------
    resource : str
        Full resource name, e.g. ``"/cpu/self/ref"``.
    module, cls : str
        Module path and class name of the backend.
    priority : int
        Rank among backends sharing a prefix; the highest available wins.
    """
    _REGISTRY[resource] = (module, cls, priority)


register("/cpu/self/ref", "hofem.backends.ref", "RefBackend", 0)
register("/cpu/self/numba", "hofem.backends.numba.backend", "NumbaBackend", 10)
register("/gpu/cuda/ref", "hofem.backends.cuda.ref", "CudaRefBackend", 0)
register("/gpu/cuda/batched", "hofem.backends.cuda.batched", "CudaBatchedBackend", 10)
register("/gpu/cuda/gen", "hofem.backends.cuda.gen", "CudaGenBackend", 20)


def _load(resource):
    module, cls, _ = _REGISTRY[resource]
    try:
        backend_cls = getattr(importlib.import_module(module), cls)
        backend_cls.check_available()
    except ImportError as exc:
        raise BackendUnavailable(f"backend {resource!r} is unavailable: {exc}") from exc
    return backend_cls


def registered() -> list[str]:
    """Return the full resource names of all registered backends, available here or not.

    Returns
    -------
    list of str
        Sorted by resource name.
    """
    return sorted(_REGISTRY)


def prefixes() -> list[str]:
    """Return the prefixes that name the best available backend under them.

    Returns
    -------
    list of str
        Every proper prefix of a registered resource (``"/cpu"``, ``"/cpu/self"``,
        ``"/gpu"``, ``"/gpu/cuda"``), sorted.
    """
    found = set()
    for resource in _REGISTRY:
        parts = resource.split("/")[1:-1]  # "/cpu/self/ref" -> ["cpu", "self"]
        found.update("/" + "/".join(parts[: k + 1]) for k in range(len(parts)))
    return sorted(found)


def available() -> list[str]:
    """Return the resource names of the backends that can run here.

    Returns
    -------
    list of str
        Sorted by resource name.
    """
    names = []
    for resource in sorted(_REGISTRY):
        try:
            _load(resource)
        except BackendUnavailable:
            continue
        names.append(resource)
    return names


def resolve(resource: str) -> Backend:
    """Instantiate the backend for a resource string.

    Parameters
    ----------
    resource : str
        A full name (``"/cpu/self/ref"``) or a prefix (``"/cpu/self"``,
        ``"/gpu/cuda"``, ``"/cpu"``, ``"/gpu"``) that picks the available
        backend of highest priority under it.

    Raises
    ------
    ValueError
        Unknown resource; the message lists the registered ones and the prefixes.
    BackendUnavailable
        The backend (or every backend under the prefix) cannot run here; the
        message says why and lists the available ones.
    """
    if not isinstance(resource, str):
        raise TypeError(f"resource must be a str like '/cpu/self', got {type(resource).__name__}")
    name = resource.rstrip("/") or "/"
    if name in _REGISTRY:
        return _load(name)()
    candidates = sorted(
        (r for r in _REGISTRY if r.startswith(name + "/")),
        key=lambda r: -_REGISTRY[r][2],
    )
    if not candidates:
        raise ValueError(
            f"unknown resource {resource!r}; registered backends: {', '.join(sorted(_REGISTRY))}"
            f"; or a prefix for the best available one: {', '.join(prefixes())}"
        )
    reasons = []
    for candidate in candidates:
        try:
            return _load(candidate)()
        except BackendUnavailable as exc:
            reasons.append(str(exc))
    raise BackendUnavailable(
        f"no backend under {resource!r} can run here ({'; '.join(reasons)}); "
        f"available: {', '.join(available())}"
    )


def array_backend(x: Any) -> Backend | None:
    """The simplest available backend whose array module holds ``x``, or None.

    The priority-0 (reference) backends are tried first, so a CuPy array gets
    ``/gpu/cuda/ref`` without importing Numba; what :func:`hofem.cg` uses for the
    vector work of a system given as a matrix or ``LinearOperator``.

    Parameters
    ----------
    x : array
        NumPy, CuPy, or anything else (then None).
    """
    for resource in sorted(_REGISTRY, key=lambda r: (_REGISTRY[r][2], r)):
        try:
            backend_cls = _load(resource)
        except BackendUnavailable:
            continue
        if isinstance(x, backend_cls.xp.ndarray):
            return backend_cls()
    return None
