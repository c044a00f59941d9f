"""Memory accounting: the arrays that operators, spaces and vectors hold, and the process peak.

:func:`memory_report` walks hofem objects (operators, spaces, restrictions,
bases, meshes, numberings, the distributed exchange) and sums the distinct
arrays it reaches, by the type of the object holding them and by where they
live (host NumPy or device CuPy memory). Views count their whole base array
once, so an array shared by several objects (the offsets of a space and of its
restriction) is not counted twice. :func:`peak_rss_bytes` is the process's
peak resident host memory.
"""

import os
import resource
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from .typing import Array
from .vector_ops import VectorOps

__all__ = [
    "available_host_memory",
    "cgroup_memory_room",
    "chunk_ranges",
    "memory_report",
    "owning_array",
    "peak_rss_bytes",
]

_SKIP = ("ceed", "comm", "backend", "qf", "qfunction")  # shared context, not per-object data
# a backend's vector operations (its reduction scratch) serve every object: shared too
_SHARED_TYPES = (VectorOps,)
# a backend's record for an object (hofem.backends.contract) counts toward that object
_OWNED = "backend_data"


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far, in bytes.

    On Linux the high-water mark of this program's own memory (``VmHWM`` of
    ``/proc/self/status``): ``ru_maxrss`` starts an exec'd program at the peak
    of the process that spawned it (the kernel carries the pre-exec image's
    peak over), so a small script started from a large one (a test worker
    holding a CUDA context) would report its parent's peak.  Elsewhere
    ``ru_maxrss``.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


def _read_int(path):
    """The integer in a one-line file, or None (missing, unreadable, ``max``)."""
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_dirs(root=Path("/sys/fs/cgroup"), proc_cgroup=Path("/proc/self/cgroup")):
    """The memory cgroup directories of this process and their ancestors, as
    ``(directory, limit file, usage file)``: v2 (``memory.max``) and v1
    (``memory/memory.limit_in_bytes``)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    found = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            base, files = root, ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            base, files = root / "memory", ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        here = base / path.lstrip("/")
        # inside a container the namespace's root is the process's cgroup: its path
        # as /proc names it may not exist under the mount, the mount's root does
        for directory in (here, *here.parents):
            found.append((directory, *files))
            if directory == base:
                break
    return found


def cgroup_memory_room(
    root: Path = Path("/sys/fs/cgroup"), proc_cgroup: Path = Path("/proc/self/cgroup")
) -> int | None:
    """Bytes this process's memory cgroups still allow (the least over them and their
    ancestors of limit minus usage), or None where no limit is set.

    Parameters
    ----------
    root, proc_cgroup : pathlib.Path
        The cgroup mount and the process's cgroup file (tests point them elsewhere).
    """
    room = None
    for directory, limit_file, usage_file in _cgroup_dirs(root, proc_cgroup):
        limit = _read_int(directory / limit_file)
        if limit is None or limit >= 1 << 60:  # "max", or v1's "unlimited"
            continue
        usage = _read_int(directory / usage_file) or 0
        room = limit - usage if room is None else min(room, limit - usage)
    return None if room is None else max(room, 0)


def _mem_available():
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (free pages elsewhere)."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def available_host_memory() -> int:
    """Bytes of host memory a new allocation may take.

    Where a memory cgroup limits this process, its limit minus its usage (the
    least over the cgroup and its ancestors, v2 ``memory.max`` or v1
    ``memory.limit_in_bytes``): that limit is what the kernel enforces, and on
    virtual machines whose RAM is added as it is used, ``MemAvailable``
    starts far below it. Elsewhere ``MemAvailable`` of ``/proc/meminfo``.

    Returns
    -------
    int
    """
    room = cgroup_memory_room()
    return _mem_available() if room is None else room


def owning_array(array: Array) -> Array:
    """The array owning the memory of ``array`` (itself when it owns it)."""
    while getattr(array, "base", None) is not None and hasattr(array.base, "nbytes"):
        array = array.base
    return array


def chunk_ranges(
    count: int, per_item: int, entries: int = 1 << 20, multiple: int = 1
) -> list[tuple[int, int]]:
    """Consecutive ranges ``(start, stop)`` covering ``0:count``, bounding temporaries.

    Parameters
    ----------
    count : int
        Items (cells, elements) to cover.
    per_item : int
        Entries (points, nodes, key columns) each item contributes.
    entries : int
        At most this many entries per range (``multiple`` items at least).
    multiple : int
        Every range but the last holds a multiple of this many items (the blocks of
        a blocked layout, ``ElemRestriction.lanes``).

    Returns
    -------
    list of (int, int)
    """
    size = max(multiple, entries // max(1, per_item) // multiple * multiple)
    return [(a, min(a + size, count)) for a in range(0, count, size)]


def _is_array(value):
    """An array instance (not an array class such as ``cupy.ndarray`` held by a backend)."""
    return not isinstance(value, type) and all(
        hasattr(value, name) for name in ("nbytes", "dtype", "shape")
    )


def memory_report(*objects: object) -> dict[str, Any]:
    """Bytes of the distinct arrays reachable from ``objects``, by holder and memory.

    Parameters
    ----------
    *objects
        Operators, spaces, restrictions, arrays, or containers (dict, list,
        tuple) of them. Attributes named ``ceed``, ``comm``, ``backend``,
        ``qf`` and ``qfunction`` are not followed (shared context), nor a backend's
        :class:`~hofem.vector_ops.VectorOps` (their scratch serves every object); only
        objects of hofem's own classes are looked into. What an object's
        ``backend_data`` holds counts toward that object's type.

    Returns
    -------
    dict
        ``host`` and ``device``: ``{holder type name: bytes}``; ``host_bytes``,
        ``device_bytes``: their totals. Arrays passed directly are held by
        ``"arrays"``.
    """
    report = {"host": defaultdict(int), "device": defaultdict(int)}
    seen_arrays, seen_objects = set(), set()
    stack = [("arrays", obj, False) for obj in objects]  # (holder, value, counts as holder's)
    while stack:
        holder, value, owned = stack.pop()
        if _is_array(value):
            base = owning_array(value)
            if id(base) not in seen_arrays:
                seen_arrays.add(id(base))
                where = "host" if isinstance(base, np.ndarray) else "device"
                report[where][holder] += int(base.nbytes)
            continue
        if id(value) in seen_objects or isinstance(value, _SHARED_TYPES):
            continue
        seen_objects.add(id(value))
        if isinstance(value, dict):
            stack += [(holder, v, False) for k, v in value.items() if k not in _SKIP]
        elif isinstance(value, (list, tuple)):
            stack += [(holder, v, False) for v in value]
        elif type(value).__module__.startswith("hofem") and hasattr(value, "__dict__"):
            name = holder if owned else type(value).__name__
            items = [(k, v) for k, v in vars(value).items() if k not in _SKIP]
            stack += [(name, v, k == _OWNED) for k, v in items]
    result = {where: dict(report[where]) for where in ("host", "device")}
    result["host_bytes"] = sum(result["host"].values())
    result["device_bytes"] = sum(result["device"].values())
    return result
