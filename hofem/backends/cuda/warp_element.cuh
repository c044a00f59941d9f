// One warp per element for 3D interpolation and gradients, P_1d and Q_1d at most 8
// (operator_warp.py).
//
// Lane l = 4 g + t owns the two z columns (i, j) = (2 t + h, g), h = 0, 1, of the element's
// 8 x 8 x 8 (padded) points.  The x and y contractions and their transposes are 8x8x4 tiles
// on the fp64 tensor cores (mma.cuh); the z contractions run in each lane's registers, on a
// __constant__ copy of B (every lane reads the same entry, an FMA operand).  The warp's
// buffer (64 rows of 8 doubles, warp_index) turns the x stage's output tiles into the y stage's
// operand, and the transposes' likewise.  The x^T stage takes its operand from the y^T
// stage's accumulators directly: in the C layout lane (g, t) holds columns 2 t and 2 t + 1,
// which is the A operand of the k steps {0, 2, 4, 6} and {1, 3, 5, 7} (the matrix side's k
// order permuted to match).  Outputs are added through the buffer, 8 lanes on one row of
// nodes, so that each atomic instruction touches few sectors.
//
// Gradients: the collocated derivative D (Q x Q) at the points, one level k at a time
// (warp_grad_level, warp_grad_t_level): x on the tensor cores with the values' C layout as the
// A operand (as x^T above), y with the values' tile k from a buffer slot as the B operand, z in
// registers.
//
// Where the 1D interpolation is the identity (points at the nodes), warp_gather_points and
// warp_scatter_points replace warp_interp and warp_interp_t.
//
// Small elements (P_1d, Q_1d <= 4): WARP_SIDE 4, and a warp applies WARP_ELEMS = 4 elements at
// once.  Tile row r and column c are element (r / 4) 2 + c / 4's row r % 4 and column c % 4,
// and the operands of the 1D matrices are block-diagonal (warp_block), so that each 8x8 tile
// holds four elements' 4x4 slices and no product mixes two elements.
//
// Included by the generated kernels after basis_tensor.cuh (index_t, entry).
#pragma once

#include "mma.cuh"

// doubles in a warp's buffer (a slot): 8 tiles of 8 rows of 8 (warp_index)
#define WARP_BUF 512
// the side of one element's block in a tile (8, or 4 for elements of P_1d, Q_1d <= 4), the
// elements per tile side and per warp
#ifndef WARP_SIDE
#define WARP_SIDE 8
#endif
#define WARP_E1 (8 / WARP_SIDE)
#define WARP_ELEMS (WARP_E1 * WARP_E1)

// The element (of the warp's WARP_ELEMS) that tile row r and column c (0..7) belong to, and
// whether element e is one of the nvalid the warp applies (written so that one element per
// warp compiles to no instruction)
__device__ __forceinline__ int warp_elem(int r, int c) {
  return WARP_E1 == 1 ? 0 : (r / WARP_SIDE) * WARP_E1 + c / WARP_SIDE;
}
__device__ __forceinline__ bool warp_valid(int e, int nvalid) {
  return WARP_ELEMS == 1 || e < nvalid;
}

// The k steps (of 4) of a contraction over K of an element's entries: past K the operands
// are zero (with four elements per warp their blocks fill both)
template <int K>
__device__ constexpr int warp_steps() {
  return WARP_SIDE == 8 ? (K + 3) / 4 : 2;
}

// The index of tile row or column r (0..7) in its element's block
__device__ __forceinline__ int warp_local(int r) { return r & (WARP_SIDE - 1); }

// The block-diagonal operand entry at tile position (r, c) of a matrix M (R x C, row-major):
// M[r % WARP_SIDE][c % WARP_SIDE] where r and c are in one element's block, else zero
template <int R, int C>
__device__ __forceinline__ double warp_block(const double *M, int r, int c) {
  const int rr = warp_local(r), cc = warp_local(c);
  const bool same = WARP_E1 == 1 || r / WARP_SIDE == c / WARP_SIDE;
  return same && rr < R && cc < C ? M[rr * C + cc] : 0.0;
}

