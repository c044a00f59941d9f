"""Distributed-vs-serial checks, run under ``mpiexec -n N`` by ``tests/test_19_parallel.py``.

Usage: ``mpiexec -n N python tests/mpi/cases.py GROUP RESOURCE [TRANSPORT]``. Every rank
prints ``rank R: ...`` lines; the last line of a passing run is ``OK GROUP``.
Every serial oracle is computed on each rank (the problems are small).
"""

import functools
import sys

import numpy as np

import hofem as hf
from hofem import meshes
from hofem import parallel as par
from hofem.bakeoff.distributed import setup_distributed
from hofem.bakeoff.problems import accuracy, setup, solve

comm = par.world()
rank = comm.rank
TRANSPORT = sys.argv[3] if len(sys.argv) > 3 else "auto"


def owned_in_serial(space, serial):
    """Serial L-vector index of each T-vector entry of ``space`` (matched by node coordinates)."""
    own = space.numbering.num_owned
    index = {tuple(np.round(x, 9)): i for i, x in enumerate(serial.node_coordinates())}
    nodes = np.array([index[tuple(np.round(x, 9))] for x in space.local.node_coordinates()[:own]])
    comp = np.arange(space.num_comp)[:, None] * serial.num_nodes
    return (comp + nodes[None, :]).ravel()  # (num_owned_dofs,)


def global_sum(value):
    return comm.allreduce(float(value))


def check_space(ceed, space, serial):
    """Every DOF owned once; R P = I; <P x, y> = <x, Pᵀ y>; the global dot is the serial one."""
    to_serial = owned_in_serial(space, serial)
    count = comm.allreduce(np.bincount(to_serial, minlength=serial.num_dofs))
    assert np.all(count == 1), "a DOF is owned by no rank or by several"
    assert space.num_dofs == serial.num_dofs
    rng = np.random.default_rng(1 + rank)
    x_t = ceed.asarray(rng.standard_normal(space.num_owned_dofs))
    y_l = ceed.asarray(rng.standard_normal(space.local.num_dofs))
    x_l = space.prolong(x_t)
    assert np.array_equal(ceed.to_numpy(space.restrict(x_l)), ceed.to_numpy(x_t))
    own = space.numbering.num_owned  # P of the owners' global ids gives every local node's id
    ids = np.arange(space.first_dof, space.first_dof + own, dtype=np.float64)
    ids = np.tile(ids, space.num_comp)
    local_ids = ceed.to_numpy(space.prolong(ceed.asarray(ids))).reshape(space.num_comp, -1)
    assert np.array_equal(local_ids[0], space.numbering.global_ids)
    lhs = global_sum(ceed.xp.vdot(x_l, y_l))
    rhs = global_sum(ceed.xp.vdot(x_t, space.prolong_transpose(y_l)))
    assert abs(lhs - rhs) <= 1e-12 * abs(lhs), (lhs, rhs)
    shared = np.random.default_rng(7).standard_normal((2, serial.num_dofs))
    a, b = (ceed.asarray(v[to_serial]) for v in shared)
    dot = float(space.dot(a, b))
    assert abs(dot - shared[0] @ shared[1]) <= 1e-12 * np.abs(shared).sum(), dot
    return to_serial


def check_operator(ceed, space, serial, to_serial, form, geometry="auto"):
    """The distributed operator applied to the serial vector's owned entries equals serial."""
    u = np.random.default_rng(3).standard_normal(serial.num_dofs)
    y = ceed.to_numpy(getattr(par, form)(space, geometry=geometry)(ceed.asarray(u[to_serial])))
    expected = ceed.to_numpy(getattr(hf, form)(serial)(ceed.asarray(u)))[to_serial]
    error = np.sqrt(global_sum(np.sum((y - expected) ** 2)))
    norm = np.sqrt(global_sum(np.sum(expected**2)))
    assert error <= 1e-13 * norm, (form, error / norm)


