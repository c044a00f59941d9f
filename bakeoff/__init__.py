"""The hofem laboratory: anchors, side-by-side comparisons, tuning sweeps and A/B scripts.

Run from the repository root, ``python -m bakeoff --help``; never imported by
``hofem`` and not part of the wheel.  Results files and figures are under
``bakeoff/results/``, the dated measurement history in ``bakeoff/JOURNAL.md``.
"""
