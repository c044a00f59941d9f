// Runs a generated CUDA kernel on the host, for tests without a GPU (test_23_simplex_gen.py).
//
// Each CUDA thread of a block is a std::thread; __syncthreads() is a std::barrier over the
// block's threads; __shared__ arrays are function statics, shared by the block's threads
// (blocks run one after another); atomicAdd takes a lock.  A kernel whose stages are loops
// over the block's threads between barriers computes here what it computes on a device.
// Included before the kernel source (g++ -include), C++20.
#pragma once

#include <barrier>
#include <cmath>
#include <math.h>
#include <mutex>
#include <thread>
#include <vector>

struct shim_dim3 {
  unsigned x = 0, y = 0, z = 0;
};

inline thread_local shim_dim3 threadIdx;
inline shim_dim3 blockIdx, blockDim, gridDim;
inline std::barrier<> *shim_block_barrier = nullptr;
inline std::mutex shim_atomic_lock;

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __constant__
#define __launch_bounds__(...)

inline void __syncthreads() { shim_block_barrier->arrive_and_wait(); }

inline double atomicAdd(double *address, double value) {
  std::lock_guard<std::mutex> lock(shim_atomic_lock);
  const double old = *address;
  *address = old + value;
  return old;
}

// kernel(): the kernel called with its arguments, on grid x block threads.
template <class Kernel>
void shim_launch(int grid, int block, Kernel kernel) {
  std::barrier<> barrier(block);
  shim_block_barrier = &barrier;
  gridDim.x = grid;
  blockDim.x = block;
  for (int b = 0; b < grid; b++) {
    blockIdx.x = b;
    std::vector<std::thread> threads;
    for (int t = 0; t < block; t++) threads.emplace_back([&kernel, t] {
        threadIdx.x = t;
        kernel();
      });
    for (auto &thread : threads) thread.join();
  }
  shim_block_barrier = nullptr;
}