def check_solve(ceed, bp, p, mesh, distributed, to_serial, jacobi=False):
    """Iteration counts agree at rtol 1e-8; CG solutions at rtol 1e-12 to 1e-10, and their
    L2 errors to 1e-4.

    Counts agree to one, or to 5% where CG needs many iterations for the size of the
    problem: BP1 at p = 2 on the 125-DOF curved tet mesh took 38 serial and 40 on three
    ranks (finite-precision CG past a quarter of the dimension).

    Deeper in the solve the sums' order alone moves the count: at rtol 1e-12
    BP1 at p = 4 runs ~260 iterations at the rounding floor (counts 261 vs 263
    seen on the CPU), and at rtol 1e-10 BP1 at p = 1 on 64 DOFs took 38 vs 40
    on the GPU (finite-precision CG past half the dimension).
    """
    precond = "jacobi" if jacobi else None
    serial = setup(bp, ceed, p, mesh)
    result = solve(serial, rtol=1e-8, preconditioner=precond)
    dist = solve(distributed, rtol=1e-8, preconditioner=precond)
    assert result["converged"] and dist["converged"]
    allowed = max(1, round(0.05 * result["iterations"]))
    assert abs(result["iterations"] - dist["iterations"]) <= allowed, (result, dist)
    assert dist["ranks"] == comm.size and dist["dofs"] == result["dofs"]
    x_serial, info_serial = hf.cg(serial.operator, serial.rhs, rtol=1e-12)
    x_dist, info_dist = hf.cg(distributed.operator, distributed.rhs, rtol=1e-12)
    assert info_serial == 0 and info_dist == 0
    # the L2 errors of the converged solutions: at rtol 1e-8 the algebraic error is still a
    # few percent of it and the sums' order moves that part; at high order the discretization
    # error falls to ~1e-11 (p = 7) and the rtol-1e-12 solve's own error, ~1e-15, is a
    # visible part of it, hence the absolute floor
    l2_serial, l2_dist = accuracy(serial, x_serial)[1], accuracy(distributed, x_dist)[1]
    assert abs(l2_dist - l2_serial) <= 1e-4 * l2_serial + 1e-13, (l2_dist, l2_serial)
    x_serial, x_dist = ceed.to_numpy(x_serial), ceed.to_numpy(x_dist)
    full_serial = np.zeros(serial.space.num_dofs)
    full_serial[serial.free if serial.free is not None else slice(None)] = x_serial
    full_dist = np.zeros(distributed.space.num_owned_dofs)
    full_dist[distributed.free if distributed.free is not None else slice(None)] = x_dist
    diff = np.sqrt(global_sum(np.sum((full_dist - full_serial[to_serial]) ** 2)))
    assert diff <= 1e-10 * np.linalg.norm(full_serial), diff / np.linalg.norm(full_serial)
    return dist["iterations"]


def meshes_under_test():
    """(name, serial mesh, local-mesh maker, orders)."""
    yield (
        "box-hex",
        meshes.box(3, distort=0.1),
        lambda: par.box_local(comm, 3, distort=0.1),
        (1, 2, 3, 4),
    )
    yield (
        "box-tet",
        meshes.box((3, 2, 2), simplex=True, order=2, distort=0.1),
        lambda: par.box_local(comm, (3, 2, 2), simplex=True, order=2, distort=0.1),
        (1, 2, 3, 4),
    )
    yield (  # uneven slabs for 2 and 3 ranks: runs of cells, not whole layers
        "box-hex-runs",
        meshes.box((1, 1, 7), order=2, distort=0.1),
        lambda: par.box_local(comm, (1, 1, 7), order=2, distort=0.1),
        (2, 3),  # p = 1 has no interior node
    )
    method = "metis" if _has_pymetis() else "rcb"
    for name in ("lshape_hex.msh", "curved_tet10.msh"):
        path = meshes.data_path(name)
        yield (
            f"{name}-{method}",
            meshes.read(path),
            lambda path=path, method=method: par.distribute_mesh(comm, path, method),
            (1, 2, 3),
        )
        method = "rcb"


def _has_pymetis():
    try:
        import pymetis  # noqa: F401
    except ImportError:
        return False
    return True


