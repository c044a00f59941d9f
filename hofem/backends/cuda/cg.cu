// Conjugate-gradient kernels: vector updates fused with the reductions that follow
// them, and CG's scalars and control kept on the device (cg.py).
//
// Reductions write one partial sum per block (a fixed grid and block_sum's fixed
// order make every result bitwise reproducible); the one-block kernels cg_alpha and
// cg_beta add the partials and form the next scalars.  The device CG's state:
//   s (NUM_SCALARS,) float64: rz = r . z, alpha, beta, rr = r . r, tol
//   f (NUM_FLAGS,) int64: status (RUNNING until it stops: CONVERGED, BREAKDOWN
//                         (pAp), MAXITER_REACHED or NONFINITE (r)), iterations done, maxiter
// Every kernel of the iteration returns at once unless the status is RUNNING, so a
// host that checks only every k iterations finds the iterate and count of the
// iteration that stopped.  Launch the vector kernels with at most 1024 threads.
#include "reduce.cuh"

enum { S_RZ, S_ALPHA, S_BETA, S_RR, S_TOL, NUM_SCALARS };
enum { F_STATUS, F_ITERATIONS, F_MAXITER, NUM_FLAGS };
enum { RUNNING, CONVERGED, BREAKDOWN, MAXITER_REACHED, NONFINITE };

#define GRID_STRIDE(i, n)                                                      \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (long long)gridDim.x * blockDim.x)

// Sum of partial[0..n), by one block.
__device__ __forceinline__ double sum_partials(const double *__restrict__ partial,
                                               const long long n, double *scratch) {
  double sum = 0.0;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) sum += partial[i];
  return block_sum(sum, scratch, threadIdx.x, blockDim.x);
}

