"""Numba backend ``/cpu/self/numba``: the whole operator fused per block of elements.

``backend`` holds the backend class, ``operator`` the fused operator kernels
and their race-free colouring, ``codegen`` the source generation, contraction
programs and on-disk module cache, ``kernels`` the shape-independent compiled
kernels.  Nothing here imports Numba at package import; ``backend`` reports a
missing Numba through ``check_available``.
"""
