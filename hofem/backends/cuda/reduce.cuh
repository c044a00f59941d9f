// Deterministic block reductions, shared by the CG kernels (cg.cu) and the fused
// operator kernels that also return u . Au (operator_fuse.py).
#pragma once

// Sum of `value` over the block's n threads, in a fixed order (a pairwise tree), so
// the result is bitwise reproducible.  scratch: n doubles of shared memory that no
// other code uses during the call.  Every thread of the block must call it; the
// sum is returned on every thread.  Any n >= 1 (not only multiples of 32).
__device__ __forceinline__ double block_sum(double value, double *scratch, int tid, int n) {
  __syncthreads();  // scratch may still be read by the caller's previous step
  scratch[tid] = value;
  __syncthreads();
  int half = 1;
  while (2 * half < n) half *= 2;  // the largest power of two below n (1 for n <= 2)
  for (int s = half; s > 0; s /= 2) {
    if (tid < s && tid + s < n) scratch[tid] += scratch[tid + s];
    __syncthreads();
  }
  const double sum = scratch[0];
  __syncthreads();
  return sum;
}