def group_equal(resource):
    ceed = hf.Ceed(resource)
    for name, mesh, make_local, orders in meshes_under_test():
        for p in orders:
            local = make_local()
            for bp in ("bp1", "bp3"):
                num_comp = 1
                space = par.ParH1Space(ceed, local, p, num_comp, transport=TRANSPORT)
                serial = hf.H1Space(ceed, mesh, p, num_comp)
                to_serial = check_space(ceed, space, serial)
                check_operator(
                    ceed, space, serial, to_serial, "mass" if bp == "bp1" else "diffusion"
                )
                dist = setup_distributed(bp, ceed, p, comm, mesh=local, transport=TRANSPORT)
                iterations = check_solve(ceed, bp, p, mesh, dist, to_serial)
            if rank == 0:
                print(f"rank 0: {name} p={p} ok ({iterations} CG iterations)", flush=True)
    # vector fields (BP4) and Jacobi, one case each
    name, mesh, make_local, _ = next(meshes_under_test())
    local = make_local()
    space = par.ParH1Space(ceed, local, 2, 3)
    to_serial = check_space(ceed, space, hf.H1Space(ceed, mesh, 2, 3))
    check_solve(
        ceed, "bp4", 2, mesh, setup_distributed("bp4", ceed, 2, comm, mesh=local), to_serial
    )
    space = par.ParH1Space(ceed, local, 3)
    to_serial = check_space(ceed, space, hf.H1Space(ceed, mesh, 3))
    dist = setup_distributed("bp3", ceed, 3, comm, mesh=local)
    check_solve(ceed, "bp3", 3, mesh, dist, to_serial, jacobi=True)
    # geometry on the fly, on a box whose blocks have interior cells: the interior and
    # boundary halves share one coordinate vector, and the operator equals serial
    mesh = meshes.box(6, distort=0.1)
    space = par.ParH1Space(ceed, par.box_local(comm, 6, distort=0.1), 2)
    serial = hf.H1Space(ceed, mesh, 2)
    to_serial = check_space(ceed, space, serial)
    op = par.diffusion(space, geometry="on_the_fly")
    halves = op.interior is not None and op.boundary is not None
    assert not halves or op.interior.fields["dx"].vector is op.boundary.fields["dx"].vector
    assert global_sum(int(halves)) > 0, "no rank has both halves: the sharing went untested"
    check_operator(ceed, space, serial, to_serial, "diffusion", "on_the_fly")


def group_errors(resource):
    """Bad input gives the same clear error on every rank."""
    ceed = hf.Ceed(resource)
    cases = {
        "more ranks than cells": lambda: par.box_local(comm, 1),
        "mesh smaller than ranks": lambda: par.distribute_mesh(comm, meshes.box(1)),
        "unreadable file": lambda: par.distribute_mesh(comm, "/nonexistent/mesh.msh"),
        "backends differ": lambda: par.ParH1Space(
            hf.Ceed("/cpu/self/ref" if rank == 0 else resource_other(resource)),
            par.box_local(comm, (2 * comm.size, 2, 2)),
            1,
        ),
    }
    for name, make in cases.items():
        try:
            make()
        except par.ParallelError as exc:
            line = f"rank {rank}: {name}: ParallelError: {exc}"
        else:
            raise AssertionError(f"{name}: no error raised")
        lines = comm.gather(line)  # printed by rank 0 alone: lines of ranks never interleave
        if rank == 0:
            print("\n".join(lines), flush=True)
    assert ceed.resource == resource


def resource_other(resource):
    return next((r for r in hf.available() if r != "/cpu/self/ref"), "/cpu/self/ref")


def group_crash(resource):
    """An exception on one rank ends every rank (no hang)."""
    with par.abort_on_error():
        if rank == comm.size - 1:
            raise RuntimeError("planted failure on the last rank")
        comm.Barrier()  # the others wait here for a rank that never arrives


def _pmg_solve(ceed, space, A_full, load):
    """PCG with hf.pmg on the free DOFs of ``space``; (full solution vector, iterations)."""
    free = space.free_dofs()
    A = hf.restrict_dofs(A_full, free)
    b = load[ceed.asarray(free)]
    x, info = hf.cg(A, b, M=hf.pmg(A), rtol=1e-10)
    assert info == 0, info.message
    full = ceed.xp.zeros(space.vector_size)
    full[ceed.asarray(free)] = x
    return ceed.to_numpy(full), info.iterations


