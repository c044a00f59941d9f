// Device routines of the sum-factorized tensor basis, shared by the batched basis
// kernels (basis_tensor.cu) and the fused operator kernels (operator_fuse.py).
//
// Each element is a set of small dense contractions with the constant 1D matrices,
// done in registers and shared memory: the thread owning a (x[, y]) position keeps
// the column along the slowest axis in registers, contracts that axis in registers,
// then the remaining axes through a shared-memory buffer laid out [slow][y][x].
// Threads per element: T_1D^(DIM-1) (T_1D for DIM = 1); ELEMS_PER_BLOCK elements
// share a block (threadIdx.z in 3D, threadIdx.y in 1D and 2D).  Every routine that
// contracts synchronizes the block, so all threads must call it.
//
// The slowest axis is contracted in registers, where every thread of the block reads the
// same matrix entry at an index known at compile time: the routines take that axis's
// matrices separately (Sb, Sg, Ds), so a caller may pass copies in constant memory, which
// the FMAs read as operands with no load instruction (the fused operator kernels), or
// the shared-memory ones again (the basis kernels).
//
// Compile-time defines (all required):
//   DIM (1..3), P_1D, Q_1D, T_1D = max(P_1D, Q_1D), ELEMS_PER_BLOCK
// Optional: TENSOR_CORES (DIM = 3, sm_80 and later): contract's x and y stages on the fp64
// tensor cores (basis_mma.cuh), with a larger buffer per element.  BLOCKED (DIM = 3): each
// thread owns two x-adjacent columns (basis_blocked.cuh): COLUMN(n) is 2 n registers, tx the
// thread's column pair.
#pragma once

#ifndef DIM
#error "DIM must be defined"
#endif

#define POW_DIM(n) ((DIM) == 1 ? (n) : (DIM) == 2 ? (n) * (n) : (n) * (n) * (n))
#define NUM_NODES POW_DIM(P_1D)
#define NUM_QPTS POW_DIM(Q_1D)
#define MAT_SIZE (P_1D * Q_1D)

typedef long long index_t;

#ifdef TENSOR_CORES
#include "basis_mma.cuh"
#define BUF_SIZE (2 * MMA_PART)
#elif defined(BLOCKED)
#include "basis_blocked.cuh"
#define BUF_SIZE (T_1D * T_1D * ROW_1D)
#else
#define BUF_SIZE POW_DIM(T_1D)
#endif

// out[k] = sum_i M[k * IN + i] * in[i] for k < OUT: the slowest axis, in registers
template <int IN, int OUT>
__device__ __forceinline__ void contract_registers(const double *M, const double *in,
                                                   double *out) {
#pragma unroll
  for (int k = 0; k < OUT; k++) {
    double sum = 0.0;
#pragma unroll
    for (int i = 0; i < IN; i++) sum += M[k * IN + i] * in[i];
    out[k] = sum;
  }
}

