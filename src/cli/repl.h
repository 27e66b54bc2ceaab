// Interactive multi-turn chat (product-surface §5.1). The session's KV state is kept between
// turns: each turn appends `<｜User｜>text<｜Assistant｜><think>` (or `</think>`) to the
// transcript and prefills only that suffix.
#pragma once

#include <atomic>

#include "chat/render.h"
#include "cli/options.h"
#include "engine/engine.h"
#include "engine/session.h"

namespace ds4::cli {

/// Runs the REPL until /quit, /exit or end of input. Commands: /help, /think, /nothink,
/// /think-max, /ctx N, /read FILE, /quit. Ctrl+C stops the current generation.
/// Returns the process exit code.
int run_repl(Engine& engine, Session& session, const Options& options, chat::ThinkMode mode,
             std::atomic<bool>& stop);

}  // namespace ds4::cli
