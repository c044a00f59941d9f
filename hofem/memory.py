"""Memory accounting: the arrays that operators, spaces and vectors hold, and the process peak.

:func:`memory_report` walks hofem objects (operators, spaces, restrictions,
bases, meshes, numberings, the distributed exchange) and sums the distinct
arrays it reaches, by the type of the object holding them and by where they
live (host NumPy or device CuPy memory). Views count their whole base array
once, so an array shared by several objects (the offsets of a space and of its
restriction) is not counted twice. :func:`peak_rss_bytes` is the process's
peak resident host memory.
"""

import resource
import sys
from collections import defaultdict

import numpy as np

__all__ = ["chunk_ranges", "memory_report", "owning_array", "peak_rss_bytes"]

_SKIP = ("ceed", "comm", "backend", "qf", "qfunction")  # shared context, not per-object data
# a backend's record for an object (hofem.backends.contract) counts toward that object
_OWNED = "backend_data"


def peak_rss_bytes():
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


def owning_array(array):
    """The array owning the memory of ``array`` (itself when it owns it)."""
    while getattr(array, "base", None) is not None and hasattr(array.base, "nbytes"):
        array = array.base
    return array


def chunk_ranges(count, per_item, entries=1 << 20, multiple=1):
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


def memory_report(*objects):
    """Bytes of the distinct arrays reachable from ``objects``, by holder and memory.

    Parameters
    ----------
    *objects
        Operators, spaces, restrictions, arrays, or containers (dict, list,
        tuple) of them. Attributes named ``ceed``, ``comm``, ``backend``,
        ``qf`` and ``qfunction`` are not followed (shared context); only
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
        if id(value) in seen_objects:
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
