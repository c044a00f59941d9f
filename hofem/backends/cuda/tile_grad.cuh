// One warp per element with every contraction a dense GEMM on the fp64 tensor cores, for
// gradients on a collocated basis (operator_tiles_grad.py): P_1d = Q_1d = N, the points at
// the nodes, the interpolation the identity and the gradient the collocated derivative D
// (N x N) along each direction.
//
// The warp holds three buffers of the element's N^3 values, each as rows (z, y) of x
// (PITCH doubles a row, 4 modulo 8): U the nodes, X and Y the x and y derivatives at the
// points.  A contraction along one direction is a GEMM whose rows are the pairs of the two
// other directions; rather than store transposed copies, each direction reads the same
// buffer with its own address formula (grad_index):
//
//   x: rows (z, y), column x     y: rows (z, x), column y     z: rows (y, x), column z
//
// so the three derivatives come from U without rewriting it, and each GEMM's C is stored in
// the same point layout.  The z stage runs per m tile: its C fragments are du/dz at 4 points
// a lane, du/dx and du/dy are read at the same points from X and Y, the QFunction runs in
// registers, vx and vy go back in place, and vz is z^T's A operand directly
// (tile_product_c).  z^T's C is the m tile's part of the result at nodes whose U entries
// only this m tile's du/dz read: it overwrites them.  x^T and y^T then add into U.
//
// Included by the generated kernels after basis_tensor.cuh (index_t, entry), which define
// PITCH and TILE_TEAM 1 (tile_element.cuh's gather by one warp fills U).
#pragma once

#include "tile_element.cuh"

// The orientation of a GEMM over a buffer: the pair of directions its rows run over and the
// direction its column (the contracted k, or C's n) runs along
enum GradDir { GRAD_X, GRAD_Y, GRAD_Z };

// The buffer entry of GEMM row `row` and column col for orientation DIR, the element's value
// (z, y, x) at (z N + y) PITCH + x.  An A fragment is 4 consecutive rows by 4 columns a
// half-warp: along x the row starts are PITCH apart, along y and z the columns are, both
// 4 modulo 8 doubles (distinct bank pairs with the rows' consecutive x); only fragments whose
// rows straddle the outer index (z for y, y for z) may meet a two-way conflict.
template <int N, GradDir DIR>
__device__ __forceinline__ int grad_index(int row, int col) {
  if constexpr (DIR == GRAD_X) return row * PITCH + col;                        // (z, y), x
  if constexpr (DIR == GRAD_Y) return ((row / N) * N + col) * PITCH + row % N;  // (z, x), y
  return (col * N + row / N) * PITCH + row % N;                                 // (y, x), z
}

// c (NT n tiles, this lane's two columns each) = rows 8 m .. 8 m + 7 of A (N^2 x N, src read
// in orientation DIR) times the B operand b (tile_product_at)
template <int N, GradDir DIR, int KS, int NT>
__device__ __forceinline__ void grad_product(const double *src, int m, const double (&b)[KS][NT],
                                             int lane, double (&c)[NT][2]) {
  tile_product_at<N * N, N>(src, m, b, lane, c,
                            [](int row, int col) { return grad_index<N, DIR>(row, col); });
}

// Stores (or with ADD adds) m tile m's C into dst in orientation DIR: only the entries inside
// N^2 x N.  Each entry belongs to one lane, so the read-modify-write needs no atomics.
template <int N, GradDir DIR, bool ADD, int NT>
__device__ __forceinline__ void grad_store(double *dst, int m, const double (&c)[NT][2], int lane) {
  const int row = 8 * m + (lane >> 2), t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < NT; nt++) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int n = 8 * nt + 2 * t + i;
      if (row < N * N && n < N) {
        double &entry = dst[grad_index<N, DIR>(row, n)];
        entry = ADD ? entry + c[nt][i] : c[nt][i];
      }
    }
  }
}

// One GEMM stage shared -> shared along DIR: dst (= or += with ADD) src times the 1D
// operand b, both in orientation DIR (the point layout in, the point layout out)
template <int N, GradDir DIR, bool ADD, int KS, int NT>
__device__ __forceinline__ void grad_stage(const double *src, double *dst,
                                           const double (&b)[KS][NT], int lane) {
#pragma unroll tile_unroll
  for (int m = 0; m < TILE_MT(N * N); m++) {
    double c[NT][2];
    grad_product<N, DIR>(src, m, b, lane, c);
    grad_store<N, DIR, ADD>(dst, m, c, lane);
  }
}

// The z stage and z^T, m tile by m tile over rows (y, x): du/dz from U (b_d: D's forward
// operand), the point's du/dx, du/dy from x, y; point(row, zq, qok, q, ux, uy, uz, vx, vy, vz)
// the QFunction at point (x, y, z') = (row % N, row / N, zq), q its index, qok whether it is
// the element's; vx, vy back into x, y; vz through z^T (b_zt: D^T's operand in C's k order)
// into U at this m tile's rows.
template <int N, int KS, int NT, int KSC, typename Point>
__device__ __forceinline__ void grad_z_stage(double *u, double *x, double *y,
                                             const double (&b_d)[KS][NT],
                                             const double (&b_zt)[KSC][NT], int lane,
                                             Point point) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll tile_unroll
  for (int m = 0; m < TILE_MT(N * N); m++) {
    double u_z[NT][2], v_z[NT][2], c[NT][2];
    grad_product<N, GRAD_Z>(u, m, b_d, lane, u_z);
#pragma unroll
    for (int j = 0; j < NT; j++) {
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int row = 8 * m + g, zq = 8 * j + 2 * t + h;
        const bool qok = row < N * N && zq < N;
        const int a = qok ? grad_index<N, GRAD_Z>(row, zq) : 0;
        double v_x = 0.0, v_y = 0.0;
        v_z[j][h] = 0.0;
        point(row, zq, qok, (index_t)row + N * N * zq, qok ? x[a] : 0.0, qok ? y[a] : 0.0,
              u_z[j][h], v_x, v_y, v_z[j][h]);
        if (qok) {  // only this lane reads or writes the point's entries of x and y
          x[a] = v_x;
          y[a] = v_y;
        } else {
          v_z[j][h] = 0.0;  // padded points add nothing
        }
      }
    }
    tile_product_c(v_z, b_zt, c);  // z^T: rows (y, x), columns z
    // U's entries at this m tile's rows were read only by its du/dz product above, and
    // every lane's loads fed the mma.sync that these values depend on: no __syncwarp
    grad_store<N, GRAD_Z, false>(u, m, c, lane);
  }
}

// l[entry(idx, base + node)] += the element's N^3 node values of src (rows (z, y) of x):
// lane l adds nodes l, l + 32, ..., so that each atomic instruction touches few sectors
template <int N, typename I>
__device__ __forceinline__ void grad_scatter(const double *src, double *l,
                                             const I *__restrict__ idx, index_t base, int lane) {
  constexpr int NODES = N * N * N;
#pragma unroll
  for (int r = 0; r < (NODES + 31) / 32; r++) {
    const int node = lane + 32 * r;
    if (node < NODES) {
      atomicAdd(l + entry(idx, base + node), src[grad_index<N, GRAD_X>(node / N, node % N)]);
    }
  }
}
