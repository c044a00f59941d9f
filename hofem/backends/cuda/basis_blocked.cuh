// The slab's 3D stages register-blocked over two x-adjacent columns (BLOCKED, included by
// basis_tensor.cuh; operator_blocked.py says why and counts the loads).
//
// Thread (tx, ty) of an element owns the columns x = 2 tx, 2 tx + 1 at y = ty: half the
// slab's threads, each with twice its registers along the slowest axis (column c at
// entries [c n, (c + 1) n) of an array of COLUMN(n) = 2 n).  The element's buffer is laid out
// [slow][y][x] with rows of ROW_1D (even) entries, so that a thread's two columns are one
// 16-byte pair.  Through the buffer:
// - along y (the column reads): one pair load gives both columns' operands, each
//   multiplied by the thread's one matrix entry: one load per two multiply-adds;
// - along x (the row reads): one pair load gives two operands along the row, each
//   multiplied by both columns' matrix rows: one load per four multiply-adds;
// - along the slowest axis (registers): one matrix entry per two multiply-adds, where it is
//   read from shared memory.
// The thread's matrix rows are read into registers once per stage.  A column past the
// element's size (x = 2 tx + 1 = T_1D for odd T_1D, or past the stage's output) is computed
// from the padding entry of the pair and never stored or scattered.
#pragma once

#if DIM != 3
#error "BLOCKED needs DIM = 3"
#endif

#define ROW_1D (2 * ((T_1D + 1) / 2))  // buffer row stride: even, for 16-byte pairs
#define BLOCKED_INDEX(k, y, x) (((k) * T_1D + (y)) * ROW_1D + (x))

__device__ __forceinline__ double2 load_pair(const double *buf, int index) {
  return *reinterpret_cast<const double2 *>(buf + index);
}

__device__ __forceinline__ void store_pair(double *buf, int index, double a, double b) {
  *reinterpret_cast<double2 *>(buf + index) = make_double2(a, b);
}

// Entry (row, i) of a matrix at M[row * RS + i * CS]: RS = N, CS = 1 for an (rows, N)
// row-major matrix, RS = 1, CS = its row length for the transpose of one.
//
// The slowest axis of both columns: out[c * OUT + k] = sum_i M(k, i) in[c * IN + i].
template <int IN, int OUT, int RS, int CS>
__device__ __forceinline__ void contract_pair_registers(const double *M, const double *in,
                                                        double *out) {
#pragma unroll
  for (int k = 0; k < OUT; k++) {
    double s0 = 0.0, s1 = 0.0;
#pragma unroll
    for (int i = 0; i < IN; i++) {
      const double m = M[k * RS + i * CS];
      s0 += m * in[i];
      s1 += m * in[IN + i];
    }
    out[k] = s0;
    out[OUT + k] = s1;
  }
}

// Along y: out[c * K + k] = sum_i M(row, i) buf(k, i, 2 tx + c), k < K, i < N (ADD: +=).
template <int N, int K, int RS, int CS, bool ADD = false>
__device__ __forceinline__ void contract_pair_columns(const double *M, int row, const double *buf,
                                                      int tx, double *out) {
  double m[N];
#pragma unroll
  for (int i = 0; i < N; i++) m[i] = M[row * RS + i * CS];
#pragma unroll
  for (int k = 0; k < K; k++) {
    double s0 = ADD ? out[k] : 0.0, s1 = ADD ? out[K + k] : 0.0;
#pragma unroll
    for (int i = 0; i < N; i++) {
      const double2 v = load_pair(buf, BLOCKED_INDEX(k, i, 2 * tx));
      s0 += m[i] * v.x;
      s1 += m[i] * v.y;
    }
    out[k] = s0;
    out[K + k] = s1;
  }
}

// Along x: out[c * K + k] = sum_i M(row_c, i) buf(k, y, i), k < K, i < N, for the rows
// row_0, row_1 of the thread's two columns (ADD: +=).
template <int N, int K, int RS, int CS, bool ADD = false>
__device__ __forceinline__ void contract_pair_rows(const double *M, int row0, int row1,
                                                   const double *buf, int y, double *out) {
  double m0[N], m1[N];
#pragma unroll
  for (int i = 0; i < N; i++) {
    m0[i] = M[row0 * RS + i * CS];
    m1[i] = M[row1 * RS + i * CS];
  }
#pragma unroll
  for (int k = 0; k < K; k++) {
    double s0 = ADD ? out[k] : 0.0, s1 = ADD ? out[K + k] : 0.0;
#pragma unroll
    for (int i = 0; i + 1 < N; i += 2) {
      const double2 v = load_pair(buf, BLOCKED_INDEX(k, y, i));
      s0 += m0[i] * v.x + m0[i + 1] * v.y;
      s1 += m1[i] * v.x + m1[i + 1] * v.y;
    }
    if (N % 2) {
      const double v = buf[BLOCKED_INDEX(k, y, N - 1)];
      s0 += m0[N - 1] * v;
      s1 += m1[N - 1] * v;
    }
    out[k] = s0;
    out[K + k] = s1;
  }
}