def group_pmg(resource):
    """hf.pmg on ParOperator: the serial solution, iterations within one of serial."""
    ceed = hf.Ceed(resource)

    def f(x):
        return np.sin(3 * x[:, 0]) + x[:, 1] * x[:, 2]

    for simplex, p, n in ((False, 4, 3), (True, 2, 3)):
        serial = hf.H1Space(ceed, meshes.box(n, dim=3, simplex=simplex), p)
        x_s, it_s = _pmg_solve(ceed, serial, hf.diffusion(serial), serial.load_vector(f))
        space = par.ParH1Space(ceed, par.box_local(comm, n, dim=3, simplex=simplex), p)
        x_p, it_p = _pmg_solve(ceed, space, par.diffusion(space), space.load_vector(f))
        to_serial = owned_in_serial(space, serial)
        err = comm.allreduce(float(np.abs(x_p - x_s[to_serial]).max()), op=par_max())
        assert err <= 1e-7 * np.abs(x_s).max(), err
        assert abs(it_p - it_s) <= 1, (it_p, it_s)
        if rank == 0:
            print(f"pmg {'tet' if simplex else 'hex'} p={p}: {it_p} iterations (serial {it_s})")


def _unregistered(build):
    """``build`` whose operators are copies unknown to the forms (the Galerkin fallback)."""

    def copy(s):
        form = build(s)
        op = form.ceed.Operator(form.qf)
        for name, f in form.fields.items():
            r = hf.ELEMRESTRICTION_NONE if f.restriction is None else f.restriction
            op.set_field(name, r, hf.BASIS_NONE if f.basis is None else f.basis, f.vector)
        return op

    return copy


def group_pmg_galerkin(resource):
    """hf.pmg on a ParOperator of operators no form made (Galerkin levels, generic assembly):
    the serial solution, iterations within one of serial."""
    ceed = hf.Ceed(resource)

    def f(x):
        return np.sin(3 * x[:, 0]) + x[:, 1] * x[:, 2]

    serial = hf.H1Space(ceed, meshes.box(3, dim=3), 4)
    x_s, it_s = _pmg_solve(ceed, serial, hf.diffusion(serial), serial.load_vector(f))
    space = par.ParH1Space(ceed, par.box_local(comm, 3, dim=3), 4)
    A = par.ParOperator(space, _unregistered(hf.diffusion))
    x_p, it_p = _pmg_solve(ceed, space, A, space.load_vector(f))
    err = comm.allreduce(
        float(np.abs(x_p - x_s[owned_in_serial(space, serial)]).max()), op=par_max()
    )
    assert err <= 1e-7 * np.abs(x_s).max(), err
    assert abs(it_p - it_s) <= 1, (it_p, it_s)


def _gathered_matrices(hierarchy):
    """Rank 0's order-1 matrices of ``hierarchy``: from its coarse solver, and gathered from
    the backend's generic assembly of the coarsest level (None, None elsewhere)."""
    from hofem.parallel.multigrid import GatheredSolver

    matrices = []

    def capture(A_host, xp):  # make(A_host, xp): keeps the matrix, makes no solver
        matrices.append(A_host.tocsr())

    hierarchy.coarse_solver()(capture)
    GatheredSolver(hierarchy.operators[-1], capture)
    return matrices if matrices else (None, None)


def group_pmg_assembly(resource):
    """The distributed levels' diagonals and gathered order-1 matrix, from the forms' q-data
    per rank, equal the backend's generic assembly of the same levels."""
    from hofem.operator import SubOperator
    from hofem.parallel.multigrid import par_multigrid_hierarchy

    ceed = hf.Ceed(resource)
    cases = ((False, 4, 1, par.diffusion, True), (True, 3, 3, par.mass, False))
    for simplex, p, num_comp, form, restricted in cases:
        local = par.box_local(comm, 4, dim=3, simplex=simplex)
        space = par.ParH1Space(ceed, local, p, num_comp)
        A = form(space)
        A = hf.restrict_dofs(A, space.free_dofs()) if restricted else A
        hierarchy = par_multigrid_hierarchy(A)
        for level in hierarchy.operators:
            inner = level.op if isinstance(level, SubOperator) else level
            assert isinstance(inner, par.ParOperator), type(inner)
            generic = sum(
                ceed.asarray(ceed.to_numpy(op.linear_assemble().diagonal()))
                for op in (inner.interior, inner.boundary)
                if op is not None
            )
            generic = inner.space.exchange.prolong_transpose(generic)  # (T,)
            if restricted:
                generic = generic[level.free_dofs]
            diag = level.linear_assemble_diagonal()
            scale = comm.allreduce(
                float(np.abs(ceed.to_numpy(generic)).max(initial=0.0)), op=par_max()
            )
            err = comm.allreduce(
                float(np.abs(ceed.to_numpy(diag - generic)).max(initial=0.0)), op=par_max()
            )
            assert err <= 1e-12 * scale, (simplex, p, inner.space.order, err / scale)
        ours, generic = _gathered_matrices(hierarchy)
        if rank == 0:
            err = abs(ours - generic).max()
            assert ours.shape == generic.shape and err <= 1e-12 * abs(generic).max(), err
            print(f"pmg assembly {'tet' if simplex else 'hex'} p={p}: {ours.shape[0]} coarse DOFs")


