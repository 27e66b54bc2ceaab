#include "backend/cuda/kernel_timeline.h"

#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#if __has_include(<cupti_activity.h>)
#include <cupti_activity.h>
#define DS4_HAVE_CUPTI_HEADERS 1
#endif

namespace ds4::cuda {

#ifdef DS4_HAVE_CUPTI_HEADERS

namespace {

// One kernel of a graph launch, as CUPTI reported it.
struct KernelRec {
  uint32_t corr;
  uint64_t node;
  uint64_t start, end;
  int grid[3], block[3];
  std::string name;
};

std::string demangle(const char* name) {
  int st = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &st), std::free);
  return st == 0 && d ? std::string(d.get()) : std::string(name);
}

// The CUPTI entry points the timeline uses (resolved with dlsym).
struct CuptiApi {
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
  CUptiResult (*enable)(CUpti_ActivityKind);
  CUptiResult (*flush_all)(uint32_t);
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**);
  CUptiResult (*node_id)(CUgraphNode, uint64_t*);
};

constexpr size_t kBufferBytes = size_t{8} << 20;

}  // namespace

struct KernelTimeline::Impl {
  CuptiApi api{};
  std::string prefix;
  std::mutex mu;
  std::vector<KernelRec> kernels;  // graph launches only (node id != 0)
  std::string graph_csv;           // node and edge rows of every graph added

  static void request(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;
  }
  static void complete(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    Impl& t = *KernelTimeline::get()->impl_;
    CUpti_Activity* rec = nullptr;
    std::lock_guard<std::mutex> lock(t.mu);
    while (t.api.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
      if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      if (k->graphNodeId == 0) continue;  // not a graph launch (prefill, captures' warm-ups)
      t.kernels.push_back(KernelRec{k->correlationId, k->graphNodeId, k->start, k->end,
                                    {k->gridX, k->gridY, k->gridZ}, {k->blockX, k->blockY, k->blockZ},
                                    k->name ? k->name : "?"});
    }
    std::free(buffer);
  }
};

namespace {

template <typename F>
bool resolve(void* lib, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  if (!out) std::fprintf(stderr, "DS4_CUDA_TIMELINE: libcupti has no symbol %s\n", name);
  return out != nullptr;
}

KernelTimeline::Impl* start_timeline(const char* prefix) {
  const char* path = std::getenv("DS4_CUPTI_LIBRARY");
  void* lib = dlopen(path && *path ? path : "libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "DS4_CUDA_TIMELINE: cannot load libcupti (%s); set DS4_CUPTI_LIBRARY\n", dlerror());
    return nullptr;
  }
  auto t = std::make_unique<KernelTimeline::Impl>();  // freed if a symbol is missing
  t->prefix = prefix;
  CuptiApi& a = t->api;
  if (!resolve(lib, "cuptiActivityRegisterCallbacks", a.register_callbacks) ||
      !resolve(lib, "cuptiActivityEnable", a.enable) || !resolve(lib, "cuptiActivityFlushAll", a.flush_all) ||
      !resolve(lib, "cuptiActivityGetNextRecord", a.next_record) ||
      !resolve(lib, "cuptiGetGraphNodeId", a.node_id))
    return nullptr;
  return t.release();
}

}  // namespace

KernelTimeline* KernelTimeline::get() {
  static KernelTimeline* timeline = [] () -> KernelTimeline* {
    const char* prefix = std::getenv("DS4_CUDA_TIMELINE");
    if (!prefix || !*prefix) return nullptr;
    Impl* impl = start_timeline(prefix);
    return impl ? new KernelTimeline(impl) : nullptr;  // lives for the process
  }();
  static std::once_flag enabled;
  if (timeline)
    std::call_once(enabled, [] {
      const CuptiApi& a = timeline->impl_->api;
      if (a.register_callbacks(&Impl::request, &Impl::complete) != CUPTI_SUCCESS ||
          a.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS)
        std::fprintf(stderr, "DS4_CUDA_TIMELINE: CUPTI did not start kernel records\n");
    });
  return timeline;
}