// Both columns' K levels into the buffer at row y: r[c * K + k] -> buf(k, y, 2 tx + c).
template <int K>
__device__ __forceinline__ void store_pair_levels(double *buf, const double *r, int tx, int y) {
#pragma unroll
  for (int k = 0; k < K; k++) store_pair(buf, BLOCKED_INDEX(k, y, 2 * tx), r[k], r[K + k]);
}

// basis_tensor.cuh's contract (3D) for the thread's two columns: in[c * IN ...] to
// out[c * OUT ...] with Mx, My, Mz (OUT, IN) row-major.
template <int IN, int OUT>
__device__ __forceinline__ void contract_blocked(const double *Mx, const double *My,
                                                 const double *Mz, const double *in,
                                                 double *out, double *buf, int tx, int ty) {
  double r_z[2 * OUT];  // (2, OUT_z) at (y, x) = (ty, 2 tx + c), input side in x and y
  contract_pair_registers<IN, OUT, IN, 1>(Mz, in, r_z);
  if (2 * tx < IN && ty < IN) store_pair_levels<OUT>(buf, r_z, tx, ty);
  __syncthreads();
  if (2 * tx < IN && ty < OUT) contract_pair_columns<IN, OUT, IN, 1>(My, ty, buf, tx, r_z);
  __syncthreads();
  if (2 * tx < IN && ty < OUT) store_pair_levels<OUT>(buf, r_z, tx, ty);
  __syncthreads();
  if (2 * tx < OUT && ty < OUT) {
    const int row1 = 2 * tx + 1 < OUT ? 2 * tx + 1 : OUT - 1;  // past OUT: never stored
    contract_pair_rows<IN, OUT, IN, 1>(Mx, 2 * tx, row1, buf, ty, out);
  }
  __syncthreads();
}

// basis_tensor.cuh's grad_collocated for the thread's two columns of values in[c * Q_1D ...]
// at the points: out.put(d, c * Q_1D + k, .).  D (Q_1D, Q_1D) row-major; Ds its copy read
// along the slowest axis.
template <typename Columns>
__device__ __forceinline__ void grad_collocated(const double *D, const double *Ds,
                                                const double *in, const Columns &out,
                                                double *buf, int tx, int ty) {
  const bool owns = 2 * tx < Q_1D && ty < Q_1D;
  if (owns) store_pair_levels<Q_1D>(buf, in, tx, ty);
  __syncthreads();
  if (owns) {
    const int row1 = 2 * tx + 1 < Q_1D ? 2 * tx + 1 : Q_1D - 1;
    double d[2 * Q_1D];
    contract_pair_rows<Q_1D, Q_1D, Q_1D, 1>(D, 2 * tx, row1, buf, ty, d);
#pragma unroll
    for (int j = 0; j < 2 * Q_1D; j++) out.put(0, j, d[j]);
    contract_pair_columns<Q_1D, Q_1D, Q_1D, 1>(D, ty, buf, tx, d);
#pragma unroll
    for (int j = 0; j < 2 * Q_1D; j++) out.put(1, j, d[j]);
    contract_pair_registers<Q_1D, Q_1D, Q_1D, 1>(Ds, in, d);
#pragma unroll
    for (int j = 0; j < 2 * Q_1D; j++) out.put(2, j, d[j]);
  }
  __syncthreads();
}

// basis_tensor.cuh's grad_t_collocated for the thread's two columns: out[c * Q_1D + k] =
// sum_d (D_d^T in_d), in.get(d, col) giving direction d's two columns.
template <typename Columns>
__device__ __forceinline__ void grad_t_collocated(const double *D, const double *Ds,
                                                  const Columns &in, double *out, double *buf,
                                                  int tx, int ty) {
  const bool owns = 2 * tx < Q_1D && ty < Q_1D;
  const int row1 = 2 * tx + 1 < Q_1D ? 2 * tx + 1 : Q_1D - 1;
  double col[2 * Q_1D];
  in.get(2, col);  // the slowest axis, in registers: D^T's entry (k, i) is D[i * Q_1D + k]
  contract_pair_registers<Q_1D, Q_1D, 1, Q_1D>(Ds, col, out);
#pragma unroll
  for (int d = 0; d < 2; d++) {  // x, then y, through buf
    in.get(d, col);
    if (owns) store_pair_levels<Q_1D>(buf, col, tx, ty);
    __syncthreads();
    if (owns && d == 0) contract_pair_rows<Q_1D, Q_1D, 1, Q_1D, true>(D, 2 * tx, row1, buf, ty, out);
    if (owns && d == 1) contract_pair_columns<Q_1D, Q_1D, 1, Q_1D, true>(D, ty, buf, tx, out);
    __syncthreads();
  }
}