def _count_reductions(exchange):
    """Count the exchange's all-reduces (blocking or started) in ``counter[0]``."""
    counter = [0]
    for name in ("allreduce", "allreduce_start"):
        method = getattr(exchange, name)

        def counted(values, method=method):
            counter[0] += 1
            return method(values)

        setattr(exchange, name, counted)  # an instance attribute shadows the method
    return counter


def group_variants(resource):
    """hf.cg's variants on ParOperator: the serial solution and count, ONE all-reduce an iteration.

    Standard CG sums twice an iteration (``p . Ap`` and ``r . r``), three times
    preconditioned; the variants once, plus ``||b||`` for the tolerance and one at
    iteration 0.
    """
    ceed = hf.Ceed(resource)
    mesh, local = meshes.box(4, distort=0.1), par.box_local(comm, 4, distort=0.1)
    serial, dist = setup("bp3", ceed, 3, mesh), setup_distributed("bp3", ceed, 3, comm, mesh=local)
    to_serial = owned_in_serial(dist.space, serial.space)
    free_s, free_d = ceed.to_numpy(serial.free), ceed.to_numpy(dist.free)
    counter = _count_reductions(dist.space.exchange)
    for M_s, M_d in ((None, None), (hf.jacobi(serial.operator), hf.jacobi(dist.operator))):
        x_ref, ref = hf.cg(serial.operator, serial.rhs, rtol=1e-10, M=M_s, maxiter=2000)
        full_ref = np.zeros(serial.space.num_dofs)
        full_ref[free_s] = ceed.to_numpy(x_ref)
        for variant in ("standard", "single_reduction", "pipelined"):
            counter[0] = 0
            # the host loop's reductions are counted (a GPU's device loop sums in its graph)
            x, info = hf.cg(dist.operator, dist.rhs, rtol=1e-10, M=M_d, maxiter=2000,
                            variant=variant, device_loop=False)  # fmt: skip
            assert info == 0 and abs(info.iterations - ref.iterations) <= 1, (variant, info)
            full = np.zeros(dist.space.num_owned_dofs)
            full[free_d] = ceed.to_numpy(x)
            diff = np.sqrt(global_sum(np.sum((full - full_ref[to_serial]) ** 2)))
            assert diff <= 1e-8 * np.linalg.norm(full_ref), (variant, diff)
            n = info.iterations
            if variant != "standard":  # ||b||, then one per iteration and at iteration 0
                expected = 2 + n
            elif M_d is None:  # ||b||, ||r||, r . r; p . Ap and r . r an iteration
                expected = 3 + 2 * n
            else:  # ||b||, ||r||, r . z; p . Ap, ||r||, r . z an iteration (no r . z at the last)
                expected = 2 + 3 * n
            assert counter[0] == expected, (variant, counter[0], n)
            if rank == 0:
                print(f"{variant} M={M_d is not None}: {info.iterations} iterations (serial "
                      f"{ref.iterations}), {counter[0]} all-reduces", flush=True)  # fmt: skip