// This lane's operand entries of the stages (loop-invariant, 16 doubles), in the block's shared
// table (warp_fill_fragments): entry e of lane l at table[l + 32 e].  WarpTable reads them
// where each stage uses them, so that they hold no registers across the element; WarpRegs
// holds them in registers (one shared load each per launch, not one per tensor-core op)
#define WF_B 0     // B[g][4 s + t]: B (Q, P) as the A operand (y), B^T as the B operand (x)
#define WF_BT 2    // B[4 s + t][g]: B^T as the A operand (y^T)
#define WF_BP 4    // B[2 t + s][g]: B as the B operand of x^T, k order permuted
#define WF_DX 6    // D[g][2 t + s]: D (Q, Q) for x, B operand (k order permuted, C layout as A)
#define WF_DY 8    // D[g][4 s + t]: y, A operand
#define WF_DXT 10  // D[2 t + s][g]: x^T, B operand (k order permuted)
#define WF_DYT 12  // D[4 s + t][g]: y^T, A operand
#define WF_W 14    // w[j] w[i] at the lane's points (i, j) = (2 t + s, g): the quadrature weights
#define WARP_FRAGS 16

struct WarpTable {
  const double *lane_table;  // table + lane
  __device__ __forceinline__ double operator()(int e) const { return lane_table[e * 32]; }
};
struct WarpRegs {
  double v[WARP_FRAGS];
  __device__ __forceinline__ explicit WarpRegs(const double *lane_table) {
#pragma unroll
    for (int e = 0; e < WARP_FRAGS; e++) v[e] = lane_table[e * 32];
  }
  __device__ __forceinline__ double operator()(int e) const { return v[e]; }
};

// Lane `lane`'s entries of B (Q, P) and, where D is not null, of the collocated derivative
// D (Q, Q), both row-major, and where w is not null the x and y factors of the quadrature
// weights of its points from the 1D weights w (Q), written to frag = table + lane
template <int P, int Q>
__device__ __forceinline__ void warp_fill_fragments(const double *B, const double *D,
                                                    const double *w, int lane, double *frag) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int s = 0; s < 2; s++) {
    const int y = 4 * s + t, x = 2 * t + s;  // the k index of the y and x^T operands
    const int i = min(warp_local(x), Q - 1), j = min(warp_local(g), Q - 1);  // padded: valid
    frag[(WF_W + s) * 32] = w ? w[j] * w[i] : 0.0;
    frag[(WF_B + s) * 32] = warp_block<Q, P>(B, g, y);
    frag[(WF_BT + s) * 32] = warp_block<Q, P>(B, y, g);
    frag[(WF_BP + s) * 32] = warp_block<Q, P>(B, x, g);
    frag[(WF_DX + s) * 32] = D ? warp_block<Q, Q>(D, g, x) : 0.0;
    frag[(WF_DXT + s) * 32] = D ? warp_block<Q, Q>(D, x, g) : 0.0;
    frag[(WF_DY + s) * 32] = D ? warp_block<Q, Q>(D, g, y) : 0.0;
    frag[(WF_DYT + s) * 32] = D ? warp_block<Q, Q>(D, y, g) : 0.0;
  }
}

// out[k][h]: a stored field's value at this lane's points (i, j, k) = ((2 t + h) % WARP_SIDE,
// g % WARP_SIDE, k), point i + Q (j + Q k) of the lane's element at x[entry(idx, base +
// point)]; zero at padded points and where the lane's element is past the last (!ok).  Read
// before the stages, so that the loads overlap them.
template <int Q, typename I>
__device__ __forceinline__ void warp_load_points(const double *__restrict__ x,
                                                 const I *__restrict__ idx, index_t base,
                                                 bool ok, int lane, double (&out)[Q][2]) {
  const int j = warp_local(lane >> 2), t = lane & 3;
#pragma unroll
  for (int k = 0; k < Q; k++) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int i = warp_local(2 * t + h);
      out[k][h] = ok && i < Q && j < Q ? x[entry(idx, base + i + Q * (j + Q * k))] : 0.0;
    }
  }
}

