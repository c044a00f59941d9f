"""The laboratory (the repository's top-level ``bakeoff/``, not in the wheel), importable
from the tests also when they run against an installed wheel."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after site-packages: hofem stays the installed one
