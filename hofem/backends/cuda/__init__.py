"""CUDA backends on CuPy: ``/gpu/cuda/ref`` (array ops + cuBLAS) and ``/gpu/cuda/batched``.

Nothing here imports CuPy at package import; the backend modules import it
lazily and report a missing CuPy or device through ``check_available``.
"""
