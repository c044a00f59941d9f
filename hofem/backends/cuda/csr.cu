// y = A x for a CSR matrix of int32 indices and float64 entries: the AMG levels' sparse
// products (vector_ops.CupyVectorOps.csr_matvec), one launch without the per-call descriptor,
// buffer query and allocation of a library SpMV.
//
// A group of `lanes` consecutive lanes (a power of two, at most 32) takes one row: each lane
// sums every lanes-th entry of the row, then a butterfly of xor shuffles adds the lanes'
// sums.  A warp holds 32 / lanes groups and loops over its rows with the warp's first row,
// so that every lane of a warp shuffles the same number of times (a full mask is valid) even
// where the last rows run out.  Launch with a multiple of 32 threads per block.
extern "C" __global__ void csr_matvec(const int num_rows, const int lanes,
                                      const int *__restrict__ indptr,
                                      const int *__restrict__ indices,
                                      const double *__restrict__ data,
                                      const double *__restrict__ x, double *__restrict__ y) {
  const long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x % lanes;
  const int groups_per_warp = 32 / lanes;
  const long long warp_first = thread / 32 * groups_per_warp;  // the warp's first row
  const long long stride = (long long)gridDim.x * blockDim.x / lanes;  // groups in the grid
  const int group = threadIdx.x % 32 / lanes;  // the group's row within its warp's rows
  for (long long first = warp_first; first < num_rows; first += stride) {
    const long long row = first + group;
    double sum = 0.0;
    if (row < num_rows) {
      const int end = indptr[row + 1];
      for (int j = indptr[row] + lane; j < end; j += lanes) sum += data[j] * x[indices[j]];
    }
    for (int offset = lanes / 2; offset > 0; offset /= 2) {
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    }
    if (lane == 0 && row < num_rows) y[row] = sum;
  }
}
