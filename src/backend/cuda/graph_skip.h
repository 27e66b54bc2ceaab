// What-if timing of decode steps (DS4_CUDA_GRAPH_SKIP=regex): the captured step graph's kernel
// nodes whose (mangled) function name matches the regex are disabled, so a benchmark shows how
// much of the step those kernels hold on its critical path. The step's results are then wrong:
// a profiling aid only, never set in a run whose output matters.
#pragma once

#include <cuda_runtime_api.h>

#include <optional>
#include <regex>

namespace ds4::cuda {

/// A DS4_CUDA_GRAPH_SKIP value as an ECMAScript regex; nullopt for null or empty. Throws
/// ds4::Error naming the variable when it is not a valid regex.
std::optional<std::regex> parse_graph_skip(const char* value);

/// parse_graph_skip of the environment's DS4_CUDA_GRAPH_SKIP, or nullptr when unset or empty
/// (read once; an invalid regex throws on every call).
const std::regex* graph_skip_regex();

/// Disables every kernel node of `graph` (already instantiated as `exec`) whose function name
/// matches `re` (cudaGraphNodeSetEnabled: a disabled node acts as an empty node, its
/// dependencies kept). Returns how many were disabled. Throws ds4::Error on a CUDA failure.
int disable_kernel_nodes(cudaGraph_t graph, cudaGraphExec_t exec, const std::regex& re);

}  // namespace ds4::cuda
