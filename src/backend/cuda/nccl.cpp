#include "backend/cuda/nccl.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "common/error.h"

namespace ds4::cuda {
namespace {

template <typename F>
void resolve(void* lib, const NcclApi& api, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  if (!out) fail("NCCL library {} has no symbol {} (need NCCL 2.18 or later)", api.path, name);
}

void check_nccl(const NcclApi& api, ncclResult_t st, const char* what) {
  if (st != ncclSuccess) fail("NCCL error in {}: {}", what, api.get_error_string(st));
}

}  // namespace

NcclApi NcclApi::load(const std::string& path) {
  NcclApi api;
  api.path = path;
  // NVLink multicast (NVLS) off unless the user chose otherwise: the per-layer all-reduce is a
  // few KiB, and shared machines may forbid multicast (docs/multi-gpu.md).
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  void* lib = dlopen(api.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    fail("cannot load NCCL ({}): {}; install NCCL 2 or set DS4_NCCL_LIBRARY to libnccl.so.2 "
         "(multi-GPU runs need it)", api.path, dlerror());
  resolve(lib, api, "ncclGetVersion", api.get_version);
  resolve(lib, api, "ncclGetErrorString", api.get_error_string);
  resolve(lib, api, "ncclCommInitAll", api.comm_init_all);
  resolve(lib, api, "ncclCommDestroy", api.comm_destroy);
  resolve(lib, api, "ncclAllReduce", api.all_reduce);
  resolve(lib, api, "ncclGroupStart", api.group_start);
  resolve(lib, api, "ncclGroupEnd", api.group_end);
  check_nccl(api, api.get_version(&api.version), "ncclGetVersion");
  return api;  // the handle stays open for the life of the process
}

const NcclApi& NcclApi::get() {
  static std::once_flag once;
  static NcclApi api;
  static std::string error;
  std::call_once(once, [] {
    try {
      const char* env = std::getenv("DS4_NCCL_LIBRARY");
      api = load(env && *env ? env : "libnccl.so.2");
    } catch (const Error& e) {
      error = e.what();
    }
  });
  if (!error.empty()) fail("{}", error);
  return api;
}

NcclGroup::NcclGroup(std::vector<int> devices) : devices_(std::move(devices)) {
  if (devices_.empty()) fail("an NCCL group needs at least one device");
  const NcclApi& api = NcclApi::get();
  comms_.resize(devices_.size());
  check_nccl(api, api.comm_init_all(comms_.data(), size(), devices_.data()), "ncclCommInitAll");
}

NcclGroup::~NcclGroup() {
  if (comms_.empty()) return;
  const NcclApi& api = NcclApi::get();
  for (ncclComm_t c : comms_)
    if (c) api.comm_destroy(c);
}

void NcclGroup::all_reduce_sum(const std::vector<float*>& buffers, size_t n,
                               const std::vector<cudaStream_t>& streams) const {
  if (buffers.size() != comms_.size() || streams.size() != comms_.size())
    fail("all_reduce_sum: {} buffers and {} streams for {} ranks", buffers.size(), streams.size(),
         comms_.size());
  const NcclApi& api = NcclApi::get();
  check_nccl(api, api.group_start(), "ncclGroupStart");
  ncclResult_t first = ncclSuccess;
  for (size_t r = 0; r < comms_.size(); ++r) {
    const ncclResult_t st = api.all_reduce(buffers[r], buffers[r], n, ncclFloat32, ncclSum,
                                           comms_[r], streams[r]);
    if (first == ncclSuccess) first = st;
  }
  check_nccl(api, api.group_end(), "ncclGroupEnd");
  check_nccl(api, first, "ncclAllReduce");
}

void NcclGroup::all_reduce_sum_rank(int rank, float* buffer, size_t n, cudaStream_t stream) const {
  if (rank < 0 || rank >= size()) fail("all_reduce_sum_rank: rank {} of a group of {}", rank, size());
  const NcclApi& api = NcclApi::get();
  check_nccl(api, api.all_reduce(buffer, buffer, n, ncclFloat32, ncclSum, comms_[static_cast<size_t>(rank)], stream),
             "ncclAllReduce");
}

}  // namespace ds4::cuda
