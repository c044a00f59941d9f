// Tensor-product basis actions (interp, grad and their transposes), sum-factorized,
// one launch per batch of elements; the device routines are in basis_tensor.cuh.
//
// Compile-time defines (all required):
//   DIM (1..3), NUM_COMP, P_1D, Q_1D, T_1D = max(P_1D, Q_1D), ELEMS_PER_BLOCK
//
// Layouts: the node side is (num_elem, NUM_COMP, P_1D^DIM) contiguous.  The point
// side is addressed as  e * q_elem_stride + (d * NUM_COMP + c) * q_comp_stride + q
// so one kernel writes either the basis layout (num_elem, [DIM,] NUM_COMP, Q) or the
// Q-vector layout ([DIM *] NUM_COMP, num_elem * Q) directly.  Offsets are 64-bit.

#include "basis_tensor.cuh"

// What a tensor_action computes from the nodes (and its transpose back to them).
enum Mode { INTERP, GRAD, COLLOC };

// One tensor basis action per component, B (Q_1D, P_1D) row-major:
//   TRANSPOSE false: v = B u (INTERP), the reference gradient with G (Q_1D, P_1D) in
//     slot d (GRAD), or the same as B then the collocated derivative D (Q_1D, Q_1D)
//     along each axis (COLLOC, D B = G, used when Q_1D >= P_1D);
//   TRANSPOSE true: the transposes; M is then B^T (P_1D, Q_1D), Mg is G^T for GRAD
//     and D itself (not transposed) for COLLOC.
// src is u (nodes) or v (points), dst the other.
template <bool TRANSPOSE, Mode MODE>
__device__ __forceinline__ void tensor_action(const int num_elem, const double *__restrict__ M,
                                              const double *__restrict__ Mg,
                                              const double *__restrict__ src,
                                              double *__restrict__ dst,
                                              const index_t q_elem_stride,
                                              const index_t q_comp_stride) {
  constexpr bool IS_GRAD = MODE == GRAD;
  constexpr int ROWS = IS_GRAD ? DIM : 1;  // directions contracted one at a time
  __shared__ double s_B[MAT_SIZE];
  __shared__ double s_G[MODE == INTERP ? 1 : MODE == GRAD ? MAT_SIZE : Q_1D * Q_1D];
  __shared__ double s_buf[ELEMS_PER_BLOCK * BUF_SIZE];
  THREAD_SETUP
  if (MODE == COLLOC) {
    for (int i = tid; i < Q_1D * Q_1D; i += NUM_THREADS) s_G[i] = Mg[i];
  }
  load_matrices(M, IS_GRAD ? Mg : nullptr, s_B, s_G, tid);
  double *buf = s_buf + slot * BUF_SIZE;
  for_each_element(num_elem, slot, [&](index_t elem, bool active) {
    for (int c = 0; c < NUM_COMP; c++) {
      const index_t nodes = (elem * NUM_COMP + c) * NUM_NODES;
      const index_t points = elem * q_elem_stride + c * q_comp_stride;
      const index_t row_stride = NUM_COMP * q_comp_stride;  // between directions
      if constexpr (!TRANSPOSE) {
        double r_in[COLUMN(P_1D)];
        load_column<P_1D>(src + nodes, active, tx, ty, r_in);
        if constexpr (MODE == COLLOC) {
          double r_q[COLUMN(Q_1D)];
          contract<P_1D, Q_1D>(s_B, s_B, s_B, r_in, r_q, buf, tx, ty);
          const GlobalColumns<double> out{dst + points, row_stride, active, tx, ty};
          grad_collocated(s_G, s_G, r_q, out, buf, tx, ty);
        } else {
#pragma unroll
          for (int d = 0; d < ROWS; d++) {  // one direction at a time: fewer live registers
            double r_out[COLUMN(Q_1D)];
            contract<P_1D, Q_1D>(IS_GRAD && d == 0 ? s_G : s_B, IS_GRAD && d == 1 ? s_G : s_B,
                                 IS_GRAD && d == 2 ? s_G : s_B, r_in, r_out, buf, tx, ty);
            store_column<Q_1D>(dst + points + d * row_stride, active, tx, ty, r_out);
          }
        }
      } else {
        double r_out[COLUMN(P_1D)];
        if constexpr (MODE == COLLOC) {
          double r_q[COLUMN(Q_1D)];
          const GlobalColumns<const double> in{src + points, row_stride, active, tx, ty};
          grad_t_collocated(s_G, s_G, in, r_q, buf, tx, ty);
          contract<Q_1D, P_1D>(s_B, s_B, s_B, r_q, r_out, buf, tx, ty);
        } else {
#pragma unroll
          for (int k = 0; k < COLUMN(P_1D); k++) r_out[k] = 0.0;
#pragma unroll
          for (int d = 0; d < ROWS; d++) {
            double r_in[COLUMN(Q_1D)], r_d[COLUMN(P_1D)];
            load_column<Q_1D>(src + points + d * row_stride, active, tx, ty, r_in);
            contract<Q_1D, P_1D>(IS_GRAD && d == 0 ? s_G : s_B, IS_GRAD && d == 1 ? s_G : s_B,
                                 IS_GRAD && d == 2 ? s_G : s_B, r_in, r_d, buf, tx, ty);
#pragma unroll
            for (int k = 0; k < COLUMN(P_1D); k++) r_out[k] += r_d[k];
          }
        }
        store_column<P_1D>(dst + nodes, active, tx, ty, r_out);
      }
    }
  });
}

