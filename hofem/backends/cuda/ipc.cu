// The device side of hofem.parallel.ipc.IpcChannel: a halo written by the neighbours'
// copy engines straight into this GPU's memory, and the flags that say it arrived.
//
// Every rank numbers a channel's rounds alike: ipc_next_round adds one to the channel's
// counter at each start.  After its data copies, a sender copies its counter into its
// slot of the receiver's flags (int64, one slot per sender); the copies of one stream
// run one after the other, so a flag that shows round k follows round k's data.
// ipc_wait_flags holds the receiver's stream until every slot shows the receiver's own
// round.  Nothing here touches another GPU's memory: only the copy engines do.

// One thread: the next round of a channel.  Never skipped (unlike the CG kernels, which
// return at once once the solve stopped): every rank must count every round.
extern "C" __global__ void ipc_next_round(long long *counter) {
  if (threadIdx.x == 0 && blockIdx.x == 0) *counter += 1;
}

// One block: return once flags[k] == *counter for every k < num_flags.  The flags are
// read through a volatile pointer, so each test loads them again from memory (the
// copy engines of other GPUs write them; no cache of this SM sees that).  The fence
// then orders the data loads of this stream's later kernels after the flags, at the
// scope of the whole system, where the neighbours' copy engines write.
extern "C" __global__ void ipc_wait_flags(const long long *__restrict__ counter,
                                          const volatile long long *flags,
                                          const int num_flags) {
  const long long round = *counter;
  for (int k = threadIdx.x; k < num_flags; k += blockDim.x) {
    while (flags[k] != round) {
#if __CUDA_ARCH__ >= 700
      __nanosleep(256);  // leave the SM's issue slots to the kernels beside this one
#endif
    }
  }
  __threadfence_system();
  __syncthreads();
}

// v[index[i]] = values[i] for i < n: a staged halo put in place (hofem.parallel.Exchange,
// several components).  Never skipped, like ipc_next_round.
extern "C" __global__ void ipc_scatter(const long long n, const long long *__restrict__ index,
                                       const double *__restrict__ values,
                                       double *__restrict__ v) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    v[index[i]] = values[i];
}
