#include "server/core.h"

#include <chrono>
#include <cstdio>

#include "chat/dsml.h"
#include "common/error.h"
#include "server/api_error.h"
#include "server/ids.h"
#include "server/stop_matcher.h"

namespace ds4::server {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::tool_calls: return "tool_calls";
    case FinishReason::error: return "error";
  }
  return "error";
}

bool Job::wait_events(std::vector<GenEvent>& out, int timeout_ms) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
               [&] { return done_ || !events_.empty(); });
  for (auto& e : events_) out.push_back(std::move(e));
  events_.clear();
  return done_;
}

bool Job::done() {
  std::lock_guard lock(mu_);
  return done_;
}

const GenResult& Job::wait() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  return result_;
}

bool Job::wait_prepared(Usage& usage, int timeout_ms) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return done_ || prepared_; });
  if (prepared_) usage = prepared_usage_;
  return prepared_;
}

void Job::set_prepared(const Usage& usage) {
  {
    std::lock_guard lock(mu_);
    prepared_ = true;
    prepared_usage_ = usage;
  }
  cv_.notify_all();
}

void Job::push(GenEvent event) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(event));
  }
  cv_.notify_all();
}

void Job::finish(GenResult result) {
  {
    std::lock_guard lock(mu_);
    result_ = std::move(result);
    done_ = true;
  }
  cv_.notify_all();
}

Core::Core(std::unique_ptr<Generator> generator, CoreOptions options)
    : gen_(std::move(generator)), options_(options) {
  thread_ = std::thread([this] { worker(); });
}

Core::~Core() { shutdown(); }

std::shared_ptr<Job> Core::submit(GenRequest request) {
  auto job = std::make_shared<Job>(std::move(request));
  {
    std::lock_guard lock(mu_);
    if (stopping_) throw ApiError(503, "server shutting down");
    if (options_.max_queue > 0 && queue_.size() >= options_.max_queue)
      throw ApiError(429, "too many queued requests (--max-queue " +
                              std::to_string(options_.max_queue) + "); retry later");
    queue_.push_back(job);
  }
  cv_.notify_all();
  return job;
}

void Core::shutdown() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
    try {
      gen_->on_shutdown();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ds4-server: shutdown save failed: %s\n", e.what());
    }
  }
}

CoreStats Core::stats() const {
  std::lock_guard lock(mu_);
  CoreStats s = stats_;
  s.queued = queue_.size();
  s.busy = busy_;
  return s;
}

void Core::worker() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) {
        // Fail everything still waiting; nothing new can arrive.
        for (auto& j : queue_) {
          GenResult r;
          r.finish = FinishReason::error;
          r.error = "server shutting down";
          r.failed_early = true;
          r.error_status = 503;
          j->finish(std::move(r));
        }
        queue_.clear();
        return;
      }
      job = queue_.front();
      queue_.pop_front();
      busy_ = true;
    }
    run_job(*job);
    std::lock_guard lock(mu_);
    busy_ = false;
  }
}

void Core::remember_turn(const GenRequest& req, GenResult& res, const std::string& sampled, bool eos) {
  if (!req.parse_output) return;
  const auto& o = res.output;
  if (res.finish == FinishReason::tool_calls && options_.tool_memory && !o.tool_calls.empty() &&
      res.tool_ids.size() == o.tool_calls.size()) {
    if (auto block = extract_tool_block(sampled, req.starts_in_thinking, o.content)) {
      res.raw_tool_block = *block;
      options_.tool_memory->remember({res.tool_ids, std::move(*block)});
    }
  }
  // A thinking turn that ended with EOS after closed reasoning: the next request renders it
  // without the reasoning; tell the generator which text stands for its live state.
  if (eos && req.starts_in_thinking && res.finish == FinishReason::stop && res.stop_sequence.empty() &&
      o.tool_calls.empty() && !o.unterminated_reasoning) {
    const size_t end = sampled.find(chat::kThinkEnd);
    if (end != std::string::npos && sampled.substr(end + chat::kThinkEnd.size()) == o.content) {
      if (auto key = thinking_visible_key(req.prompt_text, o.content)) gen_->remember_visible(std::move(*key));
    }
  }
}

