"""The CEED bake-off problems (BP1..BP6) as runnable, verified benchmarks.

``python -m hofem.bakeoff --help`` lists the commands.
"""
