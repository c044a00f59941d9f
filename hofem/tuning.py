"""The kernels' tuning tables: data files with provenance, read and checked once.

Every per-shape choice that was measured rather than derived (threads per block,
register budgets, the shapes where a kernel layout runs, the backends' machine
balance) lives in a JSON file of ``hofem/data/tuning/`` with the device, date and
command that measured it; the code that uses a table keeps only why it exists.

========================  ==========================================================
file                      read by
========================  ==========================================================
``geometry.json``         :mod:`hofem.geometry` (:func:`geometry`)
``cuda_fused.json``       ``hofem.backends.cuda.operator_fuse`` (:func:`fused`)
``cuda_warp.json``        ``hofem.backends.cuda.operator_warp`` (:func:`warp`)
``cuda_simplex.json``     ``hofem.backends.cuda.operator_simplex`` (:func:`simplex`)
========================  ==========================================================

A file is ``{"format": 1, "about": str, "tables": {name: table}}``; each table has
``meaning`` (str), ``measured`` (a list of ``{"device", "date", "command"}``, each a
non-empty string, with optional ``results`` and ``covers``) and one payload: ``value``
(a positive integer), ``shapes`` (a list of ``[dim, P_1d, Q_1d]``), ``entries`` (a list
of ``{"shape": [dim, P_1d, Q_1d], "value": int}``) or ``by_resource`` (see
:func:`geometry`).  The GEMM batch table of ``/gpu/cuda/batched`` is regenerated per
machine by a tool and may be replaced at run time, so ``hofem.backends.cuda.gemm``
reads it itself.

This module imports nothing of hofem: :mod:`hofem.geometry`, on the ground floor,
reads it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

__all__ = [
    "DATA_DIR",
    "FORMAT",
    "WARP_KINDS",
    "FusedTuning",
    "GeometryTuning",
    "Measurement",
    "Shape",
    "SimplexTuning",
    "TuningFileError",
    "WarpTuning",
    "fused",
    "geometry",
    "load",
    "provenance",
    "simplex",
    "warp",
    "warp_blocks",
]

DATA_DIR = Path(__file__).parent / "data" / "tuning"
FORMAT = 1
Shape = tuple[int, int, int]  # (dim, P_1d, Q_1d)
# the kinds of one-warp-per-element kernels, each with its table of blocks per SM
WARP_KINDS = ("interp", "cell", "vector", "grad", "grad_stored")
WARP_KINDS += ("vector_grad", "vector_grad_stored", "grad_in_turn", "grad_in_turn_stored")

# each file's tables and the payload key each one holds
_SCHEMA = {
    "geometry.json": {
        "machine_balance": "by_resource",
        "on_the_fly_shapes": "by_resource",
        "on_the_fly_simplex_shapes": "by_resource",
        "element_matrix_savings": "by_resource",
    },
    "cuda_fused.json": {
        "threads": "value",
        "threads_by_shape": "entries",
        "register_cap": "value",
        "register_cap_from": "value",
        "register_cap_max_t_1d": "value",
        "register_caps_by_shape": "entries",
        "register_caps_grad_by_shape": "entries",
        "constant_bytes": "value",
        "tensor_core_shapes": "shapes",
        "blocked_shapes": "shapes",
        "blocked_grad_shapes": "shapes",
        "tile_shapes": "shapes",
        "tile_cell_shapes": "shapes",
        "tile_grad_shapes": "shapes",
        "tile_grad_cell_shapes": "shapes",
        "component_split_shapes": "shapes",
        "component_split_grad_shapes": "shapes",
        "component_split_grad_on_the_fly_shapes": "shapes",
    },
    "cuda_simplex.json": {
        "tensor_cores": "shapes",
        "tensor_core_threads": "entries",
        "tensor_core_tiles": "entries",
        "tensor_core_elems": "entries",
        "batched_stored": "shapes",
        "batched_on_the_fly": "shapes",
        "batched_over_tensor_cores_on_the_fly": "shapes",
    },
    "cuda_warp.json": {
        **{f"blocks_{kind}": "entries" for kind in WARP_KINDS},
        "register_operand_shapes": "shapes",
        "prefetch_size": "value",
        "warps_per_block": "value",
    },
}
_MEASUREMENT_KEYS = {"device", "date", "command"}
_MEASUREMENT_OPTIONAL = {"results", "covers"}


@dataclasses.dataclass(frozen=True)
class Measurement:
    """Where a table's numbers come from: the device, the date (ISO), the command run, and
    optionally the results file or journal section and which entries it covers."""

    device: str
    date: str
    command: str
    results: str = ""
    covers: str = ""


@dataclasses.dataclass(frozen=True)
class GeometryTuning:
    """``geometry.json``: ``machine_balance`` (resolved resource -> flops per byte, >= 0),
    ``on_the_fly_shapes`` (resource -> form -> tensor solution shapes ``(dim, P_1d, Q_1d)``),
    ``on_the_fly_simplex_shapes`` (the same for simplex shapes ``(dim, P, Q)``) and
    ``element_matrix_savings`` (resource -> multiply-adds per element, >= 0)."""

    machine_balance: Mapping[str, float]
    on_the_fly_shapes: Mapping[str, Mapping[str, frozenset[Shape]]]
    on_the_fly_simplex_shapes: Mapping[str, Mapping[str, frozenset[Shape]]]
    element_matrix_savings: Mapping[str, float]


@dataclasses.dataclass(frozen=True)
class FusedTuning:
    """``cuda_fused.json``: the slab kernels' threads per block (``threads``, and
    ``threads_by_shape`` where another count won), register cap rule, constant-memory
    budget in bytes, tensor-core shapes, the shapes of the register-blocked layout
    (``blocked_shapes`` for one value per point, ``blocked_grad_shapes`` with gradients),
    those of one warp per element with every contraction a GEMM (``tile_shapes``, and
    ``tile_cell_shapes`` with cell-constant inputs), those of its gradient kernel on
    collocated points (``tile_grad_shapes``, ``tile_grad_cell_shapes``),
    and those where a multi-component form runs its one-component kernel on each component
    (``component_split_shapes``; with gradients ``component_split_grad_shapes`` for stored
    q-data and ``component_split_grad_on_the_fly_shapes``)."""

    threads: int
    threads_by_shape: Mapping[Shape, int]
    register_cap: int
    register_cap_from: int
    register_cap_max_t_1d: int
    register_caps_by_shape: Mapping[Shape, int]
    register_caps_grad_by_shape: Mapping[Shape, int]
    constant_bytes: int
    tensor_core_shapes: frozenset[Shape]
    blocked_shapes: frozenset[Shape]
    blocked_grad_shapes: frozenset[Shape]
    tile_shapes: frozenset[Shape]
    tile_cell_shapes: frozenset[Shape]
    tile_grad_shapes: frozenset[Shape]
    tile_grad_cell_shapes: frozenset[Shape]
    component_split_shapes: frozenset[Shape]
    component_split_grad_shapes: frozenset[Shape]
    component_split_grad_on_the_fly_shapes: frozenset[Shape]


@dataclasses.dataclass(frozen=True)
class WarpTuning:
    """``cuda_warp.json``: blocks per SM by kind (:data:`WARP_KINDS`) and shape; the shapes
    whose operands stay in registers; the stored values per point read before the stages;
    warps per block."""

    blocks: Mapping[str, Mapping[Shape, int]]
    register_operand_shapes: frozenset[Shape]
    prefetch_size: int
    warps_per_block: int


@dataclasses.dataclass(frozen=True)
class SimplexTuning:
    """``cuda_simplex.json``: the simplex shapes ``(dim, P, Q)`` that ``/gpu/cuda/gen`` runs
    on the fp64 tensor cores, with the launches (threads, tiles, elements per block) where
    another than the default measured faster, and those it hands to the batched kernels
    (with stored q-data and with the geometry on the fly) where the tensor-core variant
    cannot run, and the tensor-core shapes that batched beat with the geometry on the fly."""

    tensor_cores: frozenset[Shape]
    tensor_core_launches: Mapping[Shape, Mapping[str, int]]
    batched_stored: frozenset[Shape]
    batched_on_the_fly: frozenset[Shape]
    batched_over_tensor_cores_on_the_fly: frozenset[Shape]


class TuningFileError(ValueError):
    """A tuning file that is missing or not of the documented form."""


def _bad(name: str, what: str) -> TuningFileError:
    return TuningFileError(
        f"tuning table {DATA_DIR / name} is malformed: {what}; restore it from the repository"
    )


def _positive_int(name: str, where: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _bad(name, f"{where} must be a positive integer, not {value!r}")
    return value


def _shape(name: str, where: str, value: object) -> Shape:
    if not isinstance(value, list) or len(value) != 3:
        raise _bad(name, f"{where} must be a list [dim, P_1d, Q_1d], not {value!r}")
    dim, P_1d, Q_1d = (_positive_int(name, f"{where}[{k}]", v) for k, v in enumerate(value))
    if dim > 3:
        raise _bad(name, f"{where} has dim {dim}; dim is 1, 2 or 3")
    return dim, P_1d, Q_1d


def _shapes(name: str, where: str, value: object) -> frozenset[Shape]:
    if not isinstance(value, list):
        raise _bad(name, f"{where} must be a list of shapes")
    shapes = [_shape(name, f"{where}[{k}]", s) for k, s in enumerate(value)]
    if len(set(shapes)) != len(shapes):
        raise _bad(name, f"{where} lists a shape twice")
    return frozenset(shapes)


def _entries(name: str, where: str, value: object) -> Mapping[Shape, int]:
    if not isinstance(value, list):
        raise _bad(name, f"{where} must be a list of {{'shape': [...], 'value': int}}")
    table = {}
    for k, entry in enumerate(value):
        if not isinstance(entry, dict) or set(entry) != {"shape", "value"}:
            raise _bad(name, f"{where}[{k}] must have exactly the keys 'shape' and 'value'")
        shape = _shape(name, f"{where}[{k}]['shape']", entry["shape"])
        if shape in table:
            raise _bad(name, f"{where} lists shape {list(shape)} twice")
        table[shape] = _positive_int(name, f"{where}[{k}]['value']", entry["value"])
    return MappingProxyType(table)


def _measurements(name: str, where: str, value: object) -> tuple[Measurement, ...]:
    if not isinstance(value, list) or not value:
        raise _bad(name, f"{where} must be a non-empty list of measurements")
    out = []
    for k, record in enumerate(value):
        keys = set(record) if isinstance(record, dict) else set()
        if not _MEASUREMENT_KEYS <= keys <= _MEASUREMENT_KEYS | _MEASUREMENT_OPTIONAL:
            raise _bad(name, f"{where}[{k}] must have 'device', 'date' and 'command'")
        if not all(isinstance(v, str) and v.strip() for v in record.values()):
            raise _bad(name, f"{where}[{k}]'s values must be non-empty strings")
        out.append(Measurement(**record))
    return tuple(out)


@functools.cache
def load(name: str) -> Mapping[str, Mapping[str, object]]:
    """The checked tables of tuning file ``name`` (one of ``hofem/data/tuning/``), read once.

    Returns
    -------
    Mapping
        Table name -> ``{"meaning": str, "measured": tuple of Measurement, payload key:
        the raw payload}``; the typed views are :func:`geometry`, :func:`fused`,
        :func:`warp`.

    Raises
    ------
    TuningFileError
        ``name`` is not a tuning file, or the file is missing or malformed; the message
        names the file.
    """
    if name not in _SCHEMA:
        raise TuningFileError(f"name must be one of {', '.join(sorted(_SCHEMA))}, got {name!r}")
    try:
        data = json.loads((DATA_DIR / name).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _bad(name, f"cannot be read as JSON ({exc})") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _bad(name, f"the top-level object must have 'format': {FORMAT}")
    tables = data.get("tables")
    expected = _SCHEMA[name]
    if not isinstance(tables, dict) or set(tables) != set(expected):
        found = sorted(tables) if isinstance(tables, dict) else tables
        raise _bad(name, f"'tables' must hold exactly {sorted(expected)}, not {found}")
    out = {}
    for table, payload in expected.items():
        entry = tables[table]
        keys = {"meaning", "measured", payload}
        if not isinstance(entry, dict) or set(entry) != keys:
            raise _bad(name, f"tables[{table!r}] must have exactly the keys {sorted(keys)}")
        if not isinstance(entry["meaning"], str) or not entry["meaning"].strip():
            raise _bad(name, f"tables[{table!r}]['meaning'] must be a non-empty string")
        measured = _measurements(name, f"tables[{table!r}]['measured']", entry["measured"])
        out[table] = MappingProxyType(entry | {"measured": measured})
    return MappingProxyType(out)


def provenance(name: str, table: str) -> tuple[Measurement, ...]:
    """The measurements behind ``table`` of tuning file ``name``."""
    return load(name)[table]["measured"]


def _payload(name: str, table: str) -> object:
    return load(name)[table][_SCHEMA[name][table]]


@functools.cache
def geometry() -> GeometryTuning:
    """The tables of ``geometry.json``, checked (balances and savings are numbers >= 0)."""
    name = "geometry.json"
    return GeometryTuning(
        machine_balance=_numbers_by_resource(name, "machine_balance"),
        on_the_fly_shapes=_shapes_by_resource(name, "on_the_fly_shapes"),
        on_the_fly_simplex_shapes=_shapes_by_resource(name, "on_the_fly_simplex_shapes"),
        element_matrix_savings=_numbers_by_resource(name, "element_matrix_savings"),
    )


def _shapes_by_resource(name: str, table: str) -> Mapping[str, Mapping[str, frozenset[Shape]]]:
    """A ``by_resource`` table of resources to forms to shapes, checked."""
    shapes = _payload(name, table)
    if not isinstance(shapes, dict) or not all(isinstance(v, dict) for v in shapes.values()):
        raise _bad(name, f"{table}'s by_resource must map resources to forms to shapes")
    return MappingProxyType({
        resource: MappingProxyType(
            {form: _shapes(name, f"{table}[{resource!r}][{form!r}]", s)
             for form, s in forms.items()}
        )
        for resource, forms in shapes.items()
    })  # fmt: skip


def _numbers_by_resource(name: str, table: str) -> Mapping[str, float]:
    """A ``by_resource`` table of numbers >= 0, checked."""
    values = _payload(name, table)
    if not isinstance(values, dict):
        raise _bad(name, f"{table}'s by_resource must map resources to numbers")
    for resource, value in values.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
            raise _bad(name, f"{table}[{resource!r}] must be a number >= 0, not {value!r}")
    return MappingProxyType({r: float(v) for r, v in values.items()})


@functools.cache
def fused() -> FusedTuning:
    """The tables of ``cuda_fused.json``, checked."""
    name = "cuda_fused.json"
    scalars = ("threads", "register_cap", "register_cap_from", "register_cap_max_t_1d")
    values = {
        key: _positive_int(name, key, _payload(name, key)) for key in (*scalars, "constant_bytes")
    }
    if values["register_cap_from"] > values["register_cap"]:
        raise _bad(name, "register_cap_from must not pass register_cap")
    entries = ("threads_by_shape", "register_caps_by_shape", "register_caps_grad_by_shape")
    return FusedTuning(
        **{key: _entries(name, key, _payload(name, key)) for key in entries},
        **_shape_tables(name),
        **values,
    )


def _shape_tables(name):
    """``{key: frozenset of shapes}`` of every table of file ``name`` whose schema kind is
    ``shapes``, checked."""
    keys = [key for key, kind in _SCHEMA[name].items() if kind == "shapes"]
    return {key: _shapes(name, key, _payload(name, key)) for key in keys}


@functools.cache
def simplex() -> SimplexTuning:
    """The tables of ``cuda_simplex.json``, checked."""
    name = "cuda_simplex.json"
    tables = _shape_tables(name)
    if not tables["batched_over_tensor_cores_on_the_fly"] <= tables["tensor_cores"]:
        raise _bad(name, "batched_over_tensor_cores_on_the_fly must list shapes of tensor_cores")
    launches = {}  # shape -> {"threads": n, ...}: simplex_launch's override keywords
    for field in ("threads", "tiles", "elems"):
        key = f"tensor_core_{field}"
        for shape, value in _entries(name, key, _payload(name, key)).items():
            if shape not in tables["tensor_cores"]:
                raise _bad(name, f"{key} lists {list(shape)}, which tensor_cores does not")
            launches.setdefault(shape, {})[field] = value
    launches = {shape: MappingProxyType(v) for shape, v in launches.items()}
    return SimplexTuning(tensor_core_launches=MappingProxyType(launches), **tables)


@functools.cache
def warp() -> WarpTuning:
    """The tables of ``cuda_warp.json``, checked."""
    name = "cuda_warp.json"
    blocks = {
        kind: _entries(name, f"blocks_{kind}", _payload(name, f"blocks_{kind}"))
        for kind in WARP_KINDS
    }
    registers = _shapes(name, "register_operand_shapes", _payload(name, "register_operand_shapes"))
    scalar = set(blocks["interp"]) | set(blocks["cell"])
    if not registers <= scalar:
        raise _bad(name, "register_operand_shapes must be shapes of blocks_interp or blocks_cell")
    return WarpTuning(
        blocks=MappingProxyType(blocks),
        register_operand_shapes=registers,
        prefetch_size=_positive_int(name, "prefetch_size", _payload(name, "prefetch_size")),
        warps_per_block=_positive_int(name, "warps_per_block", _payload(name, "warps_per_block")),
    )


def warp_blocks(kind: str, shape: Shape) -> int | None:
    """Blocks per SM measured for the one-warp-per-element kernel of ``kind`` (one of
    :data:`WARP_KINDS`) at ``shape`` ``(dim, P_1d, Q_1d)``, or None where that kernel did
    not measure faster than the slab (it is not used there)."""
    if kind not in WARP_KINDS:
        raise ValueError(f"kind must be one of {', '.join(WARP_KINDS)}, got {kind!r}")
    return warp().blocks[kind].get(tuple(shape))
