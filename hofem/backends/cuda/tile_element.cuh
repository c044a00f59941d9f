// A team of TILE_TEAM warps per element with every contraction a dense GEMM on the fp64
// tensor cores (operator_tiles.py), for the 3D shapes past warp_element.cuh's 8 x 8 tiles
// (Q_1d = 9, 10).
//
// A contraction along one direction is a GEMM whose rows are the pairs of the two other
// directions, so that no tile is padded over a plane: with P = P_1d, Q = Q_1d and B (Q x P),
//
//   x:   C[(z, y), x'] = sum_x A[(z, y), x] B[x', x]      M = P^2, K = P, N = Q
//   y:   C[(z, x'), y'] = sum_y A[(z, x'), y] B[y', y]    M = P Q, K = P, N = Q
//   z:   C[(y', x'), z'] = sum_z A[(y', x'), z] B[z', z]  M = Q^2, K = P, N = Q
//   z^T, y^T, x^T: the same backwards (K = Q, N = P) with B^T.
//
// Each stage reads its A operand from one of the team's two shared buffers (rows of PITCH
// doubles) and stores its C tiles transposed into the other as the next stage's A (TileStore:
// the pair's index that the next stage contracts becomes the column); its m tiles go round
// robin to the team's warps, and the team meets at a barrier between stages (tile_sync).
// The 1D matrix's B operand fragments stay in each warp's registers for the whole kernel.  The z stage's C fragments are
// the values at the points: the QFunction runs on them in registers, and z^T takes its result
// as the A operand directly (tile_product_c), so the points never touch shared memory.
//
// Included by the generated kernels after basis_tensor.cuh (index_t, entry), which define
// TILE_TEAM (warps per element), ELEMS_PER_BLOCK (teams per block) and PITCH: doubles per buffer row, at least max(P_1d, Q_1d) and 4 modulo 8, so that an A
// fragment (8 rows g by 4 columns t, lane 4 g + t) falls in 16 distinct 8-byte bank pairs per
// half-warp: its four rows start at the four multiples of 4 modulo 16 pairs (tile_index).
#pragma once

#include "mma.cuh"

// m tiles of an element a stage's loops unroll over its team: a few, so that the A loads of
// the next tile overlap this one's products; all of them would hoist every load and pass 255
// registers.  Each warp of a team unrolls its share, so that the element keeps as many tiles
// in flight and the registers of a thread fit the more warps that the team lets reside
#ifndef TILE_UNROLL
#define TILE_UNROLL 4
#endif
constexpr int tile_unroll = TILE_UNROLL > TILE_TEAM ? TILE_UNROLL / TILE_TEAM : 1;  // (#pragma
// unroll takes no macro)

// the block's buffers: dynamic shared memory (more than the 48 KiB of static arrays at 8
// warps); the tests' host emulation gives its own
#ifndef TILE_SHARED
#define TILE_SHARED(name) extern __shared__ double name[]
#endif

// bar.sync on `threads` threads at barrier `id`: the host emulation of the tests
// (tests/cuda_host_shim.h, HOFEM_HOST_BAR_SYNC) defines its own
#ifndef HOFEM_HOST_BAR_SYNC
__device__ __forceinline__ void tile_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
#endif

// The barrier between two stages of team `team`'s element: its warps have written what the
// next stage reads.  One warp needs only __syncwarp, a block of one team __syncthreads;
// else each team has its named barrier 1 + team (0 is __syncthreads', so at most 15 teams),
// which lets the block's other teams run on
__device__ __forceinline__ void tile_sync(int team) {
  if constexpr (TILE_TEAM == 1) {
    __syncwarp();
  } else if constexpr (ELEMS_PER_BLOCK == 1) {
    __syncthreads();
  } else {
    static_assert(ELEMS_PER_BLOCK <= 15, "named barriers 1 to 15, one a team");
    tile_bar_sync(1 + team, 32 * TILE_TEAM);
  }
}

// tiles of 8 (m tiles of a GEMM of M rows, n tiles of N columns); k steps (of 4) over K, in
// the natural order and in the permuted order of a C fragment taken as the A operand (two
// steps per 8 columns)
#define TILE_MT(M) (((M) + 7) / 8)
#define TILE_KS(K) (((K) + 3) / 4)
#define TILE_KS_C(K) (2 * (((K) + 7) / 8))