def _device_loops_agree(dist, other, M, kind, p, bp):
    """``dist``'s device loop against its host loop, and against ``other``'s device loop
    (the same problem on another transport; None: no such check): the iterates after 10
    iterations to 1e-12 relative, the iteration counts at rtol 1e-8 to 3 %."""
    A, b = dist.operator, dist.rhs
    x_h, _ = hf.cg(A, b, rtol=0.0, maxiter=10, M=M, device_loop=False)
    x_d, _ = hf.cg(A, b, rtol=0.0, maxiter=10, M=M, device_loop=True)
    norm = float(global_sum(float((x_h**2).sum())))
    diff = float(global_sum(float(((x_d - x_h) ** 2).sum())))
    assert diff <= 1e-24 * norm, (kind, p, bp, diff / norm)
    M_other = None if other is None or M is None else hf.jacobi(other.operator)
    if other is not None:
        x_o, _ = hf.cg(other.operator, other.rhs, rtol=0.0, maxiter=10, M=M_other,
                       device_loop=True)  # fmt: skip
        diff = float(global_sum(float(((x_d - x_o) ** 2).sum())))
        assert diff <= 1e-24 * norm, (kind, p, bp, "against the other transport", diff / norm)
    _, host = hf.cg(A, b, rtol=1e-8, M=M, device_loop=False)
    counts = [host.iterations]
    if other is not None:
        _, info = hf.cg(other.operator, other.rhs, rtol=1e-8, M=M_other, device_loop=True)
        counts.append(info.iterations)
    slack = max(1, round(0.03 * host.iterations))
    for check_every in (1, 7, None):
        _, info = hf.cg(A, b, rtol=1e-8, M=M, device_loop=True, check_every=check_every)
        assert info == 0 and all(abs(info.iterations - n) <= slack for n in counts), (
            kind, p, bp, info, counts)  # fmt: skip
    return host.iterations, info.iterations


def group_device(resource):
    """The device CG loop on ParOperator (GPU; TRANSPORT "nccl" or "ipc", "auto": "nccl")
    against the host loop, and with "ipc" also against the "nccl" device loop.

    Box hexes and tets, BP1 and BP3 (Dirichlet DOFs), and the vector BP2 and BP4 (three
    components: the T-vector is not the L-vector's head) on hexes and on tets at p = 2,
    with and without Jacobi:
    after 10 iterations (far from convergence, where the two orders of summation
    have not yet been amplified: BP1 on tets converges in 28) the iterates agree
    to 1e-12 relative; solved to rtol 1e-8,
    checked every iteration, every 7 and automatically, the counts agree to one,
    or to 3 % in the long solves (the two loops add the same inner products in
    different orders, and the fused kernels' atomic additions in no fixed order:
    over ~90 iterations of BP1 hex p = 2 on 2 ranks the stopping iteration moved
    by two on an H200).
    """
    ceed = hf.Ceed(resource)
    if not resource.startswith("/gpu"):
        raise SystemExit("the device group needs a CUDA backend")
    transport = "nccl" if TRANSPORT == "auto" else TRANSPORT
    if transport not in ("nccl", "ipc"):
        raise SystemExit(f"the device group runs nccl or ipc, not {transport!r}")
    for kind, cells, orders in (("hex", (4, 3, 3), (2, 4)), ("tet", (3, 2, 2), (2, 3))):
        local = par.box_local(comm, cells, simplex=kind == "tet", distort=0.1)
        for p in orders:
            for bp in ("bp1", "bp3", "bp2", "bp4") if p == 2 else ("bp1", "bp3"):
                dist = setup_distributed(bp, ceed, p, comm, mesh=local, transport=transport)
                other = None
                if transport == "ipc":
                    channel = type(dist.space.exchange._forward_l).__name__
                    assert channel == "IpcChannel", channel
                    other = setup_distributed(bp, ceed, p, comm, mesh=local, transport="nccl")
                for M in (None, hf.jacobi(dist.operator)):
                    host, device = _device_loops_agree(dist, other, M, kind, p, bp)
                if rank == 0:
                    print(f"device {transport} {kind} {bp} p={p}: {host} iterations (host "
                          f"loop), {device} (device loop)", flush=True)  # fmt: skip


def play_segments(sends, recvs, send_from, recv_into):
    """Move ``(rank, offset, count)`` segments between host arrays over MPI, in list order
    per rank (MPI's non-overtaking order, as NCCL matches them)."""
    from mpi4py import MPI

    requests = [comm.Irecv(recv_into[a : a + n], source=q, tag=5) for q, a, n in recvs]
    requests += [comm.Isend(send_from[a : a + n].copy(), dest=q, tag=5) for q, a, n in sends]
    MPI.Request.Waitall(requests)


def _l_path_cases(ceed):
    """``(exchange, numbering, num_comp)`` of the L-path groups: one and three components,
    box blocks and a partitioned tet box."""
    locals_ = (
        par.box_local(comm, (4, 3, 3)),
        par.distribute_mesh(comm, meshes.box(3, simplex=True)),
    )
    for local in locals_:
        for num_comp in (1, 3):
            space = par.ParH1Space(ceed, local, 2, num_comp, transport="mpi")
            yield space.exchange, space.numbering, num_comp


