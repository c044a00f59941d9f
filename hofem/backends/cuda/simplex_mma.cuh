// The dense products of the fused simplex kernel on the fp64 tensor cores (simplex_mma.py):
// mma.sync.m8n8k4.f64 (mma.cuh, sm_80 and later) with 8 elements of the block as the M side.
//
// The scalar kernel (operator_simplex.py) reads one matrix entry per multiply-add; here a
// warp reads one value per lane and operand and makes 256 multiply-adds from two operand
// loads.  Per group of ELEMS elements (ELEMS / 8 groups of 8, "m" below):
//
//   points: Y (8, Q) = X (8, P) M^T    X: the gathered nodes of one component, M = B (Q, P)
//                                      or each G_d, so K = nodes and N = points;
//   nodes:  V (8, P) = sum_d Y_d (8, Q) M_d    K = points, N = nodes.
//
// A warp's unit is one (m, component, group of NT column tiles of 8): it reads the A
// operand once per k step for all its tiles (and, in the points stage, all d of a
// gradient), so each mma costs about one operand load instead of 512 scalar ones.
//
// Shared layouts (doubles, every stride 4 modulo 8 so that the quarter-warp pattern of
// the operands, 4 rows g by 4 columns t at row * stride + t or t * stride + g, falls in
// 16 distinct 8-byte bank pairs):
//   M   (D, QR, MP): one matrix of a basis, QR = Q rounded up to 8 (zero rows past Q),
//       MP >= P rounded up to 4 (zero columns past P), then MMA_SLACK zeros.  The points
//       stage reads M[d][q][k] (rows g, columns t), the nodes stage M[d][k][n] (rows t,
//       columns g) of the same copy.  The nodes stage's last column tile may read up to 4
//       columns past MP: the next row's first entries (or the slack), which only reach
//       output columns past P, never stored.
//   X   (ELEMS, XS): an element's (C, NP) gathered nodes, NP = P rounded up to 4, zero past P.
//   Y   (ELEMS, YS): an element's (R, QR) point values, one row per QFunction row; zero
//       at the points past Q, so that the nodes stage's k steps past Q add nothing.
#pragma once

#include "mma.cuh"
#include "simplex.cuh"

// doubles after each matrix in shared memory: the nodes stage's last column tile reads
// up to 4 entries past its last row
#define MMA_SLACK 4

// The block's dynamic shared memory (the opt-in beyond 48 KiB); the host emulation of the
// tests (tests/cuda_host_shim.h) defines its own
#ifndef SIMPLEX_MMA_SHARED
#define SIMPLEX_MMA_SHARED(name) extern __shared__ double name[]
#endif

// Points stage of one field: Y[e][d C + c][q] = sum_k M[d][q][k] X[e][c][k] for the block's
// 8-element groups m with an element below `valid`, d < D (1 for interpolation, DIM for a
// gradient), c < C, q < 8 NTILES, k < 4 KS.  Units (m, c, NT tiles) strided over the warps.
template <int ELEMS, int C, int D, int KS, int NTILES, int NT, int NP, int XS, int QR, int MP,
          int YS>
__device__ __forceinline__ void simplex_mma_points(const double *X, const double *M, double *Y,
                                                   int valid, int warp, int warps, int lane) {
  constexpr int GROUPS = (NTILES + NT - 1) / NT, UNITS = ELEMS / 8 * C * GROUPS;
  const int g = lane >> 2, t = lane & 3;
  for (int unit = warp; unit < UNITS; unit += warps) {
    const int m = unit / (C * GROUPS), c = unit / GROUPS % C, n0 = unit % GROUPS * NT * 8;
    if (8 * m >= valid) continue;  // a whole group past the last element (warp-uniform)
    const double *a_row = X + (8 * m + g) * XS + c * NP + t;  // A: X[8 m + g][c][4 s + t]
    const double *b_row = M + (n0 + g) * MP + t;                // B: M[d][n0 + g][4 s + t]
    double acc[D][NT][2] = {};
#pragma unroll 4
    for (int s = 0; s < KS; s++) {
      const double a = a_row[4 * s];
#pragma unroll
      for (int d = 0; d < D; d++) {
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
          if (n0 + 8 * nt < 8 * NTILES) {
            const double b = b_row[(d * QR + 8 * nt) * MP + 4 * s];
            mma_m8n8k4(acc[d][nt][0], acc[d][nt][1], a, b);
          }
        }
      }
    }
    double *y = Y + (8 * m + g) * YS + c * QR + n0 + 2 * t;  // C: Y[8 m + g][.][n0 + 2 t + h]
#pragma unroll
    for (int d = 0; d < D; d++) {
#pragma unroll
      for (int nt = 0; nt < NT; nt++) {
        if (n0 + 8 * nt < 8 * NTILES) {
          y[d * C * QR + 8 * nt] = acc[d][nt][0];
          y[d * C * QR + 8 * nt + 1] = acc[d][nt][1];
        }
      }
    }
  }
}

// Nodes stage of one field: scatter(e, c, i, sum_d sum_q Y[e][d C + c][q] M[d][q][i]) for
// i < P of the block's 8-element groups with an element below `valid`, q < 4 KS.  Units
// (m, c, NT tiles of 8 nodes) strided over the warps; scatter(e, c, i, value) adds the
// value to the output (elements past the last are the caller's to skip).
template <int ELEMS, int C, int D, int KS, int NTILES, int NT, int P, int QR, int MP, int YS,
          typename Scatter>
__device__ __forceinline__ void simplex_mma_nodes(const double *Y, const double *M, int valid,
                                                  int warp, int warps, int lane,
                                                  const Scatter &scatter) {
  constexpr int GROUPS = (NTILES + NT - 1) / NT, UNITS = ELEMS / 8 * C * GROUPS;
  const int g = lane >> 2, t = lane & 3;
  for (int unit = warp; unit < UNITS; unit += warps) {
    const int m = unit / (C * GROUPS), c = unit / GROUPS % C, n0 = unit % GROUPS * NT * 8;
    if (8 * m >= valid) continue;
    const double *a_row = Y + (8 * m + g) * YS + c * QR + t;  // A: Y[8 m + g][d C + c][4 s + t]
    const double *b_col = M + t * MP + n0 + g;                 // B: M[d][4 s + t][n0 + g]
    double acc[NT][2] = {};
#pragma unroll 4
    for (int s = 0; s < KS; s++) {
#pragma unroll
      for (int d = 0; d < D; d++) {
        const double a = a_row[d * C * QR + 4 * s];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
          if (n0 + 8 * nt < 8 * NTILES) {
            const double b = b_col[(d * QR + 4 * s) * MP + 8 * nt];
            mma_m8n8k4(acc[nt][0], acc[nt][1], a, b);
          }
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int i = n0 + 8 * nt + 2 * t + h;
        if (i < P) scatter(8 * m + g, c, i, acc[nt][h]);
      }
    }
  }
}