// One element's contraction with Mx, My, Mz (each OUT x IN, row-major, in shared
// memory).  in: this thread's column (IN entries along the slowest axis; DIM = 1:
// in[0] is entry tx).  out: OUT entries along the slowest axis at this thread's
// output position (DIM = 1: out[0] is output tx).  buf: this element's
// BUF_SIZE scratch.  Every thread of the block must call it (it synchronizes).
template <int IN, int OUT>
__device__ __forceinline__ void contract(const double *Mx, const double *My, const double *Mz,
                                         const double *in, double *out, double *buf, int tx,
                                         int ty) {
#if DIM == 1
  if (tx < IN) buf[tx] = in[0];
  __syncthreads();
  if (tx < OUT) {
    double sum = 0.0;
#pragma unroll
    for (int i = 0; i < IN; i++) sum += Mx[tx * IN + i] * buf[i];
    out[0] = sum;
  }
  __syncthreads();
#elif DIM == 2
  double r_y[OUT];  // (OUT_y) at column x = tx
  contract_registers<IN, OUT>(My, in, r_y);
  if (tx < IN) {
#pragma unroll
    for (int k = 0; k < OUT; k++) buf[k * T_1D + tx] = r_y[k];
  }
  __syncthreads();
  if (tx < OUT) {
#pragma unroll
    for (int k = 0; k < OUT; k++) {
      double sum = 0.0;
#pragma unroll
      for (int i = 0; i < IN; i++) sum += Mx[tx * IN + i] * buf[k * T_1D + i];
      out[k] = sum;
    }
  }
  __syncthreads();
#elif defined(TENSOR_CORES)
  double r_z[OUT];  // (OUT_z) at (y, x) = (ty, tx), input side in x and y
  contract_registers<IN, OUT>(Mz, in, r_z);
  contract_xy_mma<IN, OUT>(Mx, My, r_z, out, buf, tx, ty);
#elif defined(BLOCKED)
  contract_blocked<IN, OUT>(Mx, My, Mz, in, out, buf, tx, ty);
#else
  double r_z[OUT];  // (OUT_z) at (y, x) = (ty, tx), input side in x and y
  contract_registers<IN, OUT>(Mz, in, r_z);
  if (tx < IN && ty < IN) {
#pragma unroll
    for (int k = 0; k < OUT; k++) buf[(k * T_1D + ty) * T_1D + tx] = r_z[k];
  }
  __syncthreads();
  if (tx < IN && ty < OUT) {  // contract y: thread (tx, ty) makes output row y = ty
#pragma unroll
    for (int k = 0; k < OUT; k++) {
      double sum = 0.0;
#pragma unroll
      for (int i = 0; i < IN; i++) sum += My[ty * IN + i] * buf[(k * T_1D + i) * T_1D + tx];
      r_z[k] = sum;
    }
  }
  __syncthreads();
  if (tx < IN && ty < OUT) {
#pragma unroll
    for (int k = 0; k < OUT; k++) buf[(k * T_1D + ty) * T_1D + tx] = r_z[k];
  }
  __syncthreads();
  if (tx < OUT && ty < OUT) {  // contract x
#pragma unroll
    for (int k = 0; k < OUT; k++) {
      double sum = 0.0;
#pragma unroll
      for (int i = 0; i < IN; i++) sum += Mx[tx * IN + i] * buf[(k * T_1D + ty) * T_1D + i];
      out[k] = sum;
    }
  }
  __syncthreads();
#endif
}

#ifdef BLOCKED
// Registers along the slowest axis: IN entries per column, two columns.
#define COLUMN(n) (2 * (n))
#else
// Registers along the slowest axis: IN entries (DIM = 1: one).
#define COLUMN(n) ((DIM) == 1 ? 1 : (n))
#endif

// Linear index of this thread's point k along the slowest axis, in an element array with
// SIDE_1D points per direction; valid when tx, ty < SIDE_1D (BLOCKED: point k % SIDE_1D of
// column k / SIDE_1D, at x = 2 tx + k / SIDE_1D).
template <int SIDE_1D>
__device__ __forceinline__ int column_index(int k, int tx, int ty) {
#if defined(BLOCKED)
  return ((k % SIDE_1D) * SIDE_1D + ty) * SIDE_1D + 2 * tx + k / SIDE_1D;
#elif DIM == 1
  return tx;
#elif DIM == 2
  return k * SIDE_1D + tx;
#else
  return (k * SIDE_1D + ty) * SIDE_1D + tx;
#endif
}

// Whether this thread holds a column of an element array with SIDE_1D points per direction
// (BLOCKED: its first column).
template <int SIDE_1D>
__device__ __forceinline__ bool owns_column(int tx, int ty) {
#ifdef BLOCKED
  return 2 * tx < SIDE_1D && ty < SIDE_1D;
#else
  return tx < SIDE_1D && (DIM < 3 || ty < SIDE_1D);
#endif
}

// Whether this thread's point k (of COLUMN(SIDE_1D)) is in an element array with SIDE_1D
// points per direction: owns_column, and for BLOCKED the point's column inside too.
template <int SIDE_1D>
__device__ __forceinline__ bool owns_point(int k, int tx, int ty) {
#ifdef BLOCKED
  return 2 * tx + k / SIDE_1D < SIDE_1D && ty < SIDE_1D;
#else
  return owns_column<SIDE_1D>(tx, ty);
#endif
}

// Load this thread's column of an element array with SIDE_1D points per direction
// (zeros where the thread holds no column or the element is inactive).
template <int SIDE_1D>
__device__ __forceinline__ void load_column(const double *__restrict__ src, bool active,
                                            int tx, int ty, double *r) {
#pragma unroll
  for (int k = 0; k < COLUMN(SIDE_1D); k++)
    r[k] = active && owns_point<SIDE_1D>(k, tx, ty) ? src[column_index<SIDE_1D>(k, tx, ty)] : 0.0;
}

template <int SIDE_1D>
__device__ __forceinline__ void store_column(double *__restrict__ dst, bool active, int tx, int ty,
                                             const double *r) {
  if (!active || !owns_column<SIDE_1D>(tx, ty)) return;
#pragma unroll
  for (int k = 0; k < COLUMN(SIDE_1D); k++)
    if (owns_point<SIDE_1D>(k, tx, ty)) dst[column_index<SIDE_1D>(k, tx, ty)] = r[k];
}