// The buffer's entry of row `row` (tile row % 8 of tile row / 8) and column col (0..7): rows
// of 8 doubles, the columns of rows 2 and 3 (mod 4) permuted (col ^ 5).  Each half-warp's
// accesses then fill its 16 8-byte bank pairs once: the B-operand reads (lanes (g, t): row
// 4 s + t, column g), the C layout's writes (row g, column 2 t + h) and the scatter's reads
// (8 lanes on each of two consecutive rows)
__device__ __forceinline__ int warp_index(int row, int col) {
  return row * 8 + (col ^ (row & 2 ? 5 : 0));
}

// Tile rows (c, 8 rows) of the buffer as the C layout writes them: this lane's 2 columns
template <int ROWS>
__device__ __forceinline__ void warp_store_tiles(double *buf, const double (&c)[ROWS][2],
                                                 int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int r = 0; r < ROWS; r++) {
    buf[warp_index(r * 8 + g, 2 * t)] = c[r][0];
    buf[warp_index(r * 8 + g, 2 * t + 1)] = c[r][1];
  }
}

// dst (tiles of this lane's two columns) += A (rows x 8) times the tiles the buffer holds, with
// A this lane's operand entries frag(a), frag(a + 1): a contraction over the tiles' first K rows
template <int K, int N, typename F>
__device__ __forceinline__ void warp_y_mma(const F &frag, int a, const double *buf, int lane,
                                           double (&dst)[N][2]) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int cc = 0; cc < N; cc++) {
#pragma unroll
    for (int s = 0; s < warp_steps<K>(); s++) {
      mma_m8n8k4(dst[cc][0], dst[cc][1], frag(a + s), buf[warp_index(cc * 8 + 4 * s + t, g)]);
    }
  }
}

// The y stage of either direction: the tiles c (this lane's two columns each) go through the
// buffer, and come back as tile c = A (rows x 8) times the buffered tile c, with A this lane's
// operand entries frag(a), frag(a + 1) (a = WF_B for y, WF_BT for y^T), over K rows
template <int K, int N, typename F>
__device__ __forceinline__ void warp_y_stage(const F &frag, int a, double *buf, int lane,
                                             double (&c)[N][2]) {
  __syncwarp();  // the buffer's previous readers are done
  warp_store_tiles(buf, c, lane);
  __syncwarp();
#pragma unroll
  for (int cc = 0; cc < N; cc++) c[cc][0] = c[cc][1] = 0.0;
  warp_y_mma<K>(frag, a, buf, lane, c);
}

// A contraction along z in this lane's two columns: out[o][h] = sum_i M[o][i] in[i][h] with M
// (OUT x IN) row-major, or with TRANSPOSE sum_i M[i][o] in[i][h] with M (IN x OUT); M a
// __constant__ copy (every lane reads the same entry, an FMA operand)
template <int OUT, int IN, bool TRANSPOSE>
__device__ __forceinline__ void warp_z(const double *M, const double (&in)[IN][2],
                                       double (&out)[OUT][2]) {
#pragma unroll
  for (int o = 0; o < OUT; o++) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      double sum = 0.0;
#pragma unroll
      for (int i = 0; i < IN; i++) sum = fma(M[TRANSPOSE ? i * OUT + o : o * IN + i], in[i][h], sum);
      out[o][h] = sum;
    }
  }
}

