// The CPU backend (reference and fallback): sessions whose state lives in host memory and whose
// forward pass is backend/cpu/forward.h.
#pragma once

#include <memory>

#include "engine/backend.h"
#include "model/config.h"
#include "model/weights.h"

namespace ds4::cpu {

/// Creates the CPU backend for a loaded model; `threads` < 1 means all cores.
/// The config and weights must outlive the backend and its sessions.
std::unique_ptr<Backend> make_cpu_backend(const model::Config& config,
                                          const model::Weights& weights, int threads);

}  // namespace ds4::cpu
