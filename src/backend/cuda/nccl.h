// NCCL for the multi-GPU paths (expert and tensor parallelism, issue #8), loaded at run time
// with dlopen: a binary built here starts on machines without NCCL and only asks for the
// library when a communicator is made. The CUDA toolkit's nccl.h supplies the types.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <string>
#include <vector>

namespace ds4::cuda {

/// The NCCL entry points this project uses, resolved from libnccl.so.2.
struct NcclApi {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  std::string path;  ///< the library that was opened
  int version = 0;   ///< NCCL_VERSION_CODE of that library (e.g. 22809 for 2.28.9)

  /// Loads the library once per process: $DS4_NCCL_LIBRARY if set, else "libnccl.so.2" on the
  /// loader's search path (LD_LIBRARY_PATH). Throws ds4::Error naming the dlopen/dlsym failure
  /// and how to point at the library.
  static const NcclApi& get();
  /// Loads `path` (not cached). Same errors as get().
  static NcclApi load(const std::string& path);
};

/// One communicator per device of this process (ncclCommInitAll: rank i drives devices[i]).
/// Move-only; destroys the communicators.
class NcclGroup {
 public:
  /// Throws ds4::Error when NCCL cannot be loaded, the list is empty or NCCL refuses the
  /// devices (NCCL allows one rank per device in a communicator).
  explicit NcclGroup(std::vector<int> devices);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int size() const { return static_cast<int>(devices_.size()); }
  int device(int rank) const { return devices_[static_cast<size_t>(rank)]; }

  /// In-place sum over ranks of `n` f32 elements: buffers[r] lives on device(r) and is enqueued
  /// on streams[r] (one grouped call, so one host thread can drive every rank). The result
  /// is ready when each stream reaches this point. Throws ds4::Error on an NCCL error.
  void all_reduce_sum(const std::vector<float*>& buffers, size_t n,
                      const std::vector<cudaStream_t>& streams) const;
  /// Rank `rank`'s part of an in-place sum of `n` f32 elements in `buffer` (on device(rank)),
  /// for a group driven by one host thread per rank: every rank makes the matching call.
  /// Throws ds4::Error on an NCCL error or a bad rank.
  void all_reduce_sum_rank(int rank, float* buffer, size_t n, cudaStream_t stream) const;

 private:
  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
};

}  // namespace ds4::cuda