// out[k][h]: the interpolated values at this lane's points (the C layout's (row g, column
// 2 t + h) of level k) of the warp's elements, element e's node (a, b, c) at
// l[entry(idx, base + e estride + a + P (b + P c))] for e < nvalid; zero at padded points
template <int P, int Q, typename I, typename F>
__device__ __forceinline__ void warp_interp(const double *__restrict__ l, const I *__restrict__ idx,
                                            index_t base, index_t estride, int nvalid,
                                            const F &frag, const double *Bz, double *buf,
                                            int lane, double (&out)[Q][2]) {
  const int g = lane >> 2, t = lane & 3, b = warp_local(g);
  double c[P][2];
  // x: tile c (rows b, columns i) = U[c] (b x a) B^T (a x i), U gathered as the A operand
#pragma unroll
  for (int cc = 0; cc < P; cc++) {
    c[cc][0] = c[cc][1] = 0.0;
#pragma unroll
    for (int s = 0; s < warp_steps<P>(); s++) {
      const int a = warp_local(4 * s + t), e = warp_elem(g, 4 * s + t);
      const index_t node = base + e * estride + a + P * (b + P * cc);
      const double x = a < P && b < P && warp_valid(e, nvalid) ? l[entry(idx, node)] : 0.0;
      mma_m8n8k4(c[cc][0], c[cc][1], x, frag(WF_B + s));
    }
  }
  warp_y_stage<P>(frag, WF_B, buf, lane, c);  // tile c (rows j, columns i) = B (j x b) V[c] (b x i)
  warp_z<Q, P, false>(Bz, c, out);  // z: B (k x c)
}

// l[entry(idx, base + e estride + node)] += the buffer's P tiles (rows b, columns a) of level c:
// element e's nodal values at node a + P (b + P c), for e < nvalid.  8 lanes per tile row (c, r)
// of nodes, 4 rows at a time (WARP_SIDE 8: the P rows that hold nodes; 4: all 8, two elements'
// rows b), so that each atomic instruction touches few sectors
template <int P, typename I>
__device__ __forceinline__ void warp_scatter_tiles(const double *buf, int lane, double *l,
                                                   const I *__restrict__ idx, index_t base,
                                                   index_t estride, int nvalid) {
  constexpr int R = WARP_SIDE == 8 ? P : 8;
  const int col = lane & 7, a = warp_local(col);
  for (int row = lane >> 3; row < P * R; row += 4) {
    const int cc = row / R, r = row - cc * R, b = WARP_SIDE == 8 ? r : warp_local(r);
    const int e = warp_elem(r, col);
    if (a < P && b < P && warp_valid(e, nvalid)) {
      const index_t node = base + e * estride + a + P * (b + P * cc);
      atomicAdd(l + entry(idx, node), buf[warp_index(cc * 8 + r, col)]);
    }
  }
}

// The transpose: l[entry(idx, base + e estride + node)] += element e's nodal values of the
// point values in[k][h] (this lane's columns; zero at padded points), for e < nvalid
template <int P, int Q, typename I, typename F>
__device__ __forceinline__ void warp_interp_t(const double (&in)[Q][2], const F &frag,
                                              const double *Bz, double *buf, int lane,
                                              double *l, const I *__restrict__ idx,
                                              index_t base, index_t estride, int nvalid) {
  double c[P][2];
  warp_z<P, Q, true>(Bz, in, c);  // z^T: B^T (c x k)
  warp_y_stage<Q>(frag, WF_BT, buf, lane, c);  // tile c (rows b, columns i) = B^T (b x j) W[c] (j x i)
  // x^T: tile c (rows b, columns a) = W[c] (b x i) B (i x a), the accumulators as the A operand
  double d[P][2];
#pragma unroll
  for (int cc = 0; cc < P; cc++) {
    d[cc][0] = d[cc][1] = 0.0;
#pragma unroll
    for (int s = 0; s < 2; s++) mma_m8n8k4(d[cc][0], d[cc][1], c[cc][s], frag(WF_BP + s));
  }
  __syncwarp();
  warp_store_tiles(buf, d, lane);
  __syncwarp();
  warp_scatter_tiles<P>(buf, lane, l, idx, base, estride, nvalid);
}

