"""Side by side on /gpu/cuda/gen: the paired layout (``operator_paired``) against the slab
(``operator_fuse``) at ``Q_1d = 9, 10``, for BP1 and BP3 (``--forms``: BP2 and BP4 too) at
p = 7, 8, stored q-data and the geometry on the fly.

Usage (on a GPU)::

    python -m bakeoff.ab.ab_paired
    python -m bakeoff.ab.ab_paired --dot --rounds 9
    python -m bakeoff.ab.ab_paired --forms diffusion --orders 8 --geometry on_the_fly
    python -m bakeoff.ab.ab_paired --forms vector-mass vector-diffusion

Variants, each built as gen would build it (``FusedOperator``'s register-cap rule):

- ``slab``: the slab kernel gen runs today at these shapes (the reference of the ratios);
- ``paired``: the paired layout at ``PAIRED_THREADS`` (two elements per block at
  ``T_1d = 10``, three at 9);
- ``paired-e1``: one element per block;
- ``paired-c2048``: a constant-memory budget of 2048 bytes for the matrices the slowest
  axis reads (the slab's 896 leave ``Bt`` of ``P_1d Q_1d = 90`` entries in shared memory);
- ``paired-rN``: the paired layout compiled at ``--maxrregcount=N`` (N in ``--caps``; the
  BP3 kernels compile to 255 registers, one block per SM).

Each case runs ``--rounds`` alternating rounds, each timing every variant (5 calls by CUDA
events, after one warm-up), and prints one JSON line: the case, the device, the DOFs, and by
variant the registers, spilled bytes, GDOF/s (median over rounds) and the median of the
rounds' ratios slab time / variant time (> 1: faster than the slab).  Every variant's output
must equal the slab's to 1e-12.
"""

import argparse
import contextlib
import json
import statistics

import cupy

import hofem as hf
from bakeoff.ab.ab_warp import operator
from bakeoff.common import time_events
from hofem.backends.cuda import operator_fuse as of
from hofem.backends.cuda.operator_paired import PairedFusedOperator

FORMS = ("mass", "diffusion", "vector-mass", "vector-diffusion")  # BP1, BP3, BP2, BP4
BP = dict(zip(FORMS, ("bp1", "bp3", "bp2", "bp4"), strict=True))


@contextlib.contextmanager
def patched(module, **values):
    """``module``'s attributes set to ``values`` inside the block, restored after."""
    saved = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def variants(caps):
    """Name -> ``(operator class, fused-module attributes to set while building)``."""
    out = {"slab": (of.FusedOperator, {}), "paired": (PairedFusedOperator, {})}
    out["paired-e1"] = (PairedFusedOperator, {"PAIRED_THREADS": 128})
    # B^T in constant memory too: the z^T stage's 90 broadcast shared loads become operands
    out["paired-c2048"] = (PairedFusedOperator, {"CONSTANT_BYTES": 2048})
    for cap in caps:  # every kernel compiled again at the cap (register_cap's rule)
        rule = {"REGISTER_CAP": cap, "REGISTER_CAP_FROM": 1, "REGISTER_CAP_MAX_T_1D": 16}
        out[f"paired-r{cap}"] = (PairedFusedOperator, rule)
    return out


def build(cls, settings, op, shape, dot):
    """The fused operator of one variant, its ``apply_dot`` kernel compiled now where
    ``dot`` (while the settings hold)."""
    with patched(of, **settings):
        fused = cls(op, shape)
        if dot:
            fused.apply_dot(*dot_args(fused))
    return fused


def dot_args(fused, u=None, v=None):
    """Arguments of ``fused.apply_dot``: ``u``, ``v`` (zeros where None), the partial sums
    and a running status."""
    size = fused._op.shape[1]
    u = cupy.zeros(size) if u is None else u  # (l_size,)
    v = cupy.zeros(size) if v is None else v  # (l_size,)
    return u, v, cupy.empty(fused.num_blocks), cupy.zeros(1, dtype=cupy.int64)


def case(ceed, form, geometry, p, caps, dot, rounds):
    """One JSON-ready record of the variants of ``form`` at order ``p``."""
    op = operator(ceed, form, geometry, p)
    shape = of.fusable_shape(op, 16)
    u = cupy.random.default_rng(0).standard_normal(op.shape[1])  # (l_size,)
    runs, info, outputs = {}, {}, {}
    for name, (cls, settings) in variants(caps).items():
        fused = build(cls, settings, op, shape, dot)
        out = cupy.zeros_like(u)
        args = dot_args(fused, u, out)

        def run(fused=fused, out=out, args=args):
            out[...] = 0.0
            fused.apply_dot(*args) if dot else fused(u, out)

        run()
        kernel = fused._dot_kernel if dot else fused._kernel
        info[name] = {"regs": kernel.num_regs, "local_bytes": kernel.local_size_bytes}
        info[name]["block"] = list(fused._block)
        runs[name], outputs[name] = run, out
    for name, out in outputs.items():
        diff = float(abs(out - outputs["slab"]).max() / abs(outputs["slab"]).max())
        if diff > 1e-12:
            raise AssertionError(f"{form} p={p} {geometry} {name}: {diff:.1e} from the slab")
    times = {name: [] for name in runs}
    for _ in range(rounds):  # alternating: every variant once per round
        for name, run in runs.items():
            times[name].append(time_events(run, 5, 1))
    for name in runs:
        ratios = [s / t for s, t in zip(times["slab"], times[name], strict=True)]
        info[name]["gdofs"] = round(u.size / statistics.median(times[name]) / 1e9, 3)
        info[name]["vs_slab"] = round(statistics.median(ratios), 3)
    device = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode()
    return {
        "case": BP[form],
        "p": p,
        "geometry": geometry,
        "kernel": "apply_dot" if dot else "apply",
        "dofs": int(u.size),
        "shape": list(shape),
        "device": device,
        "rounds": rounds,
        "variants": info,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forms", nargs="+", choices=FORMS, default=list(FORMS[:2]))
    parser.add_argument("--orders", nargs="+", type=int, default=[7, 8])
    parser.add_argument(
        "--geometry", nargs="+", choices=("stored", "on_the_fly"), default=["stored", "on_the_fly"]
    )
    parser.add_argument("--caps", nargs="*", type=int, default=[128, 168])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dot", action="store_true", help="time apply_dot (the CG kernel)")
    args = parser.parse_args()
    ceed = hf.Ceed("/gpu/cuda/gen")
    for form in args.forms:
        for p in args.orders:
            for geometry in args.geometry:
                record = case(ceed, form, geometry, p, args.caps, args.dot, args.rounds)
                print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