void Core::trace_job(const GenRequest& req, const GenResult& res, const Prepared& prep,
                     const std::string& sampled) {
  std::FILE* f = options_.trace;
  std::fprintf(f,
               "=== job: prompt %lld tokens, reused %lld (%s%s), generated %lld, finish %s%s%s\n"
               "--- prompt\n%s\n--- output\n%s\n",
               static_cast<long long>(res.usage.prompt_tokens), static_cast<long long>(prep.reused),
               reuse_step_name(prep.step), prep.disk_hit ? ", disk hit" : "",
               static_cast<long long>(res.usage.completion_tokens), finish_reason_name(res.finish),
               res.error.empty() ? "" : ": ", res.error.c_str(), req.prompt_text.c_str(), sampled.c_str());
  for (const auto& w : res.output.warnings) std::fprintf(f, "--- parser: %s\n", w.c_str());
  for (size_t i = 0; i < res.tool_ids.size(); ++i)
    std::fprintf(f, "--- tool call %s%s\n", res.tool_ids[i].c_str(),
                 res.raw_tool_block.empty() ? "" : " (exact DSML remembered)");
  std::fflush(f);
}

void Core::run_job(Job& job) {
  using clock = std::chrono::steady_clock;
  const GenRequest& req = job.request();
  GenResult res;
  res.usage.prompt_tokens = static_cast<int64_t>(req.prompt.size());
  job.started_ = true;

  auto emit = [&](GenEvent e) { job.push(std::move(e)); };
  auto fail_early = [&](std::string message, int status) {
    res.finish = FinishReason::error;
    res.error = std::move(message);
    res.failed_early = true;
    res.error_status = status;
  };

  const auto t0 = clock::now();
  bool prepared = false;
  Prepared prep;
  try {
    prep = gen_->prepare(req.prompt, req.prompt_text, [&] {
      if (job.cancelled() || stopping_) throw Cancelled{};
    });
    res.usage.prompt_tokens = prep.prompt_tokens;
    res.usage.cached_tokens = prep.reused;
    res.reuse_step = prep.step;
    prepared = true;
  } catch (const Cancelled&) {
    fail_early(stopping_ ? "server shutting down" : "client disconnected", stopping_ ? 503 : 499);
  } catch (const std::exception& e) {
    fail_early(std::string("prefill failed: ") + e.what(), 500);
  }
  if (!prepared) {
    gen_->invalidate();  // a cancelled prefill may leave a partial prompt: start clean next time
    {
      std::lock_guard lock(mu_);
      ++stats_.jobs;
      ++stats_.jobs_failed;
    }
    job.finish(std::move(res));
    return;
  }
  job.set_prepared(res.usage);
  const auto t1 = clock::now();
  res.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();

  chat::OutputParser parser({req.starts_in_thinking, req.parse_tool_calls});
  StopMatcher stops(req.stop);
  std::vector<chat::ParseEvent> pevents;
  int64_t generated = 0;
  bool done = false;
  bool eos = false;
  std::string sampled;  // every generated byte, as it is in the session (exact replay)

  auto forward = [&](const std::string& text) {
    if (text.empty()) return;
    if (!req.parse_output) {
      res.output.content += text;
      emit({GenEvent::Kind::content, text, -1, {}});
      return;
    }
    parser.feed(text, pevents);
  };
  auto drain = [&] {
    for (auto& pe : pevents) {
      switch (pe.kind) {
        case chat::ParseEventKind::reasoning_delta:
          emit({GenEvent::Kind::reasoning, std::move(pe.text), -1, {}});
          break;
        case chat::ParseEventKind::content_delta:
          emit({GenEvent::Kind::content, std::move(pe.text), -1, {}});
          break;
        case chat::ParseEventKind::tool_call_begin: {
          std::string id = new_tool_id(req.tool_id_prefix);
          res.tool_ids.push_back(id);
          emit({GenEvent::Kind::tool_begin, std::move(pe.text), pe.tool_index, std::move(id)});
          break;
        }
        case chat::ParseEventKind::tool_args_delta:
          emit({GenEvent::Kind::tool_args, std::move(pe.text), pe.tool_index, {}});
          break;
        case chat::ParseEventKind::tool_call_end:
          emit({GenEvent::Kind::tool_end, {}, pe.tool_index, {}});
          break;
        case chat::ParseEventKind::finish:
          break;
      }
    }
    pevents.clear();
  };

  try {
    Sampler sampler(req.sampling);
    // §3.3: structural bytes of a DSML tool call are sampled at temperature 0; payload bytes
    // (string parameter bodies, JSON strings) keep the request's settings. Decided per token
    // from the parser state before it.
    SamplerSettings greedy_settings = req.sampling;
    greedy_settings.temperature = 0;
    Sampler greedy(greedy_settings);
    while (!done) {
      if (job.cancelled()) {
        res.finish = FinishReason::error;
        res.error = "client disconnected";
        break;
      }
      if (stopping_) {
        res.finish = FinishReason::error;
        res.error = "server shutting down";
        break;
      }
      if (generated >= req.max_tokens || gen_->remaining() <= 0) {
        res.finish = FinishReason::length;
        break;
      }
      const bool structural = req.parse_output && req.parse_tool_calls && parser.inside_tool_block() &&
                              !parser.inside_payload();
      GenStep step = gen_->next(structural ? greedy : sampler);
      ++generated;
      if (step.eos) {
        res.finish = FinishReason::stop;
        eos = true;
        break;
      }
      sampled += step.text;
      std::string safe;
      if (stops.feed(step.text, safe)) {
        forward(safe);
        drain();
        res.finish = FinishReason::stop;
        res.stop_sequence = stops.matched();
        gen_->invalidate();  // the sampled tail past the stop string is not part of the reply
        done = true;
        break;
      }
      forward(safe);
      drain();
      if (!req.parse_output || !parser.inside_tool_block()) gen_->checkpoint();  // §4.3 continued save
      if (req.parse_output && parser.closed_tool_blocks() > 0) {
        res.finish = FinishReason::tool_calls;
        break;
      }
    }
    if (res.stop_sequence.empty()) {
      std::string tail = gen_->flush(), safe;
      sampled += tail;
      if (stops.feed(tail, safe)) {
        res.stop_sequence = stops.matched();
        res.finish = FinishReason::stop;
      } else {
        stops.finish(safe);
      }
      forward(safe);
    }
    if (req.parse_output) {
      parser.finish(pevents);
      drain();
      res.output = parser.result();
      if (res.output.unterminated_tool_block && res.finish == FinishReason::stop) {
        res.finish = FinishReason::error;
        res.error = "unterminated tool call";
      } else if (!res.output.tool_calls.empty() && res.finish == FinishReason::stop &&
                 res.stop_sequence.empty()) {
        res.finish = FinishReason::tool_calls;
      }
    }
    remember_turn(req, res, sampled, eos);
  } catch (const std::exception& e) {
    res.finish = FinishReason::error;
    res.error = std::string("generation failed: ") + e.what();
    gen_->invalidate();
  }
  res.usage.completion_tokens = generated;
  if (options_.trace) trace_job(req, res, prep, sampled);
  res.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  {
    std::lock_guard lock(mu_);
    ++stats_.jobs;
    if (res.finish == FinishReason::error) ++stats_.jobs_failed;
    if (res.usage.cached_tokens > 0) ++stats_.cache_hits;
    stats_.prompt_tokens += static_cast<uint64_t>(res.usage.prompt_tokens);
    stats_.cached_tokens += static_cast<uint64_t>(res.usage.cached_tokens);
    stats_.completion_tokens += static_cast<uint64_t>(generated);
    stats_.prefill_seconds += res.prefill_seconds;
    stats_.decode_seconds += res.decode_seconds;
    const int64_t prefilled = res.usage.prompt_tokens - res.usage.cached_tokens;
    if (res.prefill_seconds > 0) stats_.last_prefill_tps = prefilled / res.prefill_seconds;
    if (res.decode_seconds > 0 && generated > 0)
      stats_.last_decode_tps = generated / res.decode_seconds;
  }
  job.finish(std::move(res));
}

}  // namespace ds4::server