// x += alpha p;  r -= alpha Ap;  partial[block] = the block's part of r . r, with
// alpha = rz / pAp (1 in place of a non-positive pAp; the host solver flags that as a
// breakdown).  The host-driven CG's step (vector_ops.CupyVectorOps).
extern "C" __global__ void update_xr_rr(const long long n, const double *__restrict__ rz,
                                        const double *__restrict__ pAp,
                                        const double *__restrict__ p,
                                        const double *__restrict__ Ap, double *__restrict__ x,
                                        double *__restrict__ r, double *__restrict__ partial) {
  __shared__ double scratch[1024];
  const double alpha = *rz / (*pAp > 0.0 ? *pAp : 1.0);
  double sum = 0.0;
  GRID_STRIDE(i, n) {
    x[i] += alpha * p[i];
    const double r_i = r[i] - alpha * Ap[i];
    r[i] = r_i;
    sum += r_i * r_i;
  }
  sum = block_sum(sum, scratch, threadIdx.x, blockDim.x);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// partial[block] = the block's part of a . b (operators that do not return p . Ap).
extern "C" __global__ void cg_dot(const long long n, const double *__restrict__ a,
                                  const double *__restrict__ b, double *__restrict__ partial,
                                  const long long *__restrict__ f) {
  __shared__ double scratch[1024];
  if (f[F_STATUS] != RUNNING) return;
  double sum = 0.0;
  GRID_STRIDE(i, n) sum += a[i] * b[i];
  sum = block_sum(sum, scratch, threadIdx.x, blockDim.x);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// v[index[i]] = 0 for i < m: Ap on the constrained DOFs of a restricted operator.
extern "C" __global__ void cg_zero_entries(const long long m,
                                           const long long *__restrict__ index,
                                           double *__restrict__ v,
                                           const long long *__restrict__ f) {
  if (f[F_STATUS] != RUNNING) return;
  GRID_STRIDE(i, m) v[index[i]] = 0.0;
}

// One block: pAp = sum of the operator's partials; alpha = rz / pAp.  A non-finite
// pAp, or pAp <= 0 with rz != 0 (A not positive definite), stops the solve as a
// breakdown before x and r change.
extern "C" __global__ void cg_alpha(const double *__restrict__ pap_partial, const long long n,
                                    double *__restrict__ s, long long *__restrict__ f) {
  __shared__ double scratch[1024];
  if (f[F_STATUS] != RUNNING) return;
  const double pAp = sum_partials(pap_partial, n, scratch);
  if (threadIdx.x == 0) {
    const double rz = s[S_RZ];
    if (!isfinite(pAp) || (pAp <= 0.0 && rz != 0.0)) f[F_STATUS] = BREAKDOWN;
    s[S_ALPHA] = rz / (pAp > 0.0 ? pAp : 1.0);
  }
}

// r -= alpha Ap; per-block parts of r . r and of r . z with z = inv_diag r (Jacobi;
// inv_diag null: no preconditioner, rz_partial unused).  x is updated in cg_update_px.
extern "C" __global__ void cg_update_r(const long long n, const double *__restrict__ s,
                                       const long long *__restrict__ f,
                                       const double *__restrict__ Ap, double *__restrict__ r,
                                       const double *__restrict__ inv_diag,
                                       double *__restrict__ rr_partial,
                                       double *__restrict__ rz_partial) {
  __shared__ double scratch[1024];
  if (f[F_STATUS] != RUNNING) return;
  const double alpha = s[S_ALPHA];
  double rr = 0.0, rz = 0.0;
  GRID_STRIDE(i, n) {
    const double r_i = r[i] - alpha * Ap[i];
    r[i] = r_i;
    rr += r_i * r_i;
    if (inv_diag) rz += r_i * inv_diag[i] * r_i;
  }
  rr = block_sum(rr, scratch, threadIdx.x, blockDim.x);
  if (inv_diag) rz = block_sum(rz, scratch, threadIdx.x, blockDim.x);
  if (threadIdx.x == 0) {
    rr_partial[blockIdx.x] = rr;
    if (inv_diag) rz_partial[blockIdx.x] = rz;
  }
}

// One block: count the iteration, test ||r|| <= tol and maxiter, beta = rz_new / rz.
// rz_partial null: unpreconditioned, rz_new = rr.  A non-finite residual stops the
// solve as NONFINITE (x's update of this iteration is still pending, as for CONVERGED
// and MAXITER_REACHED: the host adds alpha p).
extern "C" __global__ void cg_beta(const double *__restrict__ rr_partial,
                                   const double *__restrict__ rz_partial, const long long n,
                                   double *__restrict__ s, long long *__restrict__ f) {
  __shared__ double scratch[1024];
  if (f[F_STATUS] != RUNNING) return;
  const double rr = sum_partials(rr_partial, n, scratch);
  const double rz_new = rz_partial ? sum_partials(rz_partial, n, scratch) : rr;
  if (threadIdx.x == 0) {
    const long long iterations = f[F_ITERATIONS] + 1;
    f[F_ITERATIONS] = iterations;
    s[S_RR] = rr;
    const double r_norm = sqrt(rr);
    if (!isfinite(r_norm) || !isfinite(rz_new))
      f[F_STATUS] = NONFINITE;
    else if (r_norm <= s[S_TOL])
      f[F_STATUS] = CONVERGED;
    else if (iterations >= f[F_MAXITER])
      f[F_STATUS] = MAXITER_REACHED;
    const double rz = s[S_RZ];
    s[S_BETA] = rz_new / (rz != 0.0 ? rz : 1.0);
    s[S_RZ] = rz_new;
  }
}

// x += alpha p (this iteration's, deferred from cg_update_r: p is read here anyway);
// p = z + beta p with z = inv_diag r (or r); Ap = 0 for an operator that adds into it
// (Ap null: not zeroed).
extern "C" __global__ void cg_update_px(const long long n, const double *__restrict__ s,
                                        const long long *__restrict__ f,
                                        const double *__restrict__ r,
                                        const double *__restrict__ inv_diag,
                                        double *__restrict__ x, double *__restrict__ p,
                                        double *__restrict__ Ap) {
  if (f[F_STATUS] != RUNNING) return;
  const double alpha = s[S_ALPHA], beta = s[S_BETA];
  GRID_STRIDE(i, n) {
    const double p_i = p[i];
    x[i] += alpha * p_i;
    const double z_i = inv_diag ? inv_diag[i] * r[i] : r[i];
    p[i] = z_i + beta * p_i;
    if (Ap) Ap[i] = 0.0;
  }
}

// partial[j * gridDim.x + block] = the block's part of a_j . b_j for j < k (k <= 3; pass
// any vectors for the unused pairs): the inner products of one iteration of the CG
// variants in one pass (vector_ops.CupyVectorOps.local_dots).
extern "C" __global__ void variant_dots(const long long n, const int k,
                                        const double *__restrict__ a0,
                                        const double *__restrict__ b0,
                                        const double *__restrict__ a1,
                                        const double *__restrict__ b1,
                                        const double *__restrict__ a2,
                                        const double *__restrict__ b2,
                                        double *__restrict__ partial) {
  __shared__ double scratch[1024];
  double s0 = 0.0, s1 = 0.0, s2 = 0.0;
  GRID_STRIDE(i, n) {
    s0 += a0[i] * b0[i];
    if (k > 1) s1 += a1[i] * b1[i];
    if (k > 2) s2 += a2[i] * b2[i];
  }
  s0 = block_sum(s0, scratch, threadIdx.x, blockDim.x);
  if (threadIdx.x == 0) partial[blockIdx.x] = s0;
  if (k > 1) {
    s1 = block_sum(s1, scratch, threadIdx.x, blockDim.x);
    if (threadIdx.x == 0) partial[gridDim.x + blockIdx.x] = s1;
  }
  if (k > 2) {
    s2 = block_sum(s2, scratch, threadIdx.x, blockDim.x);
    if (threadIdx.x == 0) partial[2 * gridDim.x + blockIdx.x] = s2;
  }
}

// One block: out[j] = sum of partial[j * n .. (j + 1) * n) for j < k: a rank's share of
// CG's inner products, which the distributed device CG then sums over the ranks.
extern "C" __global__ void cg_reduce(const double *__restrict__ partial, const long long n,
                                     const int k, double *__restrict__ out,
                                     const long long *__restrict__ f) {
  __shared__ double scratch[1024];
  if (f[F_STATUS] != RUNNING) return;
  for (int j = 0; j < k; ++j) {
    const double sum = sum_partials(partial + j * n, n, scratch);
    if (threadIdx.x == 0) out[j] = sum;
  }
}

// v[index[i]] += values[i] for i < m, the indices unique: the ghosts' contributions that
// other ranks sent to this rank's owned DOFs.
extern "C" __global__ void cg_add_entries(const long long m,
                                          const long long *__restrict__ index,
                                          const double *__restrict__ values,
                                          double *__restrict__ v,
                                          const long long *__restrict__ f) {
  if (f[F_STATUS] != RUNNING) return;
  GRID_STRIDE(i, m) v[index[i]] += values[i];
}
