"""
Distributed runs: the same solve on four MPI ranks
==================================================

Poisson's equation on the unit square, solved on four MPI ranks with
:mod:`hofem.parallel`, then checked against the same solve in one process.
Each rank builds its own block of the mesh, numbers its DOFs consistently
with its neighbours, and applies ``Pᵀ A_local P`` with the halo exchange
overlapped with its interior cells; :func:`hofem.cg` runs unchanged.

A tutorial page runs in one process, so it writes the distributed program to a
file and starts it with ``mpiexec`` (from ``pip install "hofem[mpi]"``), exactly
as a user would from a shell. See :doc:`/parallel` for the design and the
measured scaling.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import hofem as hf
from hofem import meshes

# %%
# The distributed program
# -----------------------
# Every rank runs this. ``box_local`` gives the rank its block of the 16 x 16
# grid; ``ParH1Space`` numbers the order-3 DOFs across ranks (owned DOFs
# first, ghosts after); ``par.diffusion`` is the distributed stiffness
# operator. Rank 0 gathers the owned node coordinates, values and owner ranks
# for the picture (a gather for plotting only: the solve never gathers).

program = textwrap.dedent(
    """
    import sys
    import numpy as np
    import hofem as hf
    from hofem import parallel as par

    comm = par.world()
    ceed = hf.Ceed("/cpu/self/ref")
    space = par.ParH1Space(ceed, par.box_local(comm, 16, dim=2), 3)
    exact = lambda x: np.sin(np.pi * x[:, 0]) * np.sin(np.pi * x[:, 1])
    free = space.free_dofs()
    A = hf.restrict_dofs(par.diffusion(space), free)
    b = space.load_vector(lambda x: 2 * np.pi**2 * exact(x))[free]
    x, info = hf.cg(A, b, rtol=1e-10)
    assert info == 0, info.message
    u = np.zeros(space.num_owned_dofs)
    u[free] = x
    error = space.errors(u, exact)
    own = space.numbering.num_owned
    parts = comm.gather((space.local.node_coordinates()[:own], u, space.balance()))
    if comm.rank == 0:
        xy = np.vstack([p[0] for p in parts])
        values = np.concatenate([p[1] for p in parts])
        owner = np.concatenate([np.full(len(p[1]), r) for r, p in enumerate(parts)])
        np.savez(
            sys.argv[1], xy=xy, u=values, owner=owner, iterations=info.iterations, error=error
        )
        print(f"{comm.size} ranks, {space.num_dofs} DOFs, owned per rank {parts[0][2]['dofs']}")
        print(f"CG: {info.iterations} iterations, L2 error {error:.3e}")
    """
)

# %%
# Run it on four ranks
# --------------------
# ``mpiexec`` is looked up next to this Python first (mpich's wheel installs it
# there), then on the ``PATH``.

bindir = Path(sys.executable).parent
mpiexec = shutil.which("mpiexec", path=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
work = Path(tempfile.mkdtemp())
(work / "poisson.py").write_text(program)
run = subprocess.run(
    [mpiexec, "-n", "4", sys.executable, str(work / "poisson.py"), str(work / "result.npz")],
    capture_output=True,
    text=True,
    timeout=300,
    env={**os.environ, "OMP_NUM_THREADS": "1"},
)
print(run.stdout)
assert run.returncode == 0, run.stderr
result = np.load(work / "result.npz")

# %%
# The same problem in one process
# -------------------------------
# The serial solve on the whole mesh gives the same iteration count and the
# same error: the distributed CG is the same algorithm, its sums merely taken
# in another order.

ceed = hf.Ceed("/cpu/self/ref")
space = hf.H1Space(ceed, meshes.box(16, dim=2), 3)
free = space.free_dofs()
exact = lambda x: np.sin(np.pi * x[:, 0]) * np.sin(np.pi * x[:, 1])  # noqa: E731
b = space.load_vector(lambda x: 2 * np.pi**2 * exact(x))[free]
x, info = hf.cg(hf.restrict_dofs(hf.diffusion(space), free), b, rtol=1e-10)
u = np.zeros(space.num_dofs)
u[free] = x
error = space.errors(u, exact)
print(f"1 process: CG {info.iterations} iterations, L2 error {error:.3e}")
assert abs(info.iterations - int(result["iterations"])) <= 1
assert abs(error - float(result["error"])) <= 1e-6 * error

# %%
# Who owns what
# -------------
# Each node is drawn in the colour of the rank that owns it (left): the four
# blocks of the grid, with the shared nodes on the block boundaries given to
# one of their ranks by a hash of the node, which keeps the counts balanced.
# On the right, the solution assembled from the four ranks' T-vectors.

fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9, 4.2))
ax0.scatter(*result["xy"].T, c=result["owner"], s=4, cmap="tab10", vmin=0, vmax=9)
ax0.set_title("owner rank of each node")
tri = ax1.tricontourf(*result["xy"].T, result["u"], levels=20, cmap="viridis")
fig.colorbar(tri, ax=ax1)
ax1.set_title("solution, gathered from 4 ranks")
for ax in (ax0, ax1):
    ax.set_aspect("equal")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
fig.tight_layout()
