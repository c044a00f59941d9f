// Conjugate-gradient vector update fused with the next residual norm.
//
// x += alpha p;  r -= alpha Ap;  partial[block] = sum over the block's entries of r^2
// with alpha = rz / pAp (1 in place of a non-positive pAp; the solver flags that as a
// breakdown).  The host sums `partial` (one entry per block: a fixed grid makes the
// result bitwise reproducible).  Launch with a multiple of 32 threads, at most 1024.

extern "C" __global__ void update_xr_rr(const long long n, const double *__restrict__ rz,
                                        const double *__restrict__ pAp,
                                        const double *__restrict__ p,
                                        const double *__restrict__ Ap, double *__restrict__ x,
                                        double *__restrict__ r, double *__restrict__ partial) {
  const double alpha = *rz / (*pAp > 0.0 ? *pAp : 1.0);
  double sum = 0.0;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    x[i] += alpha * p[i];
    const double r_i = r[i] - alpha * Ap[i];
    r[i] = r_i;
    sum += r_i * r_i;
  }
  __shared__ double warp_sums[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (warp == 0) {
    sum = lane < (int)(blockDim.x / 32) ? warp_sums[lane] : 0.0;
    for (int offset = 16; offset > 0; offset /= 2)
      sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if (lane == 0) partial[blockIdx.x] = sum;
  }
}
