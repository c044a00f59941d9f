// Tensor-product basis actions (interp, grad and their transposes), sum-factorized.
//
// One launch handles a batch of elements; each element is a set of small dense
// contractions with the constant 1D matrices, done in registers and shared memory:
// the thread owning a (x[, y]) position keeps the column along the slowest axis in
// registers, contracts that axis in registers, then the remaining axes through a
// shared-memory buffer laid out [slow][y][x].  Threads per element: T_1D^(DIM-1)
// (T_1D for DIM = 1); ELEMS_PER_BLOCK elements share a block (threadIdx.z or .y).
//
// Compile-time defines (all required):
//   DIM (1..3), NUM_COMP, P_1D, Q_1D, T_1D = max(P_1D, Q_1D), ELEMS_PER_BLOCK
//
// Layouts: the node side is (num_elem, NUM_COMP, P_1D^DIM) contiguous.  The point
// side is addressed as  e * q_elem_stride + (d * NUM_COMP + c) * q_comp_stride + q
// so one kernel writes either the basis layout (num_elem, [DIM,] NUM_COMP, Q) or the
// Q-vector layout ([DIM *] NUM_COMP, num_elem * Q) directly.  Offsets are 64-bit.

#ifndef DIM
#error "DIM must be defined"
#endif

#define POW_DIM(n) ((DIM) == 1 ? (n) : (DIM) == 2 ? (n) * (n) : (n) * (n) * (n))
#define NUM_NODES POW_DIM(P_1D)
#define NUM_QPTS POW_DIM(Q_1D)
#define BUF_SIZE POW_DIM(T_1D)
#define MAT_SIZE (P_1D * Q_1D)

typedef long long index_t;

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

// Registers along the slowest axis: IN entries (DIM = 1: one).
#define COLUMN(n) ((DIM) == 1 ? 1 : (n))

// Load this thread's column of an element array with SIDE_1D points per direction.
template <int SIDE_1D>
__device__ __forceinline__ void load_column(const double *__restrict__ src, bool active,
                                            int tx, int ty, double *r) {
#if DIM == 1
  r[0] = (active && tx < SIDE_1D) ? src[tx] : 0.0;
#elif DIM == 2
#pragma unroll
  for (int k = 0; k < SIDE_1D; k++) r[k] = (active && tx < SIDE_1D) ? src[k * SIDE_1D + tx] : 0.0;
#else
#pragma unroll
  for (int k = 0; k < SIDE_1D; k++)
    r[k] = (active && tx < SIDE_1D && ty < SIDE_1D) ? src[(k * SIDE_1D + ty) * SIDE_1D + tx] : 0.0;
#endif
}