// Shared matrices and this block's element/thread coordinates.
#if DIM == 3
#define THREAD_SETUP                          \
  const int tx = threadIdx.x, ty = threadIdx.y; \
  const int slot = threadIdx.z;               \
  const int tid = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
#else
#define THREAD_SETUP                          \
  const int tx = threadIdx.x, ty = 0;         \
  const int slot = threadIdx.y;               \
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
#endif
#define NUM_THREADS (blockDim.x * blockDim.y * blockDim.z)

// body(elem, active) for each element of this thread's slot, grid-stride: every thread
// of the block runs the same number of iterations (active is false past num_elem), so
// the body may synchronize the block.
template <typename Body>
__device__ __forceinline__ void for_each_element(const int num_elem, const int slot, Body body) {
  for (index_t elem = (index_t)blockIdx.x * ELEMS_PER_BLOCK + slot; elem - slot < num_elem;
       elem += (index_t)gridDim.x * ELEMS_PER_BLOCK)
    body(elem, elem < num_elem);
}

// Copy the OUT x IN matrices (B, and G when given; SIZE entries each) to shared memory.
template <int SIZE = MAT_SIZE>
__device__ __forceinline__ void load_matrices(const double *__restrict__ B,
                                              const double *__restrict__ G, double *s_B,
                                              double *s_G, int tid) {
  for (int i = tid; i < SIZE; i += NUM_THREADS) {
    s_B[i] = B[i];
    if (G) s_G[i] = G[i];
  }
  __syncthreads();
}

// contract with the matrix M along every axis; S: M's copy read along the slowest axis
// (y in 2D, z in 3D), e.g. in constant memory.
template <int IN, int OUT>
__device__ __forceinline__ void contract_all(const double *M, const double *S, const double *in,
                                             double *out, double *buf, int tx, int ty) {
  contract<IN, OUT>(M, DIM == 2 ? S : M, S, in, out, buf, tx, ty);
}

// The (x, y, z) matrices of direction d of a gradient: G along x_d, B along the others,
// the slowest axis's from Sb, Sg.
#define GRAD_MATRICES(d, Mb, Mg, Sb, Sg)                                   \
  (d) == 0 ? (Mg) : (Mb),                                                  \
      DIM == 2 ? ((d) == 1 ? (Sg) : (Sb)) : ((d) == 1 ? (Mg) : (Mb)),       \
      (d) == 2 ? (Sg) : (Sb)

// out[d * COLUMN(OUT) + k], d < DIM: the reference gradient of one column, G along x_d
// and B along the other axes.  Mb, Mg: (OUT, IN) row-major in shared memory; Sb, Sg: their
// copies read along the slowest axis.
template <int IN, int OUT>
__device__ __forceinline__ void grad_column(const double *Mb, const double *Mg, const double *Sb,
                                            const double *Sg, const double *in, double *out,
                                            double *buf, int tx, int ty) {
#pragma unroll
  for (int d = 0; d < DIM; d++)
    contract<IN, OUT>(GRAD_MATRICES(d, Mb, Mg, Sb, Sg), in, out + d * COLUMN(OUT), buf, tx, ty);
}

// out = sum_d G_d^T in[d * COLUMN(IN) ...], the transpose of grad_column.
// Mb, Mg: the transposed 1D matrices, (OUT, IN) row-major in shared memory; Sb, Sg: as in
// grad_column.
template <int IN, int OUT>
__device__ __forceinline__ void grad_t_column(const double *Mb, const double *Mg,
                                              const double *Sb, const double *Sg,
                                              const double *in, double *out, double *buf,
                                              int tx, int ty) {
#pragma unroll
  for (int k = 0; k < COLUMN(OUT); k++) out[k] = 0.0;
#pragma unroll
  for (int d = 0; d < DIM; d++) {
    double r_d[COLUMN(OUT)];
    contract<IN, OUT>(GRAD_MATRICES(d, Mb, Mg, Sb, Sg), in + d * COLUMN(IN), r_d, buf, tx, ty);
#pragma unroll
    for (int k = 0; k < COLUMN(OUT); k++) out[k] += r_d[k];
  }
}

// Entry j of an index array, or j itself when idx is null (identity layout).
template <typename I>
__device__ __forceinline__ index_t entry(const I *__restrict__ idx, index_t j) {
  return idx ? (index_t)idx[j] : j;
}