void KernelTimeline::add_graph(cudaGraph_t g, const std::string& label) {
  size_t n = 0, ne = 0;
  if (cudaGraphGetNodes(g, nullptr, &n) != cudaSuccess || cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &ne) != cudaSuccess)
    return;
  std::vector<cudaGraphNode_t> nodes(n), from(ne), to(ne);
  std::vector<cudaGraphEdgeData> data(ne);
  cudaGraphGetNodes(g, nodes.data(), &n);
  cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &ne);
  auto id = [&](cudaGraphNode_t node) {
    uint64_t v = 0;
    impl_->api.node_id(reinterpret_cast<CUgraphNode>(node), &v);
    return static_cast<unsigned long long>(v);
  };
  std::string out;
  char line[64];
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    cudaGraphNodeGetType(node, &type);
    std::string name;
    if (type == cudaGraphNodeTypeKernel) {
      cudaKernelNodeParams p{};
      const char* fn = nullptr;
      if (cudaGraphKernelNodeGetParams(node, &p) == cudaSuccess && cudaFuncGetName(&fn, p.func) == cudaSuccess && fn)
        name = demangle(fn);
    }
    std::replace(name.begin(), name.end(), '"', '\'');
    std::snprintf(line, sizeof(line), "node,%s,%llu,%d,\"", label.c_str(), id(node), static_cast<int>(type));
    out += line + name + "\"\n";
  }
  for (size_t i = 0; i < ne; ++i) {
    std::snprintf(line, sizeof(line), "edge,%s,%llu,%llu,%d\n", label.c_str(), id(from[i]), id(to[i]),
                  static_cast<int>(data[i].type));
    out += line;
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->graph_csv += out;
}

void KernelTimeline::write() {
  cudaDeviceSynchronize();
  impl_->api.flush_all(1);  // CUPTI_ACTIVITY_FLAG_FLUSH_FORCED
  std::lock_guard<std::mutex> lock(impl_->mu);
  const char* env = std::getenv("DS4_CUDA_TIMELINE_STEPS");
  const size_t keep = env && std::atoi(env) > 0 ? static_cast<size_t>(std::atoi(env)) : 3;
  std::set<uint32_t> corrs;
  for (const KernelRec& k : impl_->kernels) corrs.insert(k.corr);
  while (corrs.size() > keep) corrs.erase(corrs.begin());  // the last launches (ids increase)
  const std::string kpath = impl_->prefix + ".kernels.csv", gpath = impl_->prefix + ".graph.csv";
  FILE* f = std::fopen(kpath.c_str(), "w");
  FILE* g = std::fopen(gpath.c_str(), "w");
  if (!f || !g) {
    std::fprintf(stderr, "DS4_CUDA_TIMELINE: cannot write %s / %s: %s\n", kpath.c_str(), gpath.c_str(),
                 std::strerror(errno));
    if (f) std::fclose(f);
    if (g) std::fclose(g);
    return;
  }
  std::fputs("corr,node,start_ns,end_ns,grid_x,grid_y,grid_z,block_x,name\n", f);
  std::map<std::string, std::string> names;  // mangled -> demangled
  for (const KernelRec& k : impl_->kernels) {
    if (!corrs.count(k.corr)) continue;
    auto it = names.find(k.name);
    if (it == names.end()) {
      std::string d = demangle(k.name.c_str());
      std::replace(d.begin(), d.end(), '"', '\'');
      it = names.emplace(k.name, d).first;
    }
    std::fprintf(f, "%u,%llu,%llu,%llu,%d,%d,%d,%d,\"%s\"\n", k.corr, static_cast<unsigned long long>(k.node),
                 static_cast<unsigned long long>(k.start), static_cast<unsigned long long>(k.end), k.grid[0], k.grid[1],
                 k.grid[2], k.block[0], it->second.c_str());
  }
  std::fputs("row,graph,a,b,c\n", g);
  std::fputs(impl_->graph_csv.c_str(), g);
  std::fclose(f);
  std::fclose(g);
  std::fprintf(stderr, "DS4_CUDA_TIMELINE: %zu launches written to %s, graphs to %s\n", corrs.size(), kpath.c_str(),
               gpath.c_str());
}

#else  // no CUPTI headers at build time

struct KernelTimeline::Impl {};

KernelTimeline* KernelTimeline::get() {
  static const bool said = [] {
    const char* prefix = std::getenv("DS4_CUDA_TIMELINE");
    if (prefix && *prefix) std::fprintf(stderr, "DS4_CUDA_TIMELINE: this build has no CUPTI headers\n");
    return true;
  }();
  (void)said;
  return nullptr;
}
void KernelTimeline::add_graph(cudaGraph_t, const std::string&) {}
void KernelTimeline::write() {}

#endif

}  // namespace ds4::cuda
