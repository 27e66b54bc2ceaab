#include "csv.h"

#include <fmt/format.h>

namespace ds4::bench {

std::string csv_header() {
  return "ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kvcache_bytes,"
         "prefill_s,prefill_cpu_s,gen_s,gen_cpu_s,decode_weight_gbps";
}

std::string csv_row(const FrontierResult& r, uint64_t decode_weight_bytes) {
  const double prefill_tps = r.prefill_s > 0 ? static_cast<double>(r.prefill_tokens) / r.prefill_s : 0;
  const bool gen = r.gen_tokens > 0 && r.gen_s > 0;
  const double gen_tps = gen ? static_cast<double>(r.gen_tokens) / r.gen_s : 0;
  const double gbps = gen ? static_cast<double>(decode_weight_bytes) * gen_tps / 1e9 : 0;
  return fmt::format("{},{},{:.2f},{},{:.2f},{},{:.6f},{:.6f},{:.6f},{:.6f},{:.3f}", r.ctx_tokens,
                     r.prefill_tokens, prefill_tps, r.gen_tokens, gen_tps, r.kvcache_bytes,
                     r.prefill_s, r.prefill_cpu_s, r.gen_s, r.gen_cpu_s, gbps);
}

}  // namespace ds4::bench