// Gather this thread's column of one element's nodes from an L-vector: entry j of the
// element array is l[idx[base + j]], or l[base + j] when idx is null (identity layout).
template <int SIDE_1D, typename I>
__device__ __forceinline__ void gather_column(const double *__restrict__ l,
                                              const I *__restrict__ idx, index_t base,
                                              bool active, int tx, int ty, double *r) {
#pragma unroll
  for (int k = 0; k < COLUMN(SIDE_1D); k++) {
    const index_t j = base + column_index<SIDE_1D>(k, tx, ty);
    r[k] = active && owns_point<SIDE_1D>(k, tx, ty) ? l[entry(idx, j)] : 0.0;
  }
}

// All P^DIM nodes of one element in this thread (x fastest), for direct_columns.
template <int P, typename I>
__device__ __forceinline__ void gather_nodes(const double *__restrict__ l,
                                             const I *__restrict__ idx, index_t base,
                                             bool active, double *r) {
#pragma unroll
  for (int j = 0; j < POW_DIM(P); j++) r[j] = active ? l[entry(idx, base + j)] : 0.0;
}

// Direct evaluation of a field of few nodes (the vertex coordinates of straight-sided
// cells, P = 2, beside an order-p solution).  Each thread contracts all P^DIM nodes of the
// element (gather_nodes) along x (and y) to its columns along the slowest axis, then
// evaluates any point of its column from them (direct_at), in registers: no shared-memory
// passes, no block synchronization, and 3 P registers per component instead of the DIM
// blocks of COLUMN(Q_1D) values of a gradient.  Mb, Mg: (Q_1D, P) row-major.
// cols[0, P): B along x (and y); [P, 2P): G along x; [2P, 3P): G along y (3D).  1D: the
// nodes themselves (x is the slowest axis).
template <int P>
__device__ __forceinline__ void direct_columns(const double *Mb, const double *Mg,
                                               const double *nodes, double *cols, int tx,
                                               int ty) {
#if DIM == 1
#pragma unroll
  for (int c = 0; c < P; c++) cols[c] = nodes[c];
#else
  const int px = tx < Q_1D ? tx : 0;  // threads without a column evaluate row 0, unused
#if DIM == 3
  const int py = ty < Q_1D ? ty : 0;
#endif
#pragma unroll
  for (int c = 0; c < P; c++) {
    double sb = 0.0, sgx = 0.0, sgy = 0.0;
#pragma unroll
    for (int r = 0; r < (DIM == 3 ? P : 1); r++) {  // y rows of this slowest-axis row c
      double xb = 0.0, xg = 0.0;
#pragma unroll
      for (int a = 0; a < P; a++) {
        const double node = nodes[(DIM == 3 ? c * P + r : c) * P + a];
        xb += Mb[px * P + a] * node;
        xg += Mg[px * P + a] * node;
      }
#if DIM == 3
      sb += Mb[py * P + r] * xb;
      sgx += Mb[py * P + r] * xg;
      sgy += Mg[py * P + r] * xb;
#else
      sb = xb;
      sgx = xg;
#endif
    }
    cols[c] = sb;
    cols[P + c] = sgx;
    if (DIM == 3) cols[2 * P + c] = sgy;
  }
#endif
}

// The point of this thread's column at slowest-axis row k: its row of the 1D matrices.
__device__ __forceinline__ int direct_row(int k, int tx) {
  return DIM == 1 ? (tx < Q_1D ? tx : 0) : k;
}

// sum_c M[row, c] col[c]: a value (M = B, col = cols) or a derivative of direct_columns'.
template <int P>
__device__ __forceinline__ double direct_at(const double *M, const double *col, int row) {
  double sum = 0.0;
#pragma unroll
  for (int c = 0; c < P; c++) sum += M[row * P + c] * col[c];
  return sum;
}

// The transpose of gather_column: l[idx[base + j]] += r (atomically; shared nodes of
// neighbouring elements are summed).
template <int SIDE_1D, typename I>
__device__ __forceinline__ void scatter_column(double *l, const I *__restrict__ idx,
                                               index_t base, bool active, int tx, int ty,
                                               const double *r) {
  if (!active || !owns_column<SIDE_1D>(tx, ty)) return;
#pragma unroll
  for (int k = 0; k < COLUMN(SIDE_1D); k++) {
    if (!owns_point<SIDE_1D>(k, tx, ty)) continue;
    const index_t j = base + column_index<SIDE_1D>(k, tx, ty);
    atomicAdd(l + entry(idx, j), r[k]);
  }
}

