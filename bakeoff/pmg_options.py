"""Time to solution of ``hf.pmg`` under option variants, against CG, rounds alternating.

Usage::

    python bakeoff/pmg_options.py --ceed /gpu/cuda/gen --order 6 --dofs 1e7 --rounds 3 \
        --variants "" "orders=6,1" "orders=6,2,1" "degree=3" "eig_steps=5" --out F

Each variant is ``hf.pmg``'s keywords as ``name=value`` pairs separated by ``;``
(``orders`` a comma list, the others numbers; ``""`` the defaults).  BP3 on the hex box
of about ``--dofs`` DOFs (``pmg_measure.problem``), rtol 1e-8.  Every round runs CG,
then each variant (set-up, then the solve), in that order; one JSON line per run with the
iterations, set-up and solve seconds, time to solution and the set-up's split.
"""

import argparse
import time

from pmg_measure import case_arguments, problem

import hofem as hf
from hofem.bakeoff.common import emit_line


def parse_variant(text):
    """``hf.pmg`` keywords of a variant's text (see the module docstring)."""
    options = {}
    for item in filter(None, text.split(";")):
        name, _, value = item.partition("=")
        if name == "orders":
            options[name] = [int(v) for v in value.split(",")]
        else:
            options[name] = float(value) if "." in value else int(value)
    return options


def run(A, b, options):
    """``(record, M)`` of one set-up and solve (None options: CG alone)."""
    A.ceed.backend.synchronize()
    start = time.perf_counter()
    M = None if options is None else hf.pmg(A, **options)
    setup_s = time.perf_counter() - start
    start = time.perf_counter()
    _, info = hf.cg(A, b, M=M, rtol=1e-8)
    solve_s = time.perf_counter() - start
    record = dict(iterations=info.iterations, setup_s=setup_s, solve_s=solve_s,
                  time_to_solution_s=setup_s + solve_s)  # fmt: skip
    if M is not None:
        record.update(orders=M.hierarchy.orders, setup_split_s=M.hierarchy.info["setup_seconds"])
    return record


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    case_arguments(parser, "/cpu/self/numba", 1e6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=[""])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    ceed = hf.Ceed(args.ceed)
    n, prob = problem(ceed, "hex", args.order, args.dofs)
    A, b = prob.operator, prob.rhs
    variants = {text: parse_variant(text) for text in args.variants}
    hf.cg(A, b, rtol=0.0, maxiter=2)  # compile the operator
    for options in variants.values():  # compile every variant's levels and kernels
        hf.cg(A, b, M=hf.pmg(A, **options), rtol=0.0, maxiter=1)
    for k in range(args.rounds):
        for name, options in [("cg", None), *variants.items()]:
            record = run(A, b, options)
            emit_line(args.out, dict(p=args.order, n=n, dofs=A.shape[0], ceed=ceed.resource,
                                     round=k, variant=name, **record))  # fmt: skip


if __name__ == "__main__":
    main()