// Where a stage stores C entry (row r, column n), rows r = a D + b (D the inner extent):
// TILE_INNER: row a N + n, column b (the inner index becomes the contracted one: x -> y);
// TILE_OUTER: row n D + b, column a (the outer index: y -> z, z^T -> y^T);
// TILE_NODES: entry r N + n of a flat array (x^T: the element's nodes in their order).
enum TileStore { TILE_INNER, TILE_OUTER, TILE_NODES };

// The buffer's entry of row `row`, column col: rows of PITCH doubles (an A-fragment load reads
// 4 rows of one group per half-warp, free of conflicts by PITCH's rule)
__device__ __forceinline__ int tile_index(int row, int col) { return row * PITCH + col; }

template <int N, int D, TileStore STORE>
__device__ __forceinline__ int tile_dest(int r, int n) {
  if constexpr (STORE == TILE_INNER) return tile_index((r / D) * N + n, r % D);
  if constexpr (STORE == TILE_OUTER) return tile_index(n * D + r % D, r / D);
  return r * N + n;
}

// The k index of step s for lane column t: natural (4 s + t), or permuted (PERMUTED) to
// match a C fragment as the A operand: lane (g, t) holds columns 2 t, 2 t + 1 of each 8, so
// step 2 j + i takes column 8 j + 2 t + i
template <bool PERMUTED>
__device__ __forceinline__ int tile_k(int s, int t) {
  return PERMUTED ? 8 * (s / 2) + 2 * t + s % 2 : 4 * s + t;
}

// This lane's B-operand fragments b[s][nt] = b[k][n] (k = tile_k(s, t), n = 8 nt + g) of a
// contraction with the 1D matrix Mat (R x C, row-major): forward b[k][n] = Mat[n][k] (K = C,
// N = R), TRANSPOSE b[k][n] = Mat[k][n] (K = R, N = C); zero past the matrix, so that the
// padded k steps and n tiles add nothing
template <int R, int C, bool TRANSPOSE, bool PERMUTED, int KS, int NT>
__device__ __forceinline__ void tile_operand(const double *Mat, int lane, double (&b)[KS][NT]) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int s = 0; s < KS; s++) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
      const int k = tile_k<PERMUTED>(s, t), n = 8 * nt + g;
      const int row = TRANSPOSE ? k : n, col = TRANSPOSE ? n : k;
      b[s][nt] = row < R && col < C ? Mat[row * C + col] : 0.0;
    }
  }
}

// c (NT tiles, this lane's two columns each) = rows 8 m .. 8 m + 7 of A (M x K, entry (row,
// col) at src[index(row, col)]) times the B operand b: A read in 8 x 4 fragments, zero past
// row M and column K (the buffer's entries there were never written, and may hold NaN)
template <int M, int K, int KS, int NT, typename Index>
__device__ __forceinline__ void tile_product_at(const double *src, int m,
                                                const double (&b)[KS][NT], int lane,
                                                double (&c)[NT][2], Index index) {
  const int row = 8 * m + (lane >> 2), t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < NT; nt++) c[nt][0] = c[nt][1] = 0.0;
#pragma unroll
  for (int s = 0; s < KS; s++) {
    const int col = 4 * s + t;
    const double a = row < M && col < K ? src[index(row, col)] : 0.0;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) mma_m8n8k4(c[nt][0], c[nt][1], a, b[s][nt]);
  }
}

// tile_product_at with A in the buffer's rows (tile_index)
template <int M, int K, int KS, int NT>
__device__ __forceinline__ void tile_product(const double *src, int m, const double (&b)[KS][NT],
                                             int lane, double (&c)[NT][2]) {
  tile_product_at<M, K>(src, m, b, lane, c, [](int row, int col) { return tile_index(row, col); });
}

