// CG's vector updates inside the fused operator kernel (operator_fuse.py, cg=True; the
// device CG of cg.py).  The kernel of iteration k gathers the new search direction
//   p_k = z + beta p_{k-1},  z = r or inv_diag * r  (Jacobi),
// from r and p_{k-1} where it would read p (gather_column_cg, gather_nodes_cg), and each
// element group also runs one slice of the L-vectors' update (cg_update_slice): p_k into
// p_new, x += alpha p_{k-1} (the update deferred from iteration k-1) and Ap_next = 0 (the
// Ap of iteration k+1).  p_old and p_new are different arrays, so no gather reads what a
// slice writes; the slices are contiguous (coalesced) and together cover the L-vector, so
// every entry is updated once whatever the restriction.  alpha, beta: those of iteration
// k-1 (0 before the first).  The expression of p is cg_update_px's (cg.cu), so the iterates
// are the same as with the separate pass.  Include after basis_tensor.cuh.
#pragma once

struct CgGather {
  const double *__restrict__ r;         // (n,) the residual
  const double *__restrict__ inv_diag;  // (n,) Jacobi's inverse diagonal, or null
  const double *__restrict__ p_old;     // (n,) p_{k-1}
  double *__restrict__ p_new;           // (n,) p_k
  double *__restrict__ x;               // (n,) the iterate
  double *__restrict__ Ap_next;         // (n,) zeroed
  index_t n;
  double alpha, beta;
};

// p_k at L-vector entry i, from its p_{k-1}
__device__ __forceinline__ double cg_direction(const CgGather &g, index_t i, double p_old) {
  const double r_i = g.r[i];
  const double z_i = g.inv_diag ? g.inv_diag[i] * r_i : r_i;
  return z_i + g.beta * p_old;
}

// gather_column of p_k (the component at `shift` = c * component stride)
template <int SIDE_1D, typename I>
__device__ __forceinline__ void gather_column_cg(const CgGather &g, index_t shift,
                                                 const I *__restrict__ idx, index_t base,
                                                 bool active, int tx, int ty, double *r) {
  const bool owns = active && owns_column<SIDE_1D>(tx, ty);
#pragma unroll
  for (int k = 0; k < COLUMN(SIDE_1D); k++) {
    const index_t i = entry(idx, base + column_index<SIDE_1D>(k, tx, ty)) + shift;
    r[k] = owns ? cg_direction(g, i, g.p_old[i]) : 0.0;
  }
}

// gather_nodes of p_k
template <int P, typename I>
__device__ __forceinline__ void gather_nodes_cg(const CgGather &g, index_t shift,
                                                const I *__restrict__ idx, index_t base,
                                                bool active, double *r) {
#pragma unroll
  for (int j = 0; j < POW_DIM(P); j++) {
    const index_t i = entry(idx, base + j) + shift;
    r[j] = active ? cg_direction(g, i, g.p_old[i]) : 0.0;
  }
}

// Slice `group` of `groups` (the block's element group of this pass of for_each_element):
// the update of entries [group * chunk, (group + 1) * chunk), chunk = ceil(n / groups).
__device__ __forceinline__ void cg_update_slice(const CgGather &g, index_t group,
                                                index_t groups, int tid) {
  const index_t chunk = (g.n + groups - 1) / groups;
  const index_t end = min(g.n, (group + 1) * chunk);
  for (index_t i = group * chunk + tid; i < end; i += NUM_THREADS) {
    const double p_old = g.p_old[i];
    g.p_new[i] = cg_direction(g, i, p_old);
    g.x[i] += g.alpha * p_old;
    g.Ap_next[i] = 0.0;
  }
}
