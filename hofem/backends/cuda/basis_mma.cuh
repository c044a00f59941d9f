// The x and y stages of the 3D tensor contraction (basis_tensor.cuh's contract) on the fp64
// tensor cores: each stage is a small GEMM per element, done in 8x8x4 tiles by
// mma.sync.m8n8k4.f64 (sm_80 and later).
//
// In the scalar stages every multiply-add reads one buffer value from shared memory, and
// those loads bind the fused kernels (docs/performance.md).  Here a warp reads one value per
// lane and tile step and makes 256 multiply-adds from it; the 1D matrix is one more operand
// held in registers for the whole stage.  The thread layout of the rest of the kernel is
// unchanged: each thread still owns a column along z (contracted in registers, as before)
// and gets its output column back; in between, any full warp of the block works on any
// element's tiles, so an element need not be a whole number of warps.
//
// Each element's buffer is two parts of T_1D^2 rows of MMA_PITCH doubles.  Part 0 holds the
// input of the y stage (rows k * IN + y after the z stage, k < OUT) and the output of the x
// stage (rows k * OUT + y, y < OUT); part 1 the y stage's output (rows k * OUT + y, x < IN).
// MMA_PITCH is T_1D or more and 4 modulo 8, so the 4-row, 4-column half-warp reads of a
// tile fall in distinct banks.
//
// Included by basis_tensor.cuh when TENSOR_CORES is defined (DIM = 3, the fused kernels).
#pragma once

#include "mma.cuh"

#if DIM != 3
#error "TENSOR_CORES needs DIM == 3"
#endif

#define MMA_PITCH (((T_1D + 3) / 8) * 8 + 4)
#define MMA_PART (T_1D * T_1D * MMA_PITCH)
// full warps of a (T_1D, T_1D, ELEMS_PER_BLOCK) block: those run the tiles (a partial last
// warp only owns columns)
#define MMA_WARPS (T_1D * T_1D * ELEMS_PER_BLOCK / 32)
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

static_assert(MMA_WARPS >= 1, "TENSOR_CORES needs a block of 32 threads or more");


// This lane's entries of a 1D matrix M (ROWS, COLS) row-major, in 8-row tiles and 4-column
// steps: frag[r][s] = M[8 r + g][4 s + t], zero past its edges (g = lane / 4, t = lane % 4).
// That is M as the A operand of mma_m8n8k4, and M^T as its B operand.
template <int ROWS, int COLS, int RT, int KS>
__device__ __forceinline__ void matrix_fragments(const double *M, int g, int t,
                                                 double (&frag)[RT][KS]) {
#pragma unroll
  for (int r = 0; r < RT; r++) {
#pragma unroll
    for (int s = 0; s < KS; s++) {
      const int row = r * 8 + g, col = s * 4 + t;
      frag[r][s] = row < ROWS && col < COLS ? M[row * COLS + col] : 0.0;
    }
  }
}

// y stage of every element of the block: part 1 (k, y', x) = sum_y My[y', y] part 0 (k, y, x),
// k < OUT, y' < OUT, x < IN.  Per element and k one GEMM C (OUT, IN) = My (OUT, IN) X (IN, IN);
// a warp's unit is one (element, k, 8 columns x), over all row tiles.
template <int IN, int OUT>
__device__ __forceinline__ void mma_stage_y(const double *My, double *block_buf, int warp,
                                            int lane) {
  constexpr int MT = CEIL_DIV(OUT, 8), XB = CEIL_DIV(IN, 8), KS = CEIL_DIV(IN, 4);
  constexpr int UNITS = ELEMS_PER_BLOCK * OUT * XB;
  const int g = lane >> 2, t = lane & 3;
  double a[MT][KS];
  matrix_fragments<OUT, IN>(My, g, t, a);  // the A operand
  for (int unit = warp; unit < UNITS; unit += MMA_WARPS) {
    const int slot = unit / (OUT * XB), k = unit / XB % OUT, x0 = unit % XB * 8;
    const double *src = block_buf + slot * (2 * MMA_PART) + k * IN * MMA_PITCH;  // part 0
    double *dst = block_buf + slot * (2 * MMA_PART) + MMA_PART + k * OUT * MMA_PITCH;
    double b[KS];  // this lane's entries of X: row y = 4 ks + t, column x = x0 + g
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
      const int y = ks * 4 + t;
      b[ks] = x0 + g < IN && y < IN ? src[y * MMA_PITCH + x0 + g] : 0.0;
    }
    double c[MT][2] = {};
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
#pragma unroll
      for (int mt = 0; mt < MT; mt++) mma_m8n8k4(c[mt][0], c[mt][1], a[mt][ks], b[ks]);
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
      for (int i = 0; i < 2; i++) {
        const int y = mt * 8 + g, x = x0 + 2 * t + i;
        if (y < OUT && x < IN) dst[y * MMA_PITCH + x] = c[mt][i];
      }
    }
  }
}

