// What-if timing of decode steps (DS4_CUDA_GRAPH_SKIP=regex): the captured step graph's kernel
// nodes whose (mangled) function name matches the regex are disabled, so a benchmark shows how
// much of the step those kernels hold on its critical path. The step's results are then wrong:
// a profiling aid only, never set in a run whose output matters.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace ds4::cuda {

/// The DS4_CUDA_GRAPH_SKIP pattern, or an empty string when unset (read once).
const std::string& graph_skip_pattern();

/// Disables every kernel node of `graph` (already instantiated as `exec`) whose function name
/// matches the ECMAScript regex `pattern` (cudaGraphNodeSetEnabled: a disabled node acts as an
/// empty node, its dependencies kept). Returns how many were disabled. Throws ds4::Error on a
/// CUDA failure or an invalid regex.
int disable_kernel_nodes(cudaGraph_t graph, cudaGraphExec_t exec, const std::string& pattern);

}  // namespace ds4::cuda
