// --dump-logprobs: a greedy continuation with the top-k alternatives of every step, as JSON
// (product-surface §5.1): {source, prompt_tokens, ctx, top_k, steps:[{step, selected:{id,text,
// bytes}, top_logprobs:[{token:{id,text,bytes}, logit, logprob}]}]}. Stops at EOS.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/session.h"

namespace ds4::cli {

/// Prefills `prompt`, then decodes greedily up to max_tokens steps, writing the JSON to `path`.
/// Throws ds4::Error when the prompt does not fit or the file cannot be written.
void dump_logprobs(Engine& engine, Session& session, const std::vector<int32_t>& prompt,
                   int64_t max_tokens, int top_k, const std::string& path);

}  // namespace ds4::cli