// Where the basis interpolates with the identity (its points are its nodes, P == Q: the
// Gauss-Lobatto points of BP5 and BP6), the values at the points are the gathered nodes and
// the transpose scatters them back: no contraction.  out[k][h]: element e's node (i, j, k) =
// ((2 t + h) % WARP_SIDE, g % WARP_SIDE, k) at l[entry(idx, base + e estride + i + P (j + P k))]
// for the lane's element e (warp_elem) below nvalid; zero at padded points
template <int P, typename I>
__device__ __forceinline__ void warp_gather_points(const double *__restrict__ l,
                                                   const I *__restrict__ idx, index_t base,
                                                   index_t estride, int nvalid, int lane,
                                                   double (&out)[P][2]) {
  const int g = lane >> 2, t = lane & 3, j = warp_local(g), e = warp_elem(g, 2 * t);
  const bool ok = j < P && warp_valid(e, nvalid);
#pragma unroll
  for (int k = 0; k < P; k++) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int i = warp_local(2 * t + h);
      const index_t node = base + e * estride + i + P * (j + P * k);
      out[k][h] = ok && i < P ? l[entry(idx, node)] : 0.0;
    }
  }
}

// The transpose of warp_gather_points: adds the point values in[k][h] (zero at padded points)
// to the nodes through the buffer (warp_scatter_tiles)
template <int P, typename I>
__device__ __forceinline__ void warp_scatter_points(const double (&in)[P][2], double *buf,
                                                    int lane, double *l,
                                                    const I *__restrict__ idx, index_t base,
                                                    index_t estride, int nvalid) {
  __syncwarp();  // the buffer's previous readers are done
  warp_store_tiles(buf, in, lane);
  __syncwarp();
  warp_scatter_tiles<P>(buf, lane, l, idx, base, estride, nvalid);
}

// out[d][h]: the reference gradient (d = x, y, z) at this lane's points of level k (the C
// layout's row g, columns 2 t + h), from the values u at the lane's points of every level (warp_interp) and their
// tile k in the warp's slot (warp_store_tiles): x on the tensor cores with the values as the A
// operand, y on them with the slot's tile as the B operand, z in registers (Dz a constant
// copy of D)
template <int Q, typename F>
__device__ __forceinline__ void warp_grad_level(const double (&u)[Q][2], const double *slot,
                                                const F &frag, const double *Dz,
                                                int lane, int k, double (&out)[3][2]) {
  const int g = lane >> 2, t = lane & 3;
  out[0][0] = out[0][1] = out[1][0] = out[1][1] = 0.0;
  // x: (rows j, columns i') = U[k] D^T (k order permuted: both steps); y: (rows j', columns
  // i) = D U[k]
#pragma unroll
  for (int s = 0; s < 2; s++) mma_m8n8k4(out[0][0], out[0][1], u[k][s], frag(WF_DX + s));
#pragma unroll
  for (int s = 0; s < warp_steps<Q>(); s++) {
    mma_m8n8k4(out[1][0], out[1][1], frag(WF_DY + s), slot[warp_index(k * 8 + 4 * s + t, g)]);
  }
#pragma unroll
  for (int h = 0; h < 2; h++) {
    double sum = 0.0;
#pragma unroll
    for (int kk = 0; kk < Q; kk++) sum = fma(Dz[k * Q + kk], u[kk][h], sum);
    out[2][h] = sum;
  }
}

