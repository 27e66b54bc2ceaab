#include "cli/perplexity.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace ds4::cli {

double PerplexityResult::ppl() const { return std::exp(avg_nll()); }

PerplexityResult perplexity(Session& session, std::span<const int32_t> tokens, int64_t chunk) {
  const auto n = static_cast<int64_t>(tokens.size());
  if (n <= kPerplexityPrefix)
    fail("perplexity needs more than {} tokens (the unscored prefix); the text has {}", kPerplexityPrefix, n);
  if (!session.tokens().empty()) fail("perplexity needs an empty session");
  if (n > session.ctx())
    fail("the text has {} tokens but the context is {} tokens (raise --ctx)", n, session.ctx());
  PerplexityResult r;
  r.tokens = n;
  r.scored = n - kPerplexityPrefix;
  session.prefill_each(tokens, chunk, [&](int64_t i, std::span<const float> logits) {
    if (i + 1 < kPerplexityPrefix || i + 1 >= n) return;  // logits of token i score token i+1
    const float mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0.0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - mx);
    r.nll += mx + std::log(sum) - static_cast<double>(logits[static_cast<size_t>(tokens[static_cast<size_t>(i + 1)])]);
  });
  return r;
}

std::string format_perplexity(const PerplexityResult& r) {
  return fmt::format("tokens={} scored={} nll={:.6f} avg_nll={:.6f} ppl={:.6f}", r.tokens, r.scored, r.nll,
                     r.avg_nll(), r.ppl());
}

}  // namespace ds4::cli
