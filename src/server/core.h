// The server's generation core (product-surface §3.8-3.9): one worker thread owns the single
// live Generator (the model session) and runs jobs FIFO. A job is a tokenized prompt plus
// sampling settings; the worker syncs the prompt (prefix reuse), samples, applies stop strings,
// runs the incremental OutputParser (the one owner of the reasoning/answer/tool-call split) and
// publishes events to the job, which the HTTP thread turns into its API's JSON or SSE.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "chat/output_parser.h"
#include "engine/sampler.h"
#include "server/generator.h"
#include "server/tool_memory.h"

namespace ds4::server {

/// Why a generation ended (OpenAI names; adapters map them).
enum class FinishReason { stop, length, tool_calls, error };

/// "stop", "length", "tool_calls" or "error".
const char* finish_reason_name(FinishReason reason);

/// What the worker generates for one request.
struct GenRequest {
  std::vector<int32_t> prompt;      ///< rendered and tokenized prompt, size < ctx
  std::string prompt_text;          ///< the rendered prompt (prefix reuse by text, trace)
  bool starts_in_thinking = false;  ///< the prompt ends with `<think>`
  bool parse_output = true;         ///< false: raw text (legacy completions), no parser
  bool parse_tool_calls = false;    ///< tools were offered: DSML blocks become tool calls
  SamplerSettings sampling;
  int64_t max_tokens = 1;           ///< >= 1; also capped by the context left
  std::vector<std::string> stop;    ///< stop strings (empty ones ignored)
  std::string tool_id_prefix = "call_";
};

/// One streamed event of a job.
struct GenEvent {
  enum class Kind { reasoning, content, tool_begin, tool_args, tool_end };
  Kind kind = Kind::content;
  std::string text;       ///< delta text, or the tool name for tool_begin
  int tool_index = -1;    ///< tool events: 0, 1, ...
  std::string tool_id;    ///< tool_begin: the call id (prefix + 32 hex)
};

/// Token accounting of a job (product-surface §3.5).
struct Usage {
  int64_t prompt_tokens = 0;      ///< whole prompt
  int64_t cached_tokens = 0;      ///< reused prefix
  int64_t completion_tokens = 0;  ///< sampled tokens (EOS included)
};

/// The final state of a job.
struct GenResult {
  FinishReason finish = FinishReason::stop;
  std::string stop_sequence;        ///< the stop string that ended the text, or ""
  chat::ParsedOutput output;        ///< authoritative parse (raw mode: everything in content)
  std::vector<std::string> tool_ids;  ///< ids of output.tool_calls, same order
  std::string raw_tool_block;       ///< the sampled DSML block remembered for exact replay, or ""
  ReuseStep reuse_step = ReuseStep::none;  ///< how the live session was reused
  Usage usage;
  std::string error;                ///< message when finish == error
  /// The job failed before generating anything (prefill error, shutdown while queued):
  /// `error_status` is the HTTP status for a non-streamed reply (500, 503).
  bool failed_early = false;
  int error_status = 500;
  double prefill_seconds = 0, decode_seconds = 0;
};

/// A queued request and its event channel. The HTTP thread reads events with wait_events();
/// the worker appends them. Thread-safe.
class Job {
 public:
  explicit Job(GenRequest request) : request_(std::move(request)) {}
  const GenRequest& request() const { return request_; }

  /// Waits up to `timeout_ms` for events or the end; moves pending events into `out`. Returns
  /// true when the job is finished and every event has been taken.
  bool wait_events(std::vector<GenEvent>& out, int timeout_ms);
  /// True once the job has finished (its result is final).
  bool done();
  /// Blocks until the job finished; returns its result.
  const GenResult& wait();
  /// Asks the worker to stop this job (client gone). Idempotent.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  /// True once the worker has started the prompt's prefill.
  bool started() const { return started_; }
  /// Waits up to `timeout_ms` until the prompt is prefilled (or the job ended); returns true and
  /// sets `usage` (prompt and cached tokens known, completion 0) when it was prefilled.
  bool wait_prepared(Usage& usage, int timeout_ms);

 private:
  friend class Core;
  void push(GenEvent event);
  void set_prepared(const Usage& usage);
  void finish(GenResult result);

  GenRequest request_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<GenEvent> events_;
  bool done_ = false;
  bool prepared_ = false;
  Usage prepared_usage_;
  GenResult result_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> started_{false};
};

/// Counters for /metrics (monotonic since start).
struct CoreStats {
  uint64_t jobs = 0, jobs_failed = 0, cache_hits = 0;
  uint64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  double last_prefill_tps = 0, last_decode_tps = 0;
  size_t queued = 0;
  bool busy = false;
};

/// Core options.
struct CoreOptions {
  size_t max_queue = 0;  ///< jobs allowed to wait (not counting the running one); 0 = no limit
  /// Where sampled tool-call blocks are remembered for exact replay (§3.9); null = not at all.
  ToolMemory* tool_memory = nullptr;
  /// --trace: one human-readable record per job (prompt, reuse decision, output), unbuffered.
  std::FILE* trace = nullptr;
};

/// The worker. Owns the Generator; start() launches the thread, shutdown() stops it.
class Core {
 public:
  Core(std::unique_ptr<Generator> generator, CoreOptions options);
  ~Core();
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  /// Queues `request`. Throws ApiError 429 when max_queue jobs are already waiting and 503
  /// after shutdown() began.
  std::shared_ptr<Job> submit(GenRequest request);

  /// Stops accepting jobs, ends the running generation (finish error "server shutting down"),
  /// fails queued jobs with 503 and joins the worker. Idempotent.
  void shutdown();
  bool shutting_down() const { return stopping_; }

  CoreStats stats() const;

  /// Runs one job synchronously on the calling thread (the worker's body; public for tests
  /// that need no thread).
  void run_job(Job& job);

 private:
  void worker();
  void remember_turn(const GenRequest& req, GenResult& res, const std::string& sampled, bool eos);
  void trace_job(const GenRequest& req, const GenResult& res, const Prepared& prep,
                 const std::string& sampled);

  std::unique_ptr<Generator> gen_;
  CoreOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::atomic<bool> stopping_{false};
  bool busy_ = false;
  CoreStats stats_;
  std::thread thread_;
};

}  // namespace ds4::server
