#include "model/experts.h"

#include <cmath>

#include "common/error.h"
#include "model/vector_ops.h"

namespace ds4::model {

float silu(float z) { return z * detail::sigmoid_f32(z); }

void expert_swiglu(std::span<const float> gate, std::span<const float> up, float clamp,
                   float weight, std::span<float> out) {
  if (up.size() != gate.size() || out.size() != gate.size()) {
    fail("expert_swiglu: gate {}, up {} and out {} sizes differ", gate.size(), up.size(),
         out.size());
  }
  const bool clamped = clamp > 1.0e-6f;
  for (size_t i = 0; i < gate.size(); ++i) {
    float g = gate[i];
    float u = up[i];
    if (clamped) {
      if (g > clamp) g = clamp;
      if (u > clamp) u = clamp;
      if (u < -clamp) u = -clamp;
    }
    out[i] = silu(g) * u * weight;
  }
}

}  // namespace ds4::model
