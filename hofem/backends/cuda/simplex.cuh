// Helpers of the fused simplex operator kernels (operator_simplex.py).  Each generated
// kernel runs its stages as loops over the block's threads between __syncthreads(), so it
// is correct for any block size up to its NUM_THREADS (the CPU tests run it with 1 and a
// few threads).
#pragma once

#include "reduce.cuh"

// element counts and E-/Q-vector entries in 64 bits (problems past 2^31 entries)
typedef long long index_t;

// Entry j of an element's gathered values: idx[j] through the restriction's offsets, or
// j itself for the identity layout (idx null, the E-vector is the L-vector).
template <typename I>
__device__ __forceinline__ index_t entry(const I *__restrict__ idx, index_t j) {
  return idx ? (index_t)idx[j] : j;
}