// c = a (8 rows, this lane's C fragments of NC tiles) times the B operand b whose k order is
// permuted (tile_k<true>): a C fragment as the next GEMM's A operand, from registers
template <int NC, int KS, int NT>
__device__ __forceinline__ void tile_product_c(const double (&a)[NC][2], const double (&b)[KS][NT],
                                               double (&c)[NT][2]) {
  static_assert(KS == 2 * NC, "two k steps per C tile");
#pragma unroll
  for (int nt = 0; nt < NT; nt++) c[nt][0] = c[nt][1] = 0.0;
#pragma unroll
  for (int s = 0; s < KS; s++) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++) mma_m8n8k4(c[nt][0], c[nt][1], a[s / 2][s % 2], b[s][nt]);
  }
}

// f(j, h, qok, q) at each of this lane's points of the z stage's m tile m (its C fragments'
// entries [j][h]): row (y', x') = 8 m + g, z' = 8 j + 2 t + h, point q = row + Q^2 z', qok
// inside the element (false past the last m tile)
template <int Q, typename F>
__device__ __forceinline__ void tile_points(int m, int lane, F &&f) {
  const int row = 8 * m + (lane >> 2), t = lane & 3;
#pragma unroll
  for (int j = 0; j < TILE_MT(Q); j++) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int zq = 8 * j + 2 * t + h;
      f(j, h, row < Q * Q && zq < Q, (index_t)row + (index_t)(Q * Q) * zq);
    }
  }
}

// Stores m tile m's C (rows 8 m .., this lane's columns) of a GEMM of M rows (inner extent
// D) and N columns to dst (tile_dest): only entries inside M x N, which the next stage reads
template <int M, int N, int D, TileStore STORE, int NT>
__device__ __forceinline__ void tile_store(double *dst, int m, const double (&c)[NT][2],
                                           int lane) {
  const int row = 8 * m + (lane >> 2), t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < NT; nt++) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int n = 8 * nt + 2 * t + i;
      if (row < M && n < N) dst[tile_dest<N, D, STORE>(row, n)] = c[nt][i];
    }
  }
}

// One stage shared -> shared: dst = (A (M x K, src) times the 1D matrix's operand b) stored
// as the next stage's A (STORE, inner extent D of A's rows); this warp (team_warp of the
// team) takes m tiles team_warp, team_warp + TILE_TEAM, ...
template <int M, int K, int N, int D, TileStore STORE, int KS, int NT>
__device__ __forceinline__ void tile_stage(const double *src, double *dst,
                                           const double (&b)[KS][NT], int lane, int team_warp) {
#pragma unroll tile_unroll
  for (int m = team_warp; m < TILE_MT(M); m += TILE_TEAM) {
    double c[NT][2];
    tile_product<M, K>(src, m, b, lane, c);
    tile_store<M, N, D, STORE>(dst, m, c, lane);
  }
}

// The element's P^3 nodes at l[entry(idx, base + node)] into dst as stage x's A (row
// node / P = (z, y), column node % P = x): the team's thread l (team_lane, of 32 TILE_TEAM)
// takes nodes l, l + 32 TILE_TEAM, ... (coalesced)
template <int P, typename I>
__device__ __forceinline__ void tile_gather(const double *__restrict__ l, const I *__restrict__ idx,
                                            index_t base, int team_lane, double *dst) {
  constexpr int NODES = P * P * P, LANES = 32 * TILE_TEAM;
#pragma unroll
  for (int r = 0; r < (NODES + LANES - 1) / LANES; r++) {
    const int node = team_lane + LANES * r;
    if (node < NODES) dst[tile_index(node / P, node % P)] = l[entry(idx, base + node)];
  }
}

// l[entry(idx, base + node)] += src[node] for the element's P^3 nodes (x^T's TILE_NODES):
// the team's thread l adds nodes l, l + 32 TILE_TEAM, ..., so that each atomic instruction
// touches few sectors
template <int P, typename I>
__device__ __forceinline__ void tile_scatter(const double *src, double *l,
                                             const I *__restrict__ idx, index_t base,
                                             int team_lane) {
  constexpr int NODES = P * P * P, LANES = 32 * TILE_TEAM;
#pragma unroll
  for (int r = 0; r < (NODES + LANES - 1) / LANES; r++) {
    const int node = team_lane + LANES * r;
    if (node < NODES) atomicAdd(l + entry(idx, base + node), src[node]);
  }
}