template <int SIDE_1D>
__device__ __forceinline__ void store_column(double *__restrict__ dst, bool active, int tx, int ty,
                                             const double *r) {
  if (!active || tx >= SIDE_1D || (DIM == 3 && ty >= SIDE_1D)) return;
#if DIM == 1
  dst[tx] = r[0];
#elif DIM == 2
#pragma unroll
  for (int k = 0; k < SIDE_1D; k++) dst[k * SIDE_1D + tx] = r[k];
#else
#pragma unroll
  for (int k = 0; k < SIDE_1D; k++) dst[(k * SIDE_1D + ty) * SIDE_1D + tx] = r[k];
#endif
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

// Copy the OUT x IN matrices (B, and G when given) to shared memory.
__device__ __forceinline__ void load_matrices(const double *__restrict__ B,
                                              const double *__restrict__ G, double *s_B,
                                              double *s_G, int tid) {
  for (int i = tid; i < MAT_SIZE; i += NUM_THREADS) {
    s_B[i] = B[i];
    if (G) s_G[i] = G[i];
  }
  __syncthreads();
}

// v = B u per component. B: (Q_1D, P_1D) row-major.
extern "C" __global__ void interp(const int num_elem, const double *__restrict__ B,
                                  const double *__restrict__ u, double *__restrict__ v,
                                  const index_t q_elem_stride, const index_t q_comp_stride) {
  __shared__ double s_B[MAT_SIZE];
  __shared__ double s_buf[ELEMS_PER_BLOCK * BUF_SIZE];
  THREAD_SETUP
  load_matrices(B, nullptr, s_B, nullptr, tid);
  double *buf = s_buf + slot * BUF_SIZE;
  for (index_t elem = (index_t)blockIdx.x * ELEMS_PER_BLOCK + slot;
       elem - slot < num_elem; elem += (index_t)gridDim.x * ELEMS_PER_BLOCK) {
    const bool active = elem < num_elem;
    for (int c = 0; c < NUM_COMP; c++) {
      double r_in[COLUMN(P_1D)], r_out[COLUMN(Q_1D)];
      load_column<P_1D>(u + (elem * NUM_COMP + c) * NUM_NODES, active, tx, ty, r_in);
      contract<P_1D, Q_1D>(s_B, s_B, s_B, r_in, r_out, buf, tx, ty);
      store_column<Q_1D>(v + elem * q_elem_stride + c * q_comp_stride, active, tx, ty, r_out);
    }
  }
}

// u = B^T v per component. Bt: (P_1D, Q_1D) row-major (the transpose, given).
extern "C" __global__ void interp_t(const int num_elem, const double *__restrict__ Bt,
                                    const double *__restrict__ v, double *__restrict__ u,
                                    const index_t q_elem_stride, const index_t q_comp_stride) {
  __shared__ double s_B[MAT_SIZE];
  __shared__ double s_buf[ELEMS_PER_BLOCK * BUF_SIZE];
  THREAD_SETUP
  load_matrices(Bt, nullptr, s_B, nullptr, tid);
  double *buf = s_buf + slot * BUF_SIZE;
  for (index_t elem = (index_t)blockIdx.x * ELEMS_PER_BLOCK + slot;
       elem - slot < num_elem; elem += (index_t)gridDim.x * ELEMS_PER_BLOCK) {
    const bool active = elem < num_elem;
    for (int c = 0; c < NUM_COMP; c++) {
      double r_in[COLUMN(Q_1D)], r_out[COLUMN(P_1D)];
      load_column<Q_1D>(v + elem * q_elem_stride + c * q_comp_stride, active, tx, ty, r_in);
      contract<Q_1D, P_1D>(s_B, s_B, s_B, r_in, r_out, buf, tx, ty);
      store_column<P_1D>(u + (elem * NUM_COMP + c) * NUM_NODES, active, tx, ty, r_out);
    }
  }
}

// Reference-space gradient: component (d, c) applies G along x_d and B along the others.
extern "C" __global__ void grad(const int num_elem, const double *__restrict__ B,
                                const double *__restrict__ G, const double *__restrict__ u,
                                double *__restrict__ v, const index_t q_elem_stride,
                                const index_t q_comp_stride) {
  __shared__ double s_B[MAT_SIZE];
  __shared__ double s_G[MAT_SIZE];
  __shared__ double s_buf[ELEMS_PER_BLOCK * BUF_SIZE];
  THREAD_SETUP
  load_matrices(B, G, s_B, s_G, tid);
  double *buf = s_buf + slot * BUF_SIZE;
  for (index_t elem = (index_t)blockIdx.x * ELEMS_PER_BLOCK + slot;
       elem - slot < num_elem; elem += (index_t)gridDim.x * ELEMS_PER_BLOCK) {
    const bool active = elem < num_elem;
    for (int c = 0; c < NUM_COMP; c++) {
      double r_in[COLUMN(P_1D)], r_out[COLUMN(Q_1D)];
      load_column<P_1D>(u + (elem * NUM_COMP + c) * NUM_NODES, active, tx, ty, r_in);
#pragma unroll
      for (int d = 0; d < DIM; d++) {
        contract<P_1D, Q_1D>(d == 0 ? s_G : s_B, d == 1 ? s_G : s_B, d == 2 ? s_G : s_B, r_in,
                             r_out, buf, tx, ty);
        store_column<Q_1D>(v + elem * q_elem_stride + (d * NUM_COMP + c) * q_comp_stride, active,
                           tx, ty, r_out);
      }
    }
  }
}

// u = sum_d G_d^T v_d, the transpose of grad. Bt, Gt: (P_1D, Q_1D) row-major.
extern "C" __global__ void grad_t(const int num_elem, const double *__restrict__ Bt,
                                  const double *__restrict__ Gt, const double *__restrict__ v,
                                  double *__restrict__ u, const index_t q_elem_stride,
                                  const index_t q_comp_stride) {
  __shared__ double s_B[MAT_SIZE];
  __shared__ double s_G[MAT_SIZE];
  __shared__ double s_buf[ELEMS_PER_BLOCK * BUF_SIZE];
  THREAD_SETUP
  load_matrices(Bt, Gt, s_B, s_G, tid);
  double *buf = s_buf + slot * BUF_SIZE;
  for (index_t elem = (index_t)blockIdx.x * ELEMS_PER_BLOCK + slot;
       elem - slot < num_elem; elem += (index_t)gridDim.x * ELEMS_PER_BLOCK) {
    const bool active = elem < num_elem;
    for (int c = 0; c < NUM_COMP; c++) {
      double r_sum[COLUMN(P_1D)];
#pragma unroll
      for (int k = 0; k < COLUMN(P_1D); k++) r_sum[k] = 0.0;
#pragma unroll
      for (int d = 0; d < DIM; d++) {
        double r_in[COLUMN(Q_1D)], r_out[COLUMN(P_1D)];
        load_column<Q_1D>(v + elem * q_elem_stride + (d * NUM_COMP + c) * q_comp_stride, active,
                          tx, ty, r_in);
        contract<Q_1D, P_1D>(d == 0 ? s_G : s_B, d == 1 ? s_G : s_B, d == 2 ? s_G : s_B, r_in,
                             r_out, buf, tx, ty);
#pragma unroll
        for (int k = 0; k < COLUMN(P_1D); k++) r_sum[k] += r_out[k];
      }
      store_column<P_1D>(u + (elem * NUM_COMP + c) * NUM_NODES, active, tx, ty, r_sum);
    }
  }
}
