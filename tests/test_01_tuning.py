"""The tuning tables (hofem/data/tuning/*.json): they load, are checked, and hold the shapes the
kernels rely on."""

import datetime
import json
import shutil

import pytest

from hofem import tuning

FILES = ("geometry.json", "cuda_fused.json", "cuda_warp.json", "cuda_simplex.json")
BP3 = [(3, p + 1, p + 2) for p in range(1, 7)]  # Gauss points, P_1d, Q_1d <= 8
BP5 = [(3, p + 1, p + 1) for p in range(2, 8)]  # Gauss-Lobatto points


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """A copy of the tuning files that a test may break; the caches start and end empty."""
    for name in FILES:
        shutil.copy(tuning.DATA_DIR / name, tmp_path / name)
    monkeypatch.setattr(tuning, "DATA_DIR", tmp_path)
    caches = (tuning.load, tuning.geometry, tuning.fused, tuning.warp, tuning.simplex)
    for cached in caches:
        cached.cache_clear()
    yield tmp_path
    for cached in caches:
        cached.cache_clear()


def test_every_file_loads_with_provenance():
    assert sorted(p.name for p in tuning.DATA_DIR.glob("*.json")) == sorted(FILES)
    for name in FILES:
        tables = tuning.load(name)
        assert tables
        for table in tables:
            for record in tuning.provenance(name, table):
                datetime.date.fromisoformat(record.date)  # an ISO date
                assert record.device and record.command


def test_geometry_tables():
    geometry = tuning.geometry()
    assert dict(geometry.machine_balance) == {"/cpu/self/numba": 2.0, "/gpu/cuda/gen": 0.0}
    gen = geometry.on_the_fly_shapes["/gpu/cuda/gen"]
    assert gen["diffusion"] == frozenset(BP3 + BP5) | {(3, 8, 9), (3, 9, 10), (3, 9, 9)}
    assert gen["mass"] == {(3, 6, 7), (3, 7, 8), (3, 8, 9), (3, 9, 10)}  # BP1 p = 5..8
    tets = geometry.on_the_fly_simplex_shapes["/gpu/cuda/gen"]
    assert tets["mass"] == {(3, 56, 79), (3, 84, 145)}  # BP1 p = 5, 6
    assert tets["diffusion"] == {(3, 56, 46), (3, 84, 79)}  # BP3 p = 5, 6


def test_fused_tables():
    fused = tuning.fused()
    assert (fused.threads, fused.constant_bytes) == (128, 896)
    assert dict(fused.threads_by_shape) == {(3, 3, 4): 64, (3, 6, 7): 64, (3, 7, 8): 64}
    caps = fused.register_cap, fused.register_cap_from, fused.register_cap_max_t_1d
    assert caps == (168, 104, 9)
    assert fused.tensor_core_shapes == {(3, 7, 8)}
    # the register-blocked slab: BP1 p = 7 only (its gradient kernels spill)
    assert (fused.blocked_shapes, fused.blocked_grad_shapes) == ({(3, 8, 9)}, frozenset())
    # every contraction a GEMM (BP1): p = 7 stored, p = 7 and 8 with the affine Jacobian
    assert (fused.tile_shapes, fused.tile_cell_shapes) == ({(3, 8, 9)}, {(3, 8, 9), (3, 9, 10)})
    # its gradient kernel on collocated points (BP5, BP6 p = 8), either geometry
    assert (fused.tile_grad_shapes, fused.tile_grad_cell_shapes) == ({(3, 9, 9)}, {(3, 9, 9)})
    # the slab at Q_1d = 10 (BP1, BP3 p = 8): caps in place of the rule
    assert dict(fused.register_caps_by_shape) == {(3, 9, 10): 128}
    assert dict(fused.register_caps_grad_by_shape) == {(3, 9, 10): 168}


def test_simplex_tables_name_the_tet_shapes_where_batched_won():
    table = tuning.simplex()
    orders_5_6 = {(3, 56, 46), (3, 56, 79), (3, 84, 79), (3, 84, 145)}
    collapsed_5 = (3, 56, 343)  # q_extra = 1 at p = 5, beyond the tensor-core variant
    assert table.batched_stored == orders_5_6 | {(3, 20, 125), (3, 35, 216), collapsed_5}
    assert table.batched_on_the_fly == {(3, 84, 79), collapsed_5}
    # BP3 on the collapsed rule at p = 4 with the geometry on the fly: batched beat both kernels
    assert table.batched_over_tensor_cores_on_the_fly == {(3, 35, 216)}
    # the tensor-core variant: BP1 and BP3 at p = 3..6 on the symmetric rules, the
    # collapsed rules of q_extra = 1 at p = 2, 3, 4, and the factored rules (P points) of
    # the mass on the fly at p = 3..6
    bp1 = {(3, 20, 24), (3, 35, 46), (3, 56, 79), (3, 84, 145)}
    collapsed = {(3, 10, 64), (3, 20, 125), (3, 35, 216)}
    bp3 = {(3, 20, 14), (3, 35, 24), (3, 56, 46), (3, 84, 79)}
    factored = {(3, 20, 20), (3, 35, 35), (3, 56, 56), (3, 84, 84)}
    assert table.tensor_cores == bp1 | bp3 | collapsed | factored
    assert dict(table.tensor_core_launches) == {
        (3, 20, 24): {"threads": 256},  # BP1 p = 3
        (3, 20, 14): {"threads": 256},  # BP3 p = 3
        (3, 35, 24): {"threads": 256, "tiles": 1},  # BP3 p = 4
        (3, 56, 46): {"elems": 16},  # BP3 p = 5
        (3, 56, 79): {"elems": 16},  # BP1 p = 5
        (3, 84, 145): {"tiles": 1},  # BP1 p = 6
        (3, 84, 79): {"tiles": 1},  # BP3 p = 6
        (3, 35, 216): {"elems": 16},  # BP1 p = 4, collapsed rule
        (3, 20, 20): {"elems": 64},  # BP1 p = 3 on the fly, factored rule
        (3, 35, 35): {"elems": 64},  # BP1 p = 4, factored
        (3, 56, 56): {"tiles": 1},  # BP1 p = 5, factored
        (3, 84, 84): {"tiles": 1},  # BP1 p = 6, factored
        (3, 10, 64): {"tiles": 1},  # BP3 p = 2, collapsed rule
    }


