"""Packaging: every sub-package importable from an editable and a regular install."""

import functools
import inspect
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import hofem

ROOT = Path(__file__).resolve().parents[1]
SUBPACKAGES = ["hofem.qfunctions", "hofem.meshes", "hofem.bakeoff", "hofem.backends"]


def test_subpackages_come_from_one_hofem():
    """Every sub-package is imported from the directory ``hofem`` itself came from.

    True for an editable install (the source tree) and for a wheel (site-packages)
    alike; a mix means one install mode is shadowed by another.
    """
    import importlib

    home = Path(hofem.__file__).parent
    for name in SUBPACKAGES:
        module = importlib.import_module(name)
        assert Path(module.__file__).parent == home / name.split(".")[1], name


LAB_STEMS = ("anchor_", "compare", "tune_", "ab_", "benchmark_cpu", "benchmark_gpu")
LAB_SUFFIXES = (".jsonl", ".png", ".svg", ".txt", ".md")


def lab_files(names):
    """The names (paths) among ``names`` that belong to the laboratory, not the library."""
    return [
        name
        for name in names
        if Path(name).name.startswith(LAB_STEMS) or Path(name).suffix in LAB_SUFFIXES
    ]


def test_the_package_holds_no_laboratory():
    """Anchors, comparisons, tuning sweeps, A/B scripts and results files live in the
    repository's ``bakeoff/``, outside the package (and so outside the wheel)."""
    home = Path(hofem.__file__).parent
    files = [f for f in home.rglob("*") if f.is_file() and "__pycache__" not in f.parts]
    names = [str(f.relative_to(home)) for f in files]
    assert "bakeoff/sweep.py" in names  # what users run stays
    assert not lab_files(names)


def test_import_does_not_pull_optional_extras():
    code = (
        "import sys, hofem; bad = [m for m in ('numba', 'cupy', 'meshio', 'mpi4py', "
        "'matplotlib', 'hofem.qfunctions') if m in sys.modules]; print(bad); "
        "sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# The public API whose functions and methods carry type annotations (hofem.parallel
# imports mpi4py, and with it MPI, on import: its annotations are not walked here).
ANNOTATED_MODULES = [
    "hofem",
    "hofem.meshes",
    "hofem.polynomials",
    "hofem.quadrature",
    "hofem.vector_ops",
]
# Names of hofem.multigrid, whose API is annotated by its own rewrite.
NOT_YET_ANNOTATED: set[str] = set()


def _public_functions(owner, name, obj):
    """``(qualified name, function)`` of ``obj``: itself, or a hofem class's public methods,
    ``__init__``, ``__call__`` and property getters (inherited ones included)."""
    if inspect.isfunction(obj):
        yield f"{owner}.{name}", obj
        return
    if not inspect.isclass(obj):
        return
    seen = set()
    for cls in obj.__mro__:
        if not cls.__module__.startswith("hofem"):
            continue
        for attr, member in vars(cls).items():
            if attr in seen or (attr.startswith("_") and attr not in ("__init__", "__call__")):
                continue
            seen.add(attr)
            if isinstance(member, property):
                member = member.fget
            elif isinstance(member, functools.cached_property):
                member = member.func
            elif isinstance(member, (classmethod, staticmethod)):
                member = member.__func__
            if inspect.isfunction(member):
                yield f"{owner}.{name}.{attr}", member


def test_public_api_is_annotated():
    """Every public function and method takes annotated parameters and annotates its
    return, and every annotation resolves (no forward reference to a missing name)."""
    import importlib
    import typing

    import hofem.meshes
    import hofem.transfer

    namespace = {**vars(hofem), **vars(hofem.meshes), "Transfer": hofem.transfer.Transfer}
    unannotated, unresolved, checked = [], [], 0
    for module_name in ANNOTATED_MODULES:
        module = importlib.import_module(module_name)
        for name in sorted(set(module.__all__) - NOT_YET_ANNOTATED):
            for qualname, func in _public_functions(module_name, name, getattr(module, name)):
                checked += 1
                try:
                    hints = typing.get_type_hints(func, localns=namespace)
                except NameError as err:
                    unresolved.append(f"{qualname}: {err}")
                    continue
                params = list(inspect.signature(func).parameters)
                if params and params[0] in ("self", "cls"):
                    params = params[1:]
                missing = [p for p in params if p not in hints]
                missing += ["return"] if "return" not in hints else []
                if missing:
                    unannotated.append(f"{qualname}: {', '.join(missing)}")
    assert checked > 100, checked  # the walk finds the API
    assert not unannotated, "unannotated: " + "; ".join(unannotated)
    assert not unresolved, "unresolvable annotations: " + "; ".join(unresolved)


@pytest.mark.slow
def test_wheel_installs_every_subpackage(tmp_path):
    """``pip install .`` (a built wheel) imports hofem and the folder-mapped sub-packages."""
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
    )
    if build.returncode != 0:
        pytest.fail(build.stderr)
    wheel = next((tmp_path / "dist").glob("hofem-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "hofem/meshes/__init__.py" in names and "hofem/qfunctions/mass.py" in names
    assert not [name for name in names if name.startswith("bakeoff/")]
    assert not lab_files(name for name in names if name.startswith("hofem/"))
    cuda = ROOT / "hofem" / "backends" / "cuda"
    data = [f.name for pattern in ("*.cu", "*.cuh", "*.json") for f in cuda.glob(pattern)]
    missing = [name for name in data if f"hofem/backends/cuda/{name}" not in names]
    tuning = sorted((ROOT / "hofem" / "data" / "tuning").glob("*.json"))
    missing += [f.name for f in tuning if f"hofem/data/tuning/{f.name}" not in names]
    rules = sorted((ROOT / "hofem" / "data" / "simplex_rules").glob("*.json"))
    missing += [f.name for f in rules if f"hofem/data/simplex_rules/{f.name}" not in names]
    assert tuning and len(rules) == 2 and not missing, (
        f"kernel sources or tables missing from the wheel: {missing}"
    )
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
    )
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import importlib, hofem; "
        f"[importlib.import_module(m) for m in {SUBPACKAGES!r}]; print(hofem.__file__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(target)], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(str(target))
    assert hofem.__version__ in wheel.name