extern "C" __global__ void interp(const int num_elem, const double *__restrict__ B,
                                  const double *__restrict__ u, double *__restrict__ v,
                                  const index_t q_elem_stride, const index_t q_comp_stride) {
  tensor_action<false, INTERP>(num_elem, B, nullptr, u, v, q_elem_stride, q_comp_stride);
}

extern "C" __global__ void interp_t(const int num_elem, const double *__restrict__ Bt,
                                    const double *__restrict__ v, double *__restrict__ u,
                                    const index_t q_elem_stride, const index_t q_comp_stride) {
  tensor_action<true, INTERP>(num_elem, Bt, nullptr, v, u, q_elem_stride, q_comp_stride);
}

extern "C" __global__ void grad(const int num_elem, const double *__restrict__ B,
                                const double *__restrict__ G, const double *__restrict__ u,
                                double *__restrict__ v, const index_t q_elem_stride,
                                const index_t q_comp_stride) {
  tensor_action<false, GRAD>(num_elem, B, G, u, v, q_elem_stride, q_comp_stride);
}

extern "C" __global__ void grad_t(const int num_elem, const double *__restrict__ Bt,
                                  const double *__restrict__ Gt, const double *__restrict__ v,
                                  double *__restrict__ u, const index_t q_elem_stride,
                                  const index_t q_comp_stride) {
  tensor_action<true, GRAD>(num_elem, Bt, Gt, v, u, q_elem_stride, q_comp_stride);
}

extern "C" __global__ void grad_colloc(const int num_elem, const double *__restrict__ B,
                                       const double *__restrict__ D,
                                       const double *__restrict__ u, double *__restrict__ v,
                                       const index_t q_elem_stride,
                                       const index_t q_comp_stride) {
  tensor_action<false, COLLOC>(num_elem, B, D, u, v, q_elem_stride, q_comp_stride);
}

extern "C" __global__ void grad_colloc_t(const int num_elem, const double *__restrict__ Bt,
                                         const double *__restrict__ D,
                                         const double *__restrict__ v, double *__restrict__ u,
                                         const index_t q_elem_stride,
                                         const index_t q_comp_stride) {
  tensor_action<true, COLLOC>(num_elem, Bt, D, v, u, q_elem_stride, q_comp_stride);
}
