// Runs a generated CUDA kernel on the host, for tests without a GPU (test_23_simplex_gen.py,
// test_24_warp_gen.py, test_25_blocked_gen.py, test_28_tile_gen.py, test_29_tile_grad_gen.py).
//
// Each CUDA thread of a block is a std::thread (a block of up to three dimensions, x
// fastest; warps are 32 consecutive threads of that order); __syncthreads() is a std::barrier over the
// block's threads; __shared__ arrays are function statics, shared by the block's threads
// (blocks run one after another); atomicAdd takes a lock.  A kernel whose stages are loops
// over the block's threads between barriers computes here what it computes on a device.
// The fp64 tensor-core tile (mma.cuh's mma_m8n8k4) is emulated per warp of 32 threads
// (a std::barrier per warp around an exchange of the lanes' operands), a named barrier
// (tile_element.cuh's tile_bar_sync) is a std::barrier made by its first thread, and dynamic
// shared memory (simplex_mma.cuh's SIMPLEX_MMA_SHARED, tile_element.cuh's TILE_SHARED) is
// one buffer, filled with NaN before each block so that a read of an entry no stage wrote
// shows in the result.
// Included before the kernel source (g++ -include), C++20.
#pragma once

#include <algorithm>
#include <barrier>
#include <cmath>
#include <limits>
#include <math.h>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

struct shim_dim3 {
  unsigned x = 0, y = 0, z = 0;
};

inline thread_local shim_dim3 threadIdx;
inline thread_local int shim_tid;  // the thread's linear index in its block
inline shim_dim3 blockIdx, blockDim, gridDim;
inline std::barrier<> *shim_block_barrier = nullptr;
inline std::mutex shim_atomic_lock;

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __constant__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

struct double2 {
  double x, y;
};
inline double2 make_double2(double x, double y) { return {x, y}; }

inline void __syncthreads() { shim_block_barrier->arrive_and_wait(); }

// one warp's operands of an mma: lane l's a and b, read by every lane between two barriers
struct shim_warp {
  std::unique_ptr<std::barrier<>> barrier;
  double a[32], b[32];
};
inline std::vector<shim_warp> shim_warps;
inline std::vector<double> shim_dynamic_shared;

#define HOFEM_HOST_MMA
// mma.cuh's tile: c[g][2 t + i] += sum_k a[g][k] b[k][2 t + i], lane l = 4 g + t holding
// a[l / 4][l % 4] and b[l % 4][l / 4]; every lane of a full warp must call it
inline void mma_m8n8k4(double &c0, double &c1, double a, double b) {
  const int lane = shim_tid % 32, g = lane / 4, t = lane % 4;
  shim_warp &warp = shim_warps[shim_tid / 32];
  warp.a[lane] = a;
  warp.b[lane] = b;
  warp.barrier->arrive_and_wait();
  double *c[2] = {&c0, &c1};
  double sum[2] = {c0, c1};
  for (int i = 0; i < 2; i++) {
    for (int k = 0; k < 4; k++) sum[i] += warp.a[4 * g + k] * warp.b[4 * (2 * t + i) + k];
  }
  warp.barrier->arrive_and_wait();  // every lane has read before the next call writes
  *c[0] = sum[0];
  *c[1] = sum[1];
}

#define HOFEM_HOST_BAR_SYNC
// tile_element.cuh's named barrier (bar.sync id, threads): the first thread to reach barrier
// id makes it for `threads` threads; shim_launch clears them before each block
inline std::unique_ptr<std::barrier<>> shim_named_barriers[16];
inline std::mutex shim_named_lock;
inline void tile_bar_sync(int id, int threads) {
  std::barrier<> *barrier;
  {
    std::lock_guard<std::mutex> lock(shim_named_lock);
    if (!shim_named_barriers[id]) shim_named_barriers[id] = std::make_unique<std::barrier<>>(threads);
    barrier = shim_named_barriers[id].get();
  }
  barrier->arrive_and_wait();
}

#define SIMPLEX_MMA_SHARED(name) double *name = shim_dynamic_shared.data()
#define TILE_SHARED(name) double *name = shim_dynamic_shared.data()  // tile_element.cuh's

inline double atomicAdd(double *address, double value) {
  std::lock_guard<std::mutex> lock(shim_atomic_lock);
  const double old = *address;
  *address = old + value;
  return old;
}

// kernel(): the kernel called with its arguments, on grid x (shape.x, shape.y, shape.z)
// threads, with shared_bytes of dynamic shared memory.
template <class Kernel>
void shim_launch(int grid, shim_dim3 shape, Kernel kernel, long shared_bytes = 0) {
  const int block = shape.x * shape.y * shape.z;
  std::barrier<> barrier(block);
  shim_block_barrier = &barrier;
  gridDim.x = grid;
  blockDim = shape;
  shim_warps = std::vector<shim_warp>((block + 31) / 32);
  for (int w = 0; w < (int)shim_warps.size(); w++) {  // a partial last warp: its threads
    const int lanes = w < block / 32 ? 32 : block % 32;
    shim_warps[w].barrier = std::make_unique<std::barrier<>>(lanes);
  }
  shim_dynamic_shared.resize(shared_bytes / sizeof(double));
  for (int b = 0; b < grid; b++) {
    blockIdx.x = b;
    for (auto &named : shim_named_barriers) named.reset();
    std::fill(shim_dynamic_shared.begin(), shim_dynamic_shared.end(),
              std::numeric_limits<double>::quiet_NaN());
    std::vector<std::thread> threads;
    for (int t = 0; t < block; t++) threads.emplace_back([&kernel, t, shape] {
        shim_tid = t;
        threadIdx = {t % shape.x, t / shape.x % shape.y, t / (shape.x * shape.y)};
        kernel();
      });
    for (auto &thread : threads) thread.join();
  }
  shim_block_barrier = nullptr;
}

// ... on grid x block threads of one dimension
template <class Kernel>
void shim_launch(int grid, int block, Kernel kernel, long shared_bytes = 0) {
  shim_launch(grid, shim_dim3{(unsigned)block, 1, 1}, kernel, shared_bytes);
}

// The warp-level intrinsics of the one-warp-per-element kernels (warp_element.cuh):
// __syncwarp() is the warp's barrier, and a shuffle writes each lane's value into the warp's
// exchange (the mma operands' array) between two barriers, as mma_m8n8k4 does; every lane of
// a full warp must call them, with the full mask.
inline void __syncwarp(unsigned = 0xffffffffu) {
  shim_warps[shim_tid / 32].barrier->arrive_and_wait();
}

inline double shim_shuffle(double value, int src_lane) {
  shim_warp &warp = shim_warps[shim_tid / 32];
  warp.a[shim_tid % 32] = value;
  warp.barrier->arrive_and_wait();
  const double out = warp.a[src_lane % 32];
  warp.barrier->arrive_and_wait();  // every lane has read before the next exchange writes
  return out;
}
inline double __shfl_sync(unsigned, double value, int src_lane, int = 32) {
  return shim_shuffle(value, src_lane);
}
inline double __shfl_xor_sync(unsigned, double value, int mask, int = 32) {
  return shim_shuffle(value, (shim_tid % 32) ^ mask);
}

// CUDA's min of mixed integer types (the kernels' min(index_t, int))
template <class A, class B>
inline std::common_type_t<A, B> min(A a, B b) {
  return a < b ? a : b;
}
