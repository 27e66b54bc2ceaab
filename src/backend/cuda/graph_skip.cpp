#include "backend/cuda/graph_skip.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/device_memory.h"
#include "common/error.h"

namespace ds4::cuda {

std::optional<std::regex> parse_graph_skip(const char* value) {
  if (value == nullptr || *value == '\0') return std::nullopt;
  try {
    return std::regex(value);
  } catch (const std::regex_error& e) {
    fail("DS4_CUDA_GRAPH_SKIP: '{}' is not a valid regex: {}", value, e.what());
  }
}

const std::regex* graph_skip_regex() {
  static const std::optional<std::regex> re = parse_graph_skip(std::getenv("DS4_CUDA_GRAPH_SKIP"));
  return re ? &*re : nullptr;
}

int disable_kernel_nodes(cudaGraph_t graph, cudaGraphExec_t exec, const std::regex& re) {
  size_t n = 0;
  check(cudaGraphGetNodes(graph, nullptr, &n), "cudaGraphGetNodes");
  std::vector<cudaGraphNode_t> nodes(n);
  check(cudaGraphGetNodes(graph, nodes.data(), &n), "cudaGraphGetNodes");
  int disabled = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    check(cudaGraphNodeGetType(node, &type), "cudaGraphNodeGetType");
    if (type != cudaGraphNodeTypeKernel) continue;
    cudaKernelNodeParams p{};
    check(cudaGraphKernelNodeGetParams(node, &p), "cudaGraphKernelNodeGetParams");
    const char* name = nullptr;
    check(cudaFuncGetName(&name, p.func), "cudaFuncGetName");
    if (name == nullptr || !std::regex_search(name, re)) continue;
    check(cudaGraphNodeSetEnabled(exec, node, 0), "cudaGraphNodeSetEnabled");
    ++disabled;
  }
  return disabled;
}

}  // namespace ds4::cuda