// The transpose of warp_grad_level: adds level k's test values in[d][h] of the reference
// gradient to v (this lane's point values of every level) along x and z, and writes the y
// part's tile k to the slot, for warp_y_mma with D^T once every level is in (the slot's tile k
// must have been read already)
template <int Q, typename F>
__device__ __forceinline__ void warp_grad_t_level(const double (&in)[3][2], double *slot,
                                                  const F &frag, const double *Dz,
                                                  int lane, int k, double (&v)[Q][2]) {
#pragma unroll
  for (int s = 0; s < 2; s++) mma_m8n8k4(v[k][0], v[k][1], in[0][s], frag(WF_DXT + s));
#pragma unroll
  for (int kk = 0; kk < Q; kk++) {
#pragma unroll
    for (int h = 0; h < 2; h++) v[kk][h] = fma(Dz[k * Q + kk], in[2][h], v[kk][h]);
  }
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; h++) slot[warp_index(k * 8 + g, 2 * t + h)] = in[1][h];
}

// The sum of v over the N lanes of this lane's aligned group of N (a power of two), in every
// lane of the group
template <int N>
__device__ __forceinline__ double warp_group_sum(double v) {
#pragma unroll
  for (int step = N / 2; step > 0; step /= 2) v += __shfl_xor_sync(0xffffffffu, v, step);
  return v;
}

// out[r C + c] = sum_a W[r][a] x[entry(idx, base + e estride + a) + c cstride] for the R rows
// of W (R x N, row-major), the C components and this lane's element e (of the warp's nvalid,
// warp_elem): a field of N nodes whose basis gives the same values at every point (a
// cell-constant basis, hofem.cell_center), evaluated once per element.  With N a power of two
// the loads are spread over the lanes and the sums over a are shuffles: at one element per
// warp lane (c, a) = (lane / N, lane % N) loads entry a of component c (C N <= 32); at
// several, lane (e, a) loads node a of element e, every component (N WARP_ELEMS <= 32).  Else
// every lane loads its element's N offsets and C N entries
template <int N, int R, int C, typename I>
__device__ __forceinline__ void warp_cell_values(const double *__restrict__ x,
                                                 const I *__restrict__ idx, index_t base,
                                                 index_t estride, int nvalid, index_t cstride,
                                                 const double *W, int lane,
                                                 double (&out)[R * C]) {
  constexpr bool spread = (N & (N - 1)) == 0;
  if constexpr (spread && WARP_ELEMS == 1 && C * N <= 32) {
    const int a = lane % N, c = lane / N;
    const double v = c < C ? x[entry(idx, base + a) + c * cstride] : 0.0;
#pragma unroll
    for (int r = 0; r < R; r++) {
      const double sum = warp_group_sum<N>(W[r * N + a] * v);
#pragma unroll
      for (int cc = 0; cc < C; cc++) out[r * C + cc] = __shfl_sync(0xffffffffu, sum, cc * N);
    }
  } else if constexpr (spread && N * WARP_ELEMS <= 32) {
    const int a = lane % N, e = min(lane / N, nvalid - 1);  // past the last: a valid element
    const int pe = warp_elem(lane >> 2, 2 * (lane & 3));    // the element of this lane's points
    const index_t node = entry(idx, base + e * estride + a);
    double v[C];
#pragma unroll
    for (int c = 0; c < C; c++) v[c] = x[node + c * cstride];
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
      for (int c = 0; c < C; c++) {
        const double sum = warp_group_sum<N>(W[r * N + a] * v[c]);
        out[r * C + c] = __shfl_sync(0xffffffffu, sum, pe * N);
      }
    }
  } else {
    const int pe = warp_elem(lane >> 2, 2 * (lane & 3));
    const index_t first = base + (warp_valid(pe, nvalid) ? pe : 0) * estride;
    double nodes[C][N];
#pragma unroll
    for (int a = 0; a < N; a++) {
      const index_t node = entry(idx, first + a);
#pragma unroll
      for (int c = 0; c < C; c++) nodes[c][a] = x[node + c * cstride];
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
      for (int c = 0; c < C; c++) {
        double sum = 0.0;
#pragma unroll
        for (int a = 0; a < N; a++) sum = fma(W[r * N + a], nodes[c][a], sum);
        out[r * C + c] = sum;
      }
    }
  }
}
