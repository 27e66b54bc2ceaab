// ds4-bench's CSV: ds4's six columns first and in ds4's order (product-surface §5.3), so ds4's
// plotting scripts read it, then ds4-bench's extra columns.
#pragma once

#include <cstdint>
#include <string>

#include "sweep.h"

namespace ds4::bench {

/// "ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kvcache_bytes,prefill_s,
/// prefill_cpu_s,gen_s,gen_cpu_s,decode_weight_gbps" (no newline).
std::string csv_header();

/// One row for `r`: tps = tokens / wall seconds (2 decimals), seconds with 6 decimals,
/// decode_weight_gbps = decode_weight_bytes * gen_tokens / gen_s / 1e9 (3 decimals). gen_tps and
/// decode_weight_gbps are 0 when no token was generated. No newline.
std::string csv_row(const FrontierResult& r, uint64_t decode_weight_bytes);

}  // namespace ds4::bench