// Where the collocated gradient routines put and get the DIM columns of derivatives:
// registers (blocks of COLUMN(Q_1D) values, as the fused operator kernels keep them)
// or an array in global memory, row d at dst + d * row_stride (the basis kernels).
struct RegisterColumns {
  double *r;
  __device__ __forceinline__ void put(int d, int k, double value) const {
    r[d * COLUMN(Q_1D) + k] = value;
  }
  __device__ __forceinline__ void get(int d, double *col) const {
#pragma unroll
    for (int k = 0; k < COLUMN(Q_1D); k++) col[k] = r[d * COLUMN(Q_1D) + k];
  }
};

template <typename T>  // double, or const double for reading only
struct GlobalColumns {
  T *ptr;  // row 0 of this element
  index_t row_stride;
  bool active;
  int tx, ty;
  __device__ __forceinline__ void put(int d, int k, double value) const {
    if (active && owns_column<Q_1D>(tx, ty))
      ptr[d * row_stride + column_index<Q_1D>(k, tx, ty)] = value;
  }
  __device__ __forceinline__ void get(int d, double *col) const {
    load_column<Q_1D>(ptr + d * row_stride, active, tx, ty, col);
  }
};

#ifndef BLOCKED  // basis_blocked.cuh has these two for its two columns
// Collocated gradient: out.put(d, k, .) = the derivative along x_d of a column of values
// at the quadrature points, D (Q_1D, Q_1D) row-major in shared memory (D B = G), Ds its
// copy read along the slowest axis.  The axes other than the slowest are read from buf
// (one pass), the slowest from registers.
template <typename Columns>
__device__ __forceinline__ void grad_collocated(const double *D, const double *Ds,
                                                const double *in, const Columns &out,
                                                double *buf, int tx, int ty) {
  const bool owns = owns_column<Q_1D>(tx, ty);
  if (owns) {
#pragma unroll
    for (int k = 0; k < COLUMN(Q_1D); k++) buf[column_index<T_1D>(k, tx, ty)] = in[k];
  }
  __syncthreads();
  if (owns) {
#pragma unroll
    for (int k = 0; k < COLUMN(Q_1D); k++) {
      double dx = 0.0, dy = 0.0, dslow = 0.0;
#pragma unroll
      for (int i = 0; i < Q_1D; i++) {
        dx += D[tx * Q_1D + i] * buf[column_index<T_1D>(k, i, ty)];
#if DIM == 3
        dy += D[ty * Q_1D + i] * buf[column_index<T_1D>(k, tx, i)];
#endif
#if DIM > 1
        dslow += Ds[k * Q_1D + i] * in[i];
#endif
      }
      out.put(0, k, dx);
#if DIM == 2
      out.put(1, k, dslow);
#elif DIM == 3
      out.put(1, k, dy);
      out.put(2, k, dslow);
#endif
    }
  }
  __syncthreads();
}

// The transpose of grad_collocated: out[k] = sum_d (D_d^T in_d)[k], in.get(d, col) giving
// direction d's column; one direction live at a time.  Ds: as in grad_collocated.
template <typename Columns>
__device__ __forceinline__ void grad_t_collocated(const double *D, const double *Ds,
                                                  const Columns &in, double *out, double *buf,
                                                  int tx, int ty) {
  const bool owns = owns_column<Q_1D>(tx, ty);
  double col[COLUMN(Q_1D)];
#pragma unroll
  for (int k = 0; k < COLUMN(Q_1D); k++) out[k] = 0.0;
#if DIM > 1
  in.get(DIM - 1, col);  // the slowest axis, in registers
#pragma unroll
  for (int k = 0; k < COLUMN(Q_1D); k++) {
#pragma unroll
    for (int i = 0; i < Q_1D; i++) out[k] += Ds[i * Q_1D + k] * col[i];
  }
#endif
#pragma unroll
  for (int d = 0; d < (DIM == 1 ? 1 : DIM - 1); d++) {  // x (and y in 3D) through buf
    in.get(d, col);
    if (owns) {
#pragma unroll
      for (int k = 0; k < COLUMN(Q_1D); k++) buf[column_index<T_1D>(k, tx, ty)] = col[k];
    }
    __syncthreads();
    if (owns) {
#pragma unroll
      for (int k = 0; k < COLUMN(Q_1D); k++) {
        double sum = 0.0;
#pragma unroll
        for (int i = 0; i < Q_1D; i++)
          sum += d == 0 ? D[i * Q_1D + tx] * buf[column_index<T_1D>(k, i, ty)]
                        : D[i * Q_1D + ty] * buf[column_index<T_1D>(k, tx, i)];
        out[k] += sum;
      }
    }
    __syncthreads();
  }
}
#endif  // BLOCKED