def test_warp_tables_hold_the_shapes_gen_runs_one_warp_per_element():
    warp = tuning.warp()
    assert set(warp.blocks) == set(tuning.WARP_KINDS)
    for kind, table in warp.blocks.items():
        assert all(1 <= blocks <= 8 for blocks in table.values()), kind
    assert set(warp.blocks["interp"]) == set(BP3[1:]) == set(warp.blocks["vector"])
    assert set(warp.blocks["cell"]) == set(BP3)
    assert set(warp.blocks["grad"]) == set(BP3 + BP5)
    assert set(warp.blocks["grad_stored"]) == set(BP3[1:] + BP5) - {(3, 5, 5)}
    assert warp.register_operand_shapes == {(3, 3, 4)}
    # BP4 and BP6 on the fly take their components in turn at every warp shape; gen asks the
    # component split first, so its tables must leave those shapes to this one
    assert set(warp.blocks["grad_in_turn"]) == set(BP3[1:] + BP5)
    assert not warp.blocks["grad_in_turn_stored"]
    fused = tuning.fused()
    assert not set(warp.blocks["grad_in_turn"]) & fused.component_split_grad_on_the_fly_shapes
    assert not set(warp.blocks["grad_in_turn_stored"]) & fused.component_split_grad_shapes
    assert (warp.prefetch_size, warp.warps_per_block) == (2, 4)
    assert tuning.warp_blocks("cell", (3, 2, 3)) == 8
    assert tuning.warp_blocks("interp", (3, 2, 3)) is None  # keeps the slab
    with pytest.raises(ValueError, match="kind must be one of"):
        tuning.warp_blocks("BP1", (3, 3, 4))


def _rewrite(path, edit):
    data = json.loads(path.read_text())
    edit(data["tables"])
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("name", "edit", "message"),
    [
        ("cuda_warp.json", lambda t: t["blocks_grad"]["entries"][0].update(value=0), "positive"),
        ("cuda_warp.json", lambda t: t["blocks_cell"]["entries"].append({"shape": [3, 2]}),
         "exactly the keys"),
        ("cuda_fused.json", lambda t: t["threads"].update(value="128"), "positive integer"),
        ("cuda_fused.json", lambda t: t.pop("constant_bytes"), "must hold exactly"),
        ("cuda_fused.json", lambda t: t["threads"]["measured"][0].pop("date"), "'date'"),
        ("cuda_simplex.json", lambda t: t["tensor_core_tiles"]["entries"].append(
            {"shape": [3, 4, 4], "value": 1}), "which tensor_cores does not"),
        ("cuda_simplex.json", lambda t: t["batched_over_tensor_cores_on_the_fly"]["shapes"]
         .append([3, 4, 4]), "shapes of tensor_cores"),
        ("geometry.json", lambda t: t["machine_balance"]["by_resource"].update(x=-1.0), ">= 0"),
        ("geometry.json", lambda t: t["on_the_fly_shapes"]["by_resource"]["/gpu/cuda/gen"]
         .update(mass=[[3, 6, 7], [3, 6, 7]]), "twice"),
    ],
)  # fmt: skip
def test_malformed_file_is_refused_in_one_line(data_dir, name, edit, message):
    _rewrite(data_dir / name, edit)
    reader = {
        "geometry.json": tuning.geometry,
        "cuda_fused.json": tuning.fused,
        "cuda_simplex.json": tuning.simplex,
    }
    with pytest.raises(tuning.TuningFileError, match=message) as info:
        reader.get(name, tuning.warp)()
    assert str(data_dir / name) in str(info.value) and "\n" not in str(info.value)


def test_missing_file_names_it(data_dir):
    (data_dir / "cuda_warp.json").unlink()
    with pytest.raises(tuning.TuningFileError, match=r"cuda_warp\.json"):
        tuning.warp()
