// Element restriction G: gather (L -> E) and its transpose (E -> L, summing shared nodes).
//
// Compile-time defines:
//   INDEX_T  index type of the indices and of every loop counter (int or long long):
//            int when every E-vector index and L-vector index fits in 31 bits.
//
// indices: (e_size,) L-vector index of every E-vector entry, E-vector order
// (num_elem, num_comp, elem_size).  Kernels use grid-stride loops.

#ifndef INDEX_T
#error "INDEX_T must be defined (int or long long)"
#endif

typedef INDEX_T index_t;

// e[i] = u[indices[i]]
extern "C" __global__ void gather(const index_t e_size, const index_t *__restrict__ indices,
                                  const double *__restrict__ u, double *__restrict__ e) {
  for (index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x; i < e_size;
       i += (index_t)gridDim.x * blockDim.x)
    e[i] = u[indices[i]];
}

// v[indices[i]] += e[i], with atomics
extern "C" __global__ void scatter_atomic(const index_t e_size,
                                          const index_t *__restrict__ indices,
                                          const double *__restrict__ e, double *__restrict__ v) {
  for (index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x; i < e_size;
       i += (index_t)gridDim.x * blockDim.x)
    atomicAdd(v + indices[i], e[i]);
}

// v[t_nodes[j]] += sum of e[t_entries[k]] for k in [t_offsets[j], t_offsets[j + 1]): the
// transpose map (CSR from the touched L-vector entries to the E-vector entries that read
// them), one thread per touched L-vector entry, no atomics.
extern "C" __global__ void scatter_map(const index_t num_nodes, const index_t *__restrict__ t_nodes,
                                       const index_t *__restrict__ t_offsets,
                                       const index_t *__restrict__ t_entries,
                                       const double *__restrict__ e, double *__restrict__ v) {
  for (index_t j = (index_t)blockIdx.x * blockDim.x + threadIdx.x; j < num_nodes;
       j += (index_t)gridDim.x * blockDim.x) {
    double sum = 0.0;
    for (index_t k = t_offsets[j]; k < t_offsets[j + 1]; k++) sum += e[t_entries[k]];
    v[t_nodes[j]] += sum;
  }
}