def _check_plays(ceed, exchange, numbering, num_comp, seed, forward, backward):
    """``forward(send_values, x_l)`` writes the ghosts of ``P x`` into ``x_l`` and
    ``backward(y_l, received)`` receives what ``Pᵀ`` sends back to the owners: both as
    :meth:`Exchange.prolong` and :meth:`Exchange.prolong_transpose` give them."""
    send_l = par.exchange.l_path_segments(numbering, num_comp)[0]
    own, nodes, nc = numbering.num_owned, numbering.num_nodes, num_comp
    owned = (np.arange(nc)[:, None] * nodes + np.arange(own)).ravel()  # (t_size,)
    rng = np.random.default_rng(seed)
    x_t = rng.standard_normal(nc * own)
    x_l = np.zeros(nc * nodes)
    x_l[owned] = x_t
    forward(x_l[send_l], x_l)
    assert np.array_equal(x_l, ceed.to_numpy(exchange.prolong(ceed.asarray(x_t))))
    y_l = rng.standard_normal(nc * nodes)
    received = np.zeros(len(send_l))
    backward(y_l, received)
    y = y_l.copy()
    np.add.at(y, send_l, received)
    expected = ceed.to_numpy(exchange.prolong_transpose(ceed.asarray(y_l)))
    assert np.allclose(y[owned], expected, rtol=1e-14, atol=1e-14)


def group_l_path(resource):
    """The in-place L-vector exchange of the device CG (``l_path_segments``), played over
    MPI on host arrays: ``P`` and ``Pᵀ`` as :meth:`Exchange.prolong` and
    :meth:`Exchange.prolong_transpose` give them, one and three components, box blocks and
    a partitioned tet box."""
    ceed = hf.Ceed(resource)
    for exchange, numbering, nc in _l_path_cases(ceed):
        _, buffers, ghosts = par.exchange.l_path_segments(numbering, nc)
        forward = functools.partial(play_segments, buffers, ghosts)
        backward = functools.partial(play_segments, ghosts, buffers)
        _check_plays(ceed, exchange, numbering, nc, 3 + rank, forward, backward)
    if rank == 0:
        print("rank 0: l_path ok", flush=True)


def _play_plan(sends, recvs, send_from, recv_into, tag):
    """Move segments as :class:`hofem.parallel.ipc.IpcChannel` plans them, on host arrays:
    each receiver tells its sources its segments, each sender pairs its own with them
    (``pair_copies``) and sends ``(receiver's offset, values)``, which the receiver
    writes where the sender said."""
    from hofem.parallel.ipc import neighbour_swap, pair_copies, segments_by_rank

    mine, theirs = segments_by_rank(recvs), sorted(segments_by_rank(sends))
    remote = neighbour_swap(comm, mine, theirs, tag)
    writes = {}
    for q, a, b, n in pair_copies(sends, remote, rank):
        writes.setdefault(q, []).append((b, send_from[a : a + n].copy()))
    for pieces in neighbour_swap(comm, writes, sorted(mine), tag + 1).values():
        for b, values in pieces:
            recv_into[b : b + values.size] = values


def group_ipc_plan(resource):
    """The "ipc" transport's L-vector messages (``ipc_l_path_segments``, paired by
    ``IpcChannel``'s rules), played over MPI on host arrays: ``P`` and ``Pᵀ`` as
    :meth:`Exchange.prolong` and :meth:`Exchange.prolong_transpose` give them, one and
    three components (staged ghosts), box blocks and a partitioned tet box."""
    from hofem.parallel.exchange import ipc_l_path_segments

    ceed = hf.Ceed(resource)
    for exchange, numbering, nc in _l_path_cases(ceed):
        sends, recvs, back_sends, back_recvs, staged = ipc_l_path_segments(numbering, nc)
        assert staged == (nc > 1)
        ghost_l = ceed.to_numpy(exchange._ghost_l)

        def forward(values, x_l, sends=sends, recvs=recvs, staged=staged, ghost_l=ghost_l):
            if staged:  # the ghosts in the T-vector channel's order, then put in place
                stage = np.zeros(ghost_l.size)
                _play_plan(sends, recvs, values, stage, tag=7)
                x_l[ghost_l] = stage
            else:
                _play_plan(sends, recvs, values, x_l, tag=7)

        backward = functools.partial(_play_plan, back_sends, back_recvs, tag=9)
        _check_plays(ceed, exchange, numbering, nc, 5 + rank, forward, backward)
    if rank == 0:
        print("rank 0: ipc_plan ok", flush=True)


