"""How many threads ``/cpu/self/numba`` runs per process.

Numba starts as many threads as the process may use (its affinity set). Under MPI
every rank of a node would then start one thread per core of the node, and two
ranks on two cores would run four threads on two cores. The default here gives
each rank its share: the cores of its affinity set divided by the ranks on its
node, which the MPI launcher names in the environment (MPICH and Intel MPI's
``MPI_LOCALNRANKS``, Open MPI's ``OMPI_COMM_WORLD_LOCAL_SIZE``, MVAPICH's
``MV2_COMM_WORLD_LOCAL_SIZE``, PMIx's ``PMIX_LOCAL_SIZE``). An explicit
``NUMBA_NUM_THREADS`` always wins. A launcher that binds each rank to its own
cores already gives each rank its share as its affinity set: set
``NUMBA_NUM_THREADS`` there.
"""

import os
from collections.abc import Mapping

__all__ = ["LOCAL_SIZE_VARIABLES", "configure_threads", "default_num_threads", "local_rank_count"]

# node-local rank counts set by MPI launchers, first found wins
LOCAL_SIZE_VARIABLES = (
    "MPI_LOCALNRANKS",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MV2_COMM_WORLD_LOCAL_SIZE",
    "PMIX_LOCAL_SIZE",
)


def local_rank_count(environ: Mapping[str, str]) -> int:
    """Ranks on this node, from the launcher's environment; 1 outside MPI.

    Parameters
    ----------
    environ : mapping of str to str
        E.g. ``os.environ``. The first of :data:`LOCAL_SIZE_VARIABLES` holding a
        positive integer counts; malformed values are skipped.
    """
    for name in LOCAL_SIZE_VARIABLES:
        value = environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def default_num_threads(available: int, local_ranks: int) -> int:
    """Threads of one rank: its cores shared among the ranks of its node, at least one.

    Parameters
    ----------
    available : int
        Cores this process may run on (``len(os.sched_getaffinity(0))``).
    local_ranks : int
        Ranks on this node (:func:`local_rank_count`).

    Returns
    -------
    int
        ``max(1, available // local_ranks)``.
    """
    if available < 1 or local_ranks < 1:
        raise ValueError(
            f"available cores and local ranks must be positive, got {available} and {local_ranks}"
        )
    return max(1, available // local_ranks)


def _available_cores() -> int:
    """Cores of this process's affinity set (all cores where the OS has no affinity call)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


_configured = False


def configure_threads() -> int:
    """Once per process: idle OpenMP threads sleep, and the thread count is the default.

    ``OMP_WAIT_POLICY`` becomes ``PASSIVE`` unless set: by default GNU OpenMP's idle
    threads spin at each barrier, and on a machine where another process wants a core
    a spinning thread takes the time slice of the thread the barrier waits for (measured
    in bakeoff/JOURNAL.md: the solve ran at 1-10% of its one-thread speed). It takes
    effect only if nothing has loaded OpenMP yet, so this runs before Numba starts its
    threads. The count becomes :func:`default_num_threads` unless ``NUMBA_NUM_THREADS``
    is set or the program already changed it (``numba.set_num_threads``); Numba cannot
    go above the threads it started with, so it is capped there.

    Returns
    -------
    int
        Numba's thread count now.
    """
    global _configured
    import numba

    if not _configured:
        _configured = True
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        started = numba.config.NUMBA_NUM_THREADS
        if "NUMBA_NUM_THREADS" not in os.environ and numba.get_num_threads() == started:
            threads = default_num_threads(_available_cores(), local_rank_count(os.environ))
            numba.set_num_threads(min(threads, started))
    return numba.get_num_threads()
