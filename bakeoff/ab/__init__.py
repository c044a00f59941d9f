"""A/B scripts: one design choice timed side by side.

Run from the repository root: ``python -m bakeoff.ab.NAME ...``.
"""