// x stage of every element of the block: part 0 (k, y, x') = sum_x Mx[x', x] part 1 (k, y, x),
// rows m = k OUT + y < OUT^2.  Per element one GEMM C (OUT^2, OUT) = X (OUT^2, IN) Mx^T; a
// warp's unit is one (element, 8 rows m), over all column tiles.
template <int IN, int OUT>
__device__ __forceinline__ void mma_stage_x(const double *Mx, double *block_buf, int warp,
                                            int lane) {
  constexpr int MT = CEIL_DIV(OUT * OUT, 8), NT = CEIL_DIV(OUT, 8), KS = CEIL_DIV(IN, 4);
  constexpr int UNITS = ELEMS_PER_BLOCK * MT;
  const int g = lane >> 2, t = lane & 3;
  double b[NT][KS];
  matrix_fragments<OUT, IN>(Mx, g, t, b);  // the B operand, Mx^T
  for (int unit = warp; unit < UNITS; unit += MMA_WARPS) {
    const int slot = unit / MT, m = unit % MT * 8 + g;  // this lane's row of X
    double *part = block_buf + slot * (2 * MMA_PART) + m * MMA_PITCH;
    double a[KS];
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
      const int x = ks * 4 + t;
      a[ks] = m < OUT * OUT && x < IN ? part[MMA_PART + x] : 0.0;
    }
    double c[NT][2] = {};
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
#pragma unroll
      for (int nt = 0; nt < NT; nt++) mma_m8n8k4(c[nt][0], c[nt][1], a[ks], b[nt][ks]);
    }
    if (m < OUT * OUT) {
#pragma unroll
      for (int nt = 0; nt < NT; nt++) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
          const int x = nt * 8 + 2 * t + i;
          if (x < OUT) part[x] = c[nt][i];  // part 0
        }
      }
    }
  }
}

// contract's 3D body with the x and y stages on the tensor cores; r_z: this thread's column
// after the z stage (OUT entries), buf: this element's buffer (2 MMA_PART).
template <int IN, int OUT>
__device__ __forceinline__ void contract_xy_mma(const double *Mx, const double *My,
                                                const double *r_z, double *out, double *buf,
                                                int tx, int ty) {
  double *block_buf = buf - threadIdx.z * (2 * MMA_PART);
  const int tid = (threadIdx.z * T_1D + ty) * T_1D + tx, warp = tid >> 5, lane = tid & 31;
  if (tx < IN && ty < IN) {
#pragma unroll
    for (int k = 0; k < OUT; k++) buf[(k * IN + ty) * MMA_PITCH + tx] = r_z[k];
  }
  __syncthreads();
  if (warp < MMA_WARPS) mma_stage_y<IN, OUT>(My, block_buf, warp, lane);
  __syncthreads();
  if (warp < MMA_WARPS) mma_stage_x<IN, OUT>(Mx, block_buf, warp, lane);
  __syncthreads();
  if (tx < OUT && ty < OUT) {
#pragma unroll
    for (int k = 0; k < OUT; k++) out[k] = buf[(k * OUT + ty) * MMA_PITCH + tx];
  }
  __syncthreads();
}
