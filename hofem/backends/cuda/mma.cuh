// The fp64 tensor-core tile (sm_80 and later), shared by basis_mma.cuh (the x and y stages
// inside gen's column-per-thread slab) and warp_element.cuh (one warp per element).
#pragma once

// c (8x8 tile, this lane's two entries) += a (8x4) b (4x8): lane l holds a[l / 4][l % 4],
// b[l % 4][l / 4] and c[l / 4][2 (l % 4) + i].  The host emulation of the tests
// (tests/cuda_host_shim.h, HOFEM_HOST_MMA) defines its own.
#ifndef HOFEM_HOST_MMA
__device__ __forceinline__ void mma_m8n8k4(double &c0, double &c1, double a, double b) {
  asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
      : "+d"(c0), "+d"(c1)
      : "d"(a), "d"(b));
}
#endif
