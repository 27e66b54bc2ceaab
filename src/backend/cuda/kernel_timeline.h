// Kernel timeline of the decode step graphs (DS4_CUDA_TIMELINE=PREFIX): every kernel's start and
// end on the device through CUPTI's activity API, and the step graphs' nodes and edges, so that a
// report (scripts/timeline-report.py) can follow the critical path through the graph. libcupti
// is loaded at run time (DS4_CUPTI_LIBRARY, default libcupti.so.13): nothing links it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace ds4::cuda {

/// The process's kernel timeline, or null when DS4_CUDA_TIMELINE is unset. The first call starts
/// CUPTI's concurrent-kernel records (so call it before any graph is captured); a timeline that
/// cannot start (no libcupti, CUPTI errors) says why on stderr once and returns null.
class KernelTimeline {
 public:
  static KernelTimeline* get();

  /// Records graph `g` (captured, not yet instantiated) as graph `label`: its nodes (CUPTI node
  /// id, node type, kernel name) and edges (from, to, dependency type: 0 full, 1 programmatic).
  void add_graph(cudaGraph_t g, const std::string& label);

  /// Flushes CUPTI's buffers and (re)writes PREFIX.kernels.csv, the kernels of the last
  /// DS4_CUDA_TIMELINE_STEPS (default 3) graph launches (one correlation id each: corr, graph
  /// node id, start and end in ns, grid, block, name), and PREFIX.graph.csv. Errors writing the
  /// files are reported on stderr (a profiling aid: the run itself goes on).
  void write();

  struct Impl;

 private:
  explicit KernelTimeline(Impl* impl) : impl_(impl) {}
  Impl* impl_;
};

}  // namespace ds4::cuda
