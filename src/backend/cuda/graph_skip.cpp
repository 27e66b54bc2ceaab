#include "backend/cuda/graph_skip.h"

#include <cstdlib>
#include <regex>
#include <vector>

#include "common/error.h"

namespace ds4::cuda {
namespace {

void check_cuda(cudaError_t st, const char* what) {
  if (st != cudaSuccess) fail("{}: {}", what, cudaGetErrorString(st));
}

}  // namespace

const std::string& graph_skip_pattern() {
  static const std::string p = [] {
    const char* v = std::getenv("DS4_CUDA_GRAPH_SKIP");
    return std::string(v ? v : "");
  }();
  return p;
}

int disable_kernel_nodes(cudaGraph_t graph, cudaGraphExec_t exec, const std::string& pattern) {
  std::regex re;
  try {
    re = std::regex(pattern);
  } catch (const std::regex_error& e) {
    fail("DS4_CUDA_GRAPH_SKIP: '{}' is not a valid regex: {}", pattern, e.what());
  }
  size_t n = 0;
  check_cuda(cudaGraphGetNodes(graph, nullptr, &n), "cudaGraphGetNodes");
  std::vector<cudaGraphNode_t> nodes(n);
  check_cuda(cudaGraphGetNodes(graph, nodes.data(), &n), "cudaGraphGetNodes");
  int disabled = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    check_cuda(cudaGraphNodeGetType(node, &type), "cudaGraphNodeGetType");
    if (type != cudaGraphNodeTypeKernel) continue;
    cudaKernelNodeParams p{};
    check_cuda(cudaGraphKernelNodeGetParams(node, &p), "cudaGraphKernelNodeGetParams");
    const char* name = nullptr;
    check_cuda(cudaFuncGetName(&name, p.func), "cudaFuncGetName");
    if (name == nullptr || !std::regex_search(name, re)) continue;
    check_cuda(cudaGraphNodeSetEnabled(exec, node, 0), "cudaGraphNodeSetEnabled");
    ++disabled;
  }
  return disabled;
}

}  // namespace ds4::cuda
