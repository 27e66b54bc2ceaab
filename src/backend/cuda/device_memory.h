// Owning device allocations for the CUDA backend (cudaMalloc / cudaFree) and the error check
// that turns a CUDA status into ds4::Error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "common/error.h"

namespace ds4::cuda {

/// Throws ds4::Error "CUDA error in <what>: <message>" unless st is cudaSuccess.
inline void check(cudaError_t st, const char* what) {
  if (st != cudaSuccess) fail("CUDA error in {}: {}", what, cudaGetErrorString(st));
}

/// A device buffer of `n` elements of T (plain cudaMalloc; zero-initialised unless `zero` is
/// false, for buffers that are fully written next). Move-only.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t n, bool zero = true) : n_(n) {
    if (n == 0) return;
    const cudaError_t st = cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T));
    if (st != cudaSuccess) {
      p_ = nullptr;
      fail("cannot allocate {:.1f} MiB of CUDA device memory: {}",
           static_cast<double>(n * sizeof(T)) / (1 << 20), cudaGetErrorString(st));
    }
    if (zero) check(cudaMemset(p_, 0, n * sizeof(T)), "cudaMemset");
  }
  DeviceArray(DeviceArray&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (p_) cudaFree(p_);
  }

  T* get() const { return p_; }
  size_t size() const { return n_; }

  /// Copies n host elements to element `at` (throws ds4::Error on failure or overflow).
  void upload(const T* src, size_t n, size_t at = 0) {
    if (at + n > n_) fail("device upload of {} elements at {} overflows {}", n, at, n_);
    if (n) check(cudaMemcpy(p_ + at, src, n * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  /// Copies n elements from element `at` to the host.
  void download(T* dst, size_t n, size_t at = 0) const {
    if (at + n > n_) fail("device download of {} elements at {} overflows {}", n, at, n_);
    if (n) check(cudaMemcpy(dst, p_ + at, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

/// Frees page-locked host memory (cudaFreeHost).
struct PinnedFree {
  void operator()(void* p) const { cudaFreeHost(p); }
};
/// A page-locked host buffer: copies between it and the device run at full bus speed and
/// cudaMemcpyAsync stays asynchronous.
template <typename T>
using PinnedArray = std::unique_ptr<T[], PinnedFree>;

/// Allocates a PinnedArray of `n` elements of T (cudaMallocHost; uninitialised). Throws
/// ds4::Error when the allocation fails.
template <typename T>
PinnedArray<T> pinned_array(size_t n) {
  void* p = nullptr;
  const cudaError_t st = cudaMallocHost(&p, n * sizeof(T));
  if (st != cudaSuccess)
    fail("cannot allocate {:.1f} MiB of page-locked host memory: {}", static_cast<double>(n * sizeof(T)) / (1 << 20),
         cudaGetErrorString(st));
  return PinnedArray<T>(static_cast<T*>(p));
}

}  // namespace ds4::cuda