def _owned_view(exchange, x_l):
    """The T-vector entries of the L-vector ``x_l``, ``(num_comp, num_owned)`` (a view)."""
    return x_l.reshape(exchange.num_comp, exchange.num_nodes)[:, : exchange.num_owned]


def _ipc_graph_rounds(exchange, x_l, x_t, replays=5):
    """Rounds of ``x_t *= 2``, ``x_l = P x_t`` over "ipc" and an all-reduce, replayed from
    a CUDA graph: ``x_l`` is then ``P`` of the last ``x_t``."""
    import cupy

    a = x_t.reshape(exchange.num_comp, -1)  # (num_comp, num_owned)
    scalar = cupy.ones(1)

    # allocation-free, for the graph; the ghosts of x_l are not touched here: a neighbour
    # may write the next round's as soon as the all-reduce let it, and without the halo
    # they would keep the previous round's values, half the right ones
    def round_():
        cupy.multiply(a, 2.0, out=a)
        cupy.copyto(_owned_view(exchange, x_l), a)
        exchange.start_prolong_l(x_l)
        exchange.finish_prolong_l()
        exchange.allreduce_inplace(scalar)  # what separates two rounds in the CG

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        round_()  # outside the capture (a new receive array's IPC handle is exchanged)
        stream.begin_capture()
        round_()
        graph = stream.end_capture()
        for _ in range(replays):
            graph.launch(stream)
        stream.synchronize()
    assert cupy.array_equal(x_l, exchange.prolong(x_t)), "P replayed from a graph"
    assert float(scalar[0]) == comm.size ** (replays + 1), float(scalar[0])


def group_ipc_channel(resource):
    """The "ipc" L-vector exchange alone (GPU, one GPU per rank, one node): ``P`` and
    ``Pᵀ`` round after round against the NCCL T-vector path, then ``P`` replayed from a
    CUDA graph with an all-reduce between rounds, one and three components."""
    import cupy

    ceed = hf.Ceed(resource)
    local = par.box_local(comm, (4, 3, 3))
    for num_comp in (1, 3):
        exchange = par.ParH1Space(ceed, local, 2, num_comp, transport="ipc").exchange
        rng = cupy.random.default_rng(11 + rank)
        x_l = cupy.zeros(exchange.l_size)
        for _ in range(3):  # P and Pᵀ; the host checks between rounds synchronize the ranks
            x_t = rng.standard_normal(exchange.t_size)
            _owned_view(exchange, x_l)[...] = x_t.reshape(num_comp, -1)
            exchange.start_prolong_l(x_l)
            exchange.finish_prolong_l()
            assert cupy.array_equal(x_l, exchange.prolong(x_t)), "P over ipc"
            y_l = rng.standard_normal(exchange.l_size)
            exchange.start_transpose_l(y_l)
            y = y_l.copy()
            for index, values in exchange.finish_transpose_l():
                y[index] += values
            expected = exchange.prolong_transpose(y_l).reshape(num_comp, -1)
            assert cupy.allclose(_owned_view(exchange, y), expected, rtol=1e-14, atol=1e-14)
            global_sum(0.0)
        _ipc_graph_rounds(exchange, x_l, rng.standard_normal(exchange.t_size))
    if rank == 0:
        print("rank 0: ipc_channel ok", flush=True)


def par_max():
    from mpi4py import MPI

    return MPI.MAX


GROUPS = {
    "equal": group_equal,
    "errors": group_errors,
    "crash": group_crash,
    "pmg": group_pmg,
    "pmg_galerkin": group_pmg_galerkin,
    "pmg_assembly": group_pmg_assembly,
    "variants": group_variants,
    "device": group_device,
    "l_path": group_l_path,
    "ipc_plan": group_ipc_plan,
    "ipc_channel": group_ipc_channel,
}

if __name__ == "__main__":
    group, resource = sys.argv[1], sys.argv[2]
    with par.abort_on_error():
        if resource.startswith("/gpu"):
            par.bind_device(comm)
        GROUPS[group](resource)
    comm.Barrier()
    if rank == 0:
        print(f"OK {group}", flush=True)
