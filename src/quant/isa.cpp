// Run-time ISA detection and selection (see isa.h).
#include "quant/isa.h"

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "common/error.h"

namespace ds4::quant {

namespace {

// -1 until the first active_isa()/set_isa(); then the Isa value.
std::atomic<int> g_active{-1};

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "unknown";
}

bool parse_isa(const char* name, Isa* out) {
  const std::string_view s(name ? name : "");
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (s == isa_name(isa)) {
      *out = isa;
      return true;
    }
  }
  return false;
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return cpu_has_avx2();
    case Isa::Avx512: return cpu_has_avx512();
  }
  return false;
}

Isa best_isa() {
  if (isa_supported(Isa::Avx512)) return Isa::Avx512;
  if (isa_supported(Isa::Avx2)) return Isa::Avx2;
  return Isa::Scalar;
}

Isa active_isa() {
  const int v = g_active.load(std::memory_order_acquire);
  if (v >= 0) return static_cast<Isa>(v);
  Isa chosen = best_isa();
  const char* env = std::getenv("DS4_ISA");
  if (env != nullptr && env[0] != '\0') {
    if (!parse_isa(env, &chosen)) {
      fail("DS4_ISA='{}' is not a known instruction set (expected scalar, avx2 or avx512)", env);
    }
    if (!isa_supported(chosen)) {
      fail("DS4_ISA={} but this CPU cannot run those kernels", env);
    }
  }
  int expected = -1;
  g_active.compare_exchange_strong(expected, static_cast<int>(chosen), std::memory_order_acq_rel);
  return static_cast<Isa>(g_active.load(std::memory_order_acquire));
}

void set_isa(Isa isa) {
  if (!isa_supported(isa)) fail("set_isa({}): this CPU cannot run those kernels", isa_name(isa));
  g_active.store(static_cast<int>(isa), std::memory_order_release);
}

}  // namespace ds4::quant
