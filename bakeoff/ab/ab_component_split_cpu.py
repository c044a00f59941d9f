"""On /cpu/self/numba: a vector Poisson form's own kernel against its one-component operator
(``Operator.component_operator``) applied to each component block, alternating.

Usage::

    NUMBA_NUM_THREADS=1 python -m bakeoff.ab.ab_component_split_cpu --dofs 3e5

Prints, per case (BP4 p = 4, 7, 8 and BP6 p = 8, stored and on the fly), both MDOF/s and the
median of the rounds' ratios (vector time over split time); the outputs are checked equal.
"""

import argparse
import math
import statistics
import time

import numpy as np

import hofem as hf
from hofem import meshes

CASES = ((4, False), (7, False), (8, False), (8, True))  # (p, Gauss-Lobatto points: BP6)


def case(ceed, p, gll, geometry, dofs, rounds):
    n = max(1, math.ceil(((dofs / 3) ** (1 / 3) - 1) / p))
    space = hf.H1Space(ceed, meshes.box(n), p, num_comp=3)
    rule = {"q_extra": 0, "quad_mode": hf.GAUSS_LOBATTO} if gll else {}
    op = hf.diffusion(space, geometry=geometry, **rule)
    scalar, m = op.component_operator(), space.num_nodes
    u = np.random.default_rng(0).standard_normal(3 * m)
    v, w = np.zeros_like(u), np.zeros_like(u)

    def split():
        for c in range(3):
            scalar.apply(u[c * m : (c + 1) * m], w[c * m : (c + 1) * m])

    op.apply(u, v)
    split()
    assert np.abs(v - w).max() <= 1e-12 * np.abs(v).max()
    times = {"vector": [], "split": []}
    for _ in range(rounds):
        for name, run in (("vector", lambda: op.apply(u, v)), ("split", split)):
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    ratio = statistics.median(a / b for a, b in zip(times["vector"], times["split"], strict=True))
    rates = {k: u.size / statistics.median(t) / 1e6 for k, t in times.items()}
    print(f"{'BP6' if gll else 'BP4'} p={p} {geometry}: vector {rates['vector']:.1f} MDOF/s, "
          f"split {rates['split']:.1f}, ratio {ratio:.2f}", flush=True)  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dofs", type=float, default=3e5)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    ceed = hf.Ceed("/cpu/self/numba")
    for p, gll in CASES:
        for geometry in ("stored", "on_the_fly"):
            case(ceed, p, gll, geometry, args.dofs, args.rounds)


if __name__ == "__main__":
    main()
