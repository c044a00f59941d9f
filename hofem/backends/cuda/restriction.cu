// Element restriction G: gather (L -> E) and its transpose (E -> L, summing shared nodes).
//
// Compile-time defines:
//   INDEX_T  type of the stored L-vector indices (int or long long): int when every
//            L-vector index fits in 31 bits. Element, entry and loop counters are 64-bit,
//            so E-vectors past 2^31 entries are addressed with int offsets too.
//
// offsets: (num_elem * elem_size,) L-vector index of component 0 of every element node
// (libCEED's compact form); component c of that node is at offsets[...] + c * comp_stride.
// E-vectors are (num_elem, num_comp, elem_size). The gather and atomic scatter give each
// thread one element node i = elem * elem_size + node (grid-stride, consecutive threads on
// consecutive nodes, so a block spans elements) and loop over the components.

#ifndef INDEX_T
#error "INDEX_T must be defined (int or long long)"
#endif

typedef INDEX_T index_t;
typedef long long count_t;

// Calls body(i, entry) for the element nodes i of this thread, grid-stride; entry is the
// E-vector entry of component 0 of node i.
template <typename Body>
__device__ __forceinline__ void for_each_node(const count_t num_nodes, const int elem_size,
                                              const int num_comp, Body body) {
  for (count_t i = (count_t)blockIdx.x * blockDim.x + threadIdx.x; i < num_nodes;
       i += (count_t)gridDim.x * blockDim.x)
    body(i, num_comp == 1 ? i : i + (i / elem_size) * (num_comp - 1) * elem_size);
}

// e[elem, c, node] = u[offsets[elem, node] + c * comp_stride]
extern "C" __global__ void gather(const count_t num_nodes, const int elem_size, const int num_comp,
                                  const count_t comp_stride, const index_t *__restrict__ offsets,
                                  const double *__restrict__ u, double *__restrict__ e) {
  for_each_node(num_nodes, elem_size, num_comp, [&](count_t i, count_t entry) {
    const count_t l = offsets[i];
    for (int c = 0; c < num_comp; c++) e[entry + c * elem_size] = u[l + c * comp_stride];
  });
}

// v[offsets[elem, node] + c * comp_stride] += e[elem, c, node], with atomics
extern "C" __global__ void scatter_atomic(const count_t num_nodes, const int elem_size,
                                          const int num_comp, const count_t comp_stride,
                                          const index_t *__restrict__ offsets,
                                          const double *__restrict__ e, double *__restrict__ v) {
  for_each_node(num_nodes, elem_size, num_comp, [&](count_t i, count_t entry) {
    const count_t l = offsets[i];
    for (int c = 0; c < num_comp; c++)
      atomicAdd(v + l + c * comp_stride, e[entry + c * elem_size]);
  });
}

// v[t_nodes[j]] += sum of e[t_entries[k]] for k in [t_offsets[j], t_offsets[j + 1]): the
// transpose map (CSR from the touched L-vector entries to the E-vector entries that read
// them), one thread per touched L-vector entry, no atomics. Its arrays hold E-vector
// entries, so they are index_t only when the E-vector fits in 31 bits (the module is
// compiled with INDEX_T of the E-vector's size for this kernel).
extern "C" __global__ void scatter_map(const count_t num_nodes, const index_t *__restrict__ t_nodes,
                                       const index_t *__restrict__ t_offsets,
                                       const index_t *__restrict__ t_entries,
                                       const double *__restrict__ e, double *__restrict__ v) {
  for (count_t j = (count_t)blockIdx.x * blockDim.x + threadIdx.x; j < num_nodes;
       j += (count_t)gridDim.x * blockDim.x) {
    double sum = 0.0;
    for (count_t k = t_offsets[j]; k < t_offsets[j + 1]; k++) sum += e[t_entries[k]];
    v[t_nodes[j]] += sum;
  }
}
