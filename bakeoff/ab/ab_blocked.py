"""Side by side on /gpu/cuda/gen: the register-blocked slab (``operator_blocked``, two
columns a thread) against the slab (``operator_fuse``) at ``Q_1d = 9, 10``, for BP1 and BP3
(``--forms``: BP2 and BP4 too) at p = 7, 8, stored q-data and the geometry on the fly.

Usage (on a GPU)::

    python -m bakeoff.ab.ab_blocked
    python -m bakeoff.ab.ab_blocked --dot --rounds 9
    python -m bakeoff.ab.ab_blocked --forms diffusion --orders 8 --geometry on_the_fly

and without a GPU (nvcc on PATH), the registers, spills and shared loads of each kernel::

    python -m bakeoff.ab.ab_blocked count

Variants, each built as gen would build it (``FusedOperator``'s register-cap rule):

- ``slab``: the slab kernel gen runs today at these shapes (the reference of the ratios);
- ``blocked``: two columns a thread, two elements a block (``BLOCKED_THREADS`` = 128);
- ``blocked-e5``: five elements a block (250 threads at ``T_1d = 10``, 225 at 9);
- ``blocked-nocap``: never compiled again at the register cap (``T_1d = 9``: 168);
- ``blocked-c2400``: a constant-memory budget of 2400 bytes, ``B``, ``Bt`` and ``D`` all read
  as operands along the slowest axis (the slab's 896 keep only ``B``).

Each case runs ``--rounds`` alternating rounds, each timing every variant (5 calls by CUDA
events, after one warm-up), and prints one JSON line: the case, the device, the DOFs, and by
variant the registers, spilled bytes, GDOF/s (median over rounds) and the median of the
rounds' ratios slab time / variant time (> 1: faster than the slab).  Every variant's output
must equal the slab's to 1e-12.
"""

import argparse
import contextlib
import json
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile

import hofem as hf
from bakeoff.common import dot_args
from hofem import meshes

FORMS = ("mass", "diffusion", "vector-mass", "vector-diffusion")  # BP1, BP3, BP2, BP4
BP = dict(zip(FORMS, ("bp1", "bp3", "bp2", "bp4"), strict=True))


def variants():
    """Name -> ``(blocking, operator_fuse attributes to set while building)``."""
    no_cap = {"REGISTER_CAP_MAX_T_1D": 0}
    return {
        "slab": (1, {}),
        "blocked": (2, {}),
        "blocked-e5": (2, {"BLOCKED_THREADS": 256}),
        "blocked-nocap": (2, no_cap),
        "blocked-c2400": (2, {"CONSTANT_BYTES": 2400}),
    }


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


def build(blocking, settings, op, shape, dot):
    """The fused operator of one variant, its ``apply_dot`` kernel compiled now where
    ``dot`` (while the settings hold)."""
    from hofem.backends.cuda import operator_fuse as of
    from hofem.backends.cuda.operator_blocked import BlockedFusedOperator

    cls = BlockedFusedOperator if blocking == 2 else of.FusedOperator
    with patched(of, **settings):
        fused = cls(op, shape)
        if dot:
            fused.apply_dot(*dot_args(fused))
    return fused


def _runner(fused, u, dot):
    """``(run, out)``: ``run()`` sets ``out = A u`` with ``fused`` (its CG variant where
    ``dot``)."""
    import cupy

    out = cupy.zeros_like(u)
    args = dot_args(fused, u, out)

    def run():
        out[...] = 0.0
        fused.apply_dot(*args) if dot else fused(u, out)

    return run, out


def case(ceed, form, geometry, p, dot, rounds):
    """One JSON-ready record of the variants of ``form`` at order ``p``."""
    import cupy

    from bakeoff.ab.ab_warp import operator
    from bakeoff.common import time_events
    from hofem.backends.cuda import operator_fuse as of

    op = operator(ceed, form, geometry, p)
    shape = of.fusable_shape(op, 16)
    u = cupy.random.default_rng(0).standard_normal(op.shape[1])  # (l_size,)
    runs, info, outputs = {}, {}, {}
    for name, (blocking, settings) in variants().items():
        fused = build(blocking, settings, op, shape, dot)
        runs[name], outputs[name] = _runner(fused, u, dot)
        runs[name]()
        kernel = fused._dot_kernel if dot else fused._kernel
        info[name] = {"regs": kernel.num_regs, "local_bytes": kernel.local_size_bytes}
        info[name]["block"] = list(fused._block)
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


def ptxas_count(source, folder):
    """Registers, spilled bytes, and the PTX's shared loads (8- and 16-byte) and fp64
    multiply-adds per thread of one generated kernel, compiled by nvcc for sm_90."""
    from hofem.backends.cuda import operator_fuse as of

    path = pathlib.Path(folder) / "kernel.cu"
    path.write_text(source)
    include = f"-I{pathlib.Path(of.__file__).parent}"
    base = ["nvcc", "-arch=sm_90", "-std=c++17", include, str(path)]
    ptxas = subprocess.run(
        [*base, "-cubin", "-Xptxas", "-v", "-o", str(path.with_suffix(".cubin"))],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    subprocess.run([*base, "--ptx", "-o", str(path.with_suffix(".ptx"))], check=True)
    ptx = path.with_suffix(".ptx").read_text()
    return {
        "regs": int(re.search(r"Used (\d+) registers", ptxas).group(1)),
        "spill_bytes": int(re.search(r"(\d+) bytes spill stores", ptxas).group(1)),
        "lds_8": len(re.findall(r"ld\.shared\.f64", ptx)),
        "lds_16": len(re.findall(r"ld\.shared\.v2\.f64", ptx)),
        "fma": len(re.findall(r"fma\.rn\.f64", ptx)),
    }


def count(forms, orders, geometries, dot):
    """One JSON line per case: :func:`ptxas_count` of the slab and the blocked kernel (the
    blocked thread holds two columns: per column, halve its numbers)."""
    from hofem.backends.cuda import operator_fuse as of

    ref = hf.Ceed("/cpu/self/ref")
    for form in forms:
        for p in orders:
            for geometry in geometries:
                space = hf.H1Space(ref, meshes.box(2), p, num_comp=3 if "vector" in form else 1)
                make = hf.diffusion if form.endswith("diffusion") else hf.mass
                op = make(space, geometry=geometry)
                shape = of.fusable_shape(op, 16)
                record = {"case": BP[form], "p": p, "geometry": geometry, "dot": dot}
                for name, blocking in (("slab", 1), ("blocked", 2)):
                    source = of.kernel_source(op, shape, True, dot, blocking=blocking)
                    with tempfile.TemporaryDirectory() as folder:
                        record[name] = ptxas_count(source, folder)
                print(json.dumps(record), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", choices=("time", "count"), default="time")
    parser.add_argument("--forms", nargs="+", choices=FORMS, default=list(FORMS[:2]))
    parser.add_argument("--orders", nargs="+", type=int, default=[7, 8])
    parser.add_argument(
        "--geometry", nargs="+", choices=("stored", "on_the_fly"), default=["stored", "on_the_fly"]
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dot", action="store_true", help="the CG kernel (apply_dot)")
    args = parser.parse_args(argv)
    if args.what == "count":
        count(args.forms, args.orders, args.geometry, args.dot)
        return
    ceed = hf.Ceed("/gpu/cuda/gen")
    for form in args.forms:
        for p in args.orders:
            for geometry in args.geometry:
                record = case(ceed, form, geometry, p, args.dot, args.rounds)
                print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
