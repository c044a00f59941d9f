"""The documentation's code runs: docs/quickstart.md blocks and examples/*.py."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def python_blocks(path):
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


@pytest.mark.parametrize(
    ("page", "expected"),
    [("quickstart.md", "volume = 2.606250000000"), ("meshes.md", "CG: ")],
)
def test_docs_code_blocks_run_in_order(page, expected, capsys):
    namespace = {}
    blocks = python_blocks(ROOT / "docs" / page)
    assert blocks
    for block in blocks:
        exec(compile(block, f"docs/{page}", "exec"), namespace)
    assert expected in capsys.readouterr().out


def test_main_command_solves_bp3():
    """The README's main job: BP3 (p = 4) converges with a small L2 error."""
    out = subprocess.run(
        [sys.executable, "-m", "hofem.bakeoff", "--elements", "3"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["bp"] == "bp3" and result["converged"] and result["l2_error"] < 1e-4


def test_hex_volume_example_prints_volume():
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "hex_volume.py")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "volume = 2.606250000000"


def test_readme_ten_lines(capsys):
    block = python_blocks(ROOT / "README.md")[0]
    exec(compile(block, "README.md", "exec"), {})
    assert capsys.readouterr().out.strip() == "(1, 1, 64) (1, 3, 1, 125)"
