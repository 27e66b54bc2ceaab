// The core and every adapter's SSE/JSON path driven by a ScriptedGenerator: fixed model text goes
// through the real parser, stop matcher, HTTP layer and adapters, so tool calls and thinking can
// be checked end to end (the tiny test model's weights are random).
#include <gtest/gtest.h>
#include <httplib.h>

#include <sys/socket.h>
#include <unistd.h>

#include <regex>
#include <thread>

#include "chat/dsml.h"
#include "chat/render.h"
#include "engine/engine.h"
#include "server/http_server.h"
#include "loopback.h"
#include "sse.h"

namespace ds4::server {
namespace {

using test::parse_sse;

const std::string kToolText =
    "Let me check.</think>Sure.\n\n<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris \"é\"</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

// Splits text into pieces of about `n` bytes, never inside a UTF-8 character.
std::vector<std::string> pieces(const std::string& text, size_t n) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = std::min(text.size(), i + n);
    while (j < text.size() && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80) ++j;
    out.push_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

GenResult run_direct(const std::vector<std::string>& script, GenRequest req, std::vector<GenEvent>& events) {
  auto gen = std::make_unique<ScriptedGenerator>(script, 4096);
  Core core(std::move(gen), {});
  auto job = core.submit(std::move(req));
  for (;;) {
    if (job->wait_events(events, 1000)) break;
  }
  return job->wait();
}

TEST(Core, ThinkingContentAndToolCall) {
  for (size_t n : {1, 3, 7, 1000}) {
    GenRequest req;
    req.prompt = {1, 2, 3};
    req.starts_in_thinking = true;
    req.parse_tool_calls = true;
    req.max_tokens = 10000;
    std::vector<GenEvent> events;
    const GenResult r = run_direct(pieces(kToolText, n), req, events);
    EXPECT_EQ(r.finish, FinishReason::tool_calls);
    EXPECT_EQ(r.output.reasoning_content, "Let me check.");
    EXPECT_EQ(r.output.content, "Sure.");
    ASSERT_EQ(r.output.tool_calls.size(), 1u);
    EXPECT_EQ(r.output.tool_calls[0].name, "get_weather");
    EXPECT_EQ(r.output.tool_calls[0].arguments, "{\"city\":\"Paris \\\"é\\\"\",\"days\":3}");
    ASSERT_EQ(r.tool_ids.size(), 1u);
    EXPECT_TRUE(std::regex_match(r.tool_ids[0], std::regex("call_[0-9a-f]{32}")));
    // The streamed events rebuild the same message.
    std::string reasoning, content, args;
    for (const auto& e : events) {
      if (e.kind == GenEvent::Kind::reasoning) reasoning += e.text;
      if (e.kind == GenEvent::Kind::content) content += e.text;
      if (e.kind == GenEvent::Kind::tool_args) args += e.text;
      if (e.kind == GenEvent::Kind::tool_begin) {
        EXPECT_EQ(e.tool_id, r.tool_ids[0]);
      }
    }
    EXPECT_EQ(reasoning, r.output.reasoning_content);
    EXPECT_EQ(content, r.output.content);
    EXPECT_EQ(args, r.output.tool_calls[0].arguments);
    EXPECT_EQ(r.usage.prompt_tokens, 3);
  }
}

TEST(Core, StopStringCutsAndHoldsBack) {
  for (size_t n : {1, 2, 5}) {
    GenRequest req;
    req.prompt = {1};
    req.max_tokens = 1000;
    req.stop = {"STOP"};
    std::vector<GenEvent> events;
    const GenResult r = run_direct(pieces("Hello STOP world", n), req, events);
    EXPECT_EQ(r.finish, FinishReason::stop);
    EXPECT_EQ(r.stop_sequence, "STOP");
    EXPECT_EQ(r.output.content, "Hello ");
    std::string streamed;
    for (const auto& e : events) streamed += e.text;
    EXPECT_EQ(streamed, "Hello ");  // no part of the stop string leaked
  }
}

TEST(Core, HeldBackTextIsFlushedAtEos) {
  GenRequest req;
  req.prompt = {1};
  req.max_tokens = 100;
  req.stop = {"STOP"};
  std::vector<GenEvent> events;
  const GenResult r = run_direct({"Hi ", "ST"}, req, events);
  EXPECT_EQ(r.finish, FinishReason::stop);
  EXPECT_EQ(r.stop_sequence, "");
  EXPECT_EQ(r.output.content, "Hi ST");
}

TEST(Core, LengthAndRawMode) {
  GenRequest req;
  req.prompt = {1, 2};
  req.max_tokens = 3;
  req.parse_output = false;
  req.starts_in_thinking = true;
  std::vector<GenEvent> events;
  const GenResult r = run_direct({"a", "b</think>", "c", "d"}, req, events);
  EXPECT_EQ(r.finish, FinishReason::length);
  EXPECT_EQ(r.output.content, "ab</think>c");  // raw: reasoning and marker kept
  EXPECT_EQ(r.usage.completion_tokens, 3);
}

TEST(Core, UnterminatedToolCallIsAnError) {
  GenRequest req;
  req.prompt = {1};
  req.max_tokens = 1000;
  req.parse_tool_calls = true;
  std::vector<GenEvent> events;
  const GenResult r = run_direct(
      {"x\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"true\">v"},
      req, events);
  EXPECT_EQ(r.finish, FinishReason::error);
  EXPECT_EQ(r.error, "unterminated tool call");
}

TEST(Core, PrefixReuseReported) {
  auto gen = std::make_unique<ScriptedGenerator>(std::vector<std::string>{"ok"}, 4096);
  Core core(std::move(gen), {});
  GenRequest a;
  a.prompt = {5, 6, 7, 8};
  a.max_tokens = 4;
  EXPECT_EQ(core.submit(a)->wait().usage.cached_tokens, 0);
  GenRequest b = a;
  b.prompt = {5, 6, 7, 8, 9, 10};
  EXPECT_EQ(core.submit(b)->wait().usage.cached_tokens, 4);
  // Identical prompt: at least one token is evaluated again.
  EXPECT_EQ(core.submit(b)->wait().usage.cached_tokens, 5);
  EXPECT_EQ(core.stats().cache_hits, 2u);
}

TEST(Core, QueueLimitAndShutdown) {
  // A generator that never ends (no EOS): the first job runs until cancelled.
  auto gen = std::make_unique<ScriptedGenerator>(std::vector<std::string>{}, 1 << 30, false);
  Core core(std::move(gen), {.max_queue = 1});
  GenRequest req;
  req.prompt = {1};
  req.max_tokens = INT64_MAX;
  auto running = core.submit(req);
  while (!running->started()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto waiting = core.submit(req);
  try {
    core.submit(req);
    ADD_FAILURE() << "expected 429";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 429);
  }
  core.shutdown();
  EXPECT_EQ(running->wait().finish, FinishReason::error);
  EXPECT_EQ(running->wait().error, "server shutting down");
  EXPECT_TRUE(waiting->wait().failed_early);
  EXPECT_EQ(waiting->wait().error_status, 503);
  try {
    core.submit(req);
    ADD_FAILURE() << "expected 503";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 503);
  }
}

TEST(Core, CancelStopsGeneration) {
  auto gen = std::make_unique<ScriptedGenerator>(std::vector<std::string>{}, 1 << 30, false);
  Core core(std::move(gen), {});
  GenRequest req;
  req.prompt = {1};
  req.max_tokens = INT64_MAX;
  auto job = core.submit(req);
  while (!job->started()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  job->cancel();
  EXPECT_EQ(job->wait().finish, FinishReason::error);
  EXPECT_EQ(job->wait().error, "client disconnected");
}

// ---- HTTP + adapters with the scripted generator --------------------------------------------

class ScriptedServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ = Engine::open_tokenizer(DS4_BINARY_DIR "/models/ds4-tiny-q2.gguf").release();
    auto gen = std::make_unique<ScriptedGenerator>(std::vector<std::string>{}, 4096);
    gen_ = gen.get();
    memory_ = new ToolMemory();
    core_ = new Core(std::move(gen), {.max_queue = 0, .tool_memory = memory_, .trace = nullptr});
    ServerInfo info;
    info.tool_memory = memory_;
    info.tokenizer = tokenizer_;
    info.ctx = 4096;
    info.default_max_tokens = 1000;
    http_ = new HttpServer(*core_, info, {.host = "127.0.0.1", .port = 0, .cors = false, .api_key = "", .max_body_bytes = 64u << 20, .threads = 16});
    http_->bind();
    thread_ = new std::thread([] { http_->run(); });
  }
  static void TearDownTestSuite() {
    core_->shutdown();
    http_->stop();
    thread_->join();
    delete thread_;
    delete http_;
    delete core_;
    delete memory_;
    delete tokenizer_;
  }
  httplib::Result post(const std::string& path, const nlohmann::ordered_json& body, const std::string& script) {
    gen_->set_script(pieces(script, 3));
    httplib::Client c("127.0.0.1", http_->port());
    c.set_read_timeout(30, 0);
    return c.Post(path.c_str(), body.dump(), "application/json");
  }
  static inline tok::Tokenizer* tokenizer_ = nullptr;
  static inline ScriptedGenerator* gen_ = nullptr;
  static inline Core* core_ = nullptr;
  static inline ToolMemory* memory_ = nullptr;
  static inline HttpServer* http_ = nullptr;
  static inline std::thread* thread_ = nullptr;
};

const nlohmann::ordered_json kOpenAITools = nlohmann::ordered_json::array(
    {{{"type", "function"},
      {"function", {{"name", "get_weather"},
                    {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}});

TEST_F(ScriptedServer, ChatNonStreamToolCall) {
  auto res = post("/v1/chat/completions",
                  {{"messages", {{{"role", "user"}, {"content", "weather?"}}}}, {"tools", kOpenAITools}}, kToolText);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const auto j = nlohmann::ordered_json::parse(res->body);
  const auto& msg = j["choices"][0]["message"];
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(msg["reasoning_content"], "Let me check.");
  EXPECT_EQ(msg["content"], "Sure.");
  EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris \\\"é\\\"\",\"days\":3}");
  EXPECT_TRUE(std::regex_match(msg["tool_calls"][0]["id"].get<std::string>(), std::regex("call_[0-9a-f]{32}")));
}

TEST_F(ScriptedServer, ChatStreamToolCallChunks) {
  auto res = post("/v1/chat/completions",
                  {{"messages", {{{"role", "user"}, {"content", "weather?"}}}}, {"tools", kOpenAITools},
                   {"stream", true}},
                  kToolText);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  const auto frames = parse_sse(res->body);
  ASSERT_GE(frames.size(), 4u);
  EXPECT_EQ(frames.back().data, "[DONE]");
  EXPECT_EQ(frames[0].json()["choices"][0]["delta"], nlohmann::ordered_json({{"role", "assistant"}}));
  std::string reasoning, content, args, id;
  for (size_t i = 1; i + 1 < frames.size(); ++i) {
    const auto j = frames[i].json();
    ASSERT_EQ(j["choices"].size(), 1u);  // no usage chunk: include_usage was not asked
    const auto& d = j["choices"][0]["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("tool_calls")) {
      const auto& tc = d["tool_calls"][0];
      EXPECT_EQ(tc["index"], 0);
      if (tc.contains("id")) id = tc["id"];
      args += tc["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(reasoning, "Let me check.");
  EXPECT_EQ(content, "Sure.");
  EXPECT_EQ(args, "{\"city\":\"Paris \\\"é\\\"\",\"days\":3}");
  EXPECT_TRUE(std::regex_match(id, std::regex("call_[0-9a-f]{32}")));
  EXPECT_EQ(frames[frames.size() - 2].json()["choices"][0]["finish_reason"], "tool_calls");
}

TEST_F(ScriptedServer, AnthropicStreamBlockOrder) {
  const nlohmann::ordered_json tools = nlohmann::ordered_json::array(
      {{{"name", "get_weather"}, {"input_schema", {{"type", "object"}}}}});
  auto res = post("/v1/messages",
                  {{"model", "deepseek-v4-flash"}, {"max_tokens", 500}, {"stream", true}, {"tools", tools},
                   {"messages", {{{"role", "user"}, {"content", "weather?"}}}}},
                  kToolText);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  const auto frames = parse_sse(res->body);
  std::vector<std::string> seq;
  std::string thinking, text, partial, signature;
  int open_index = -1;
  std::string open_type;
  for (const auto& f : frames) {
    const auto j = f.json();
    EXPECT_EQ(f.event, j["type"].get<std::string>());
    seq.push_back(f.event);
    if (f.event == "content_block_start") {
      EXPECT_EQ(open_index, -1);
      open_index = j["index"];
      open_type = j["content_block"]["type"];
      seq.back() += ":" + open_type + ":" + std::to_string(open_index);
      if (open_type == "tool_use") {
        EXPECT_EQ(j["content_block"]["name"], "get_weather");
        EXPECT_TRUE(std::regex_match(j["content_block"]["id"].get<std::string>(), std::regex("toolu_[0-9a-f]{32}")));
      }
    } else if (f.event == "content_block_delta") {
      EXPECT_EQ(j["index"], open_index);
      const std::string dt = j["delta"]["type"];
      if (dt == "thinking_delta") { EXPECT_EQ(open_type, "thinking"); thinking += j["delta"]["thinking"].get<std::string>(); }
      if (dt == "signature_delta") { EXPECT_EQ(open_type, "thinking"); signature = j["delta"]["signature"]; }
      if (dt == "text_delta") { EXPECT_EQ(open_type, "text"); text += j["delta"]["text"].get<std::string>(); }
      if (dt == "input_json_delta") { EXPECT_EQ(open_type, "tool_use"); partial += j["delta"]["partial_json"].get<std::string>(); }
      seq.pop_back();
    } else if (f.event == "content_block_stop") {
      EXPECT_EQ(j["index"], open_index);
      open_index = -1;
    } else if (f.event == "message_delta") {
      EXPECT_EQ(j["delta"]["stop_reason"], "tool_use");
      EXPECT_TRUE(j["delta"]["stop_sequence"].is_null());
      EXPECT_GT(j["usage"]["output_tokens"].get<int>(), 0);
    }
  }
  const std::vector<std::string> expected = {
      "message_start", "content_block_start:thinking:0", "content_block_stop",
      "content_block_start:text:1", "content_block_stop", "content_block_start:tool_use:2",
      "content_block_stop", "message_delta", "message_stop"};
  EXPECT_EQ(seq, expected);
  EXPECT_EQ(thinking, "Let me check.");
  EXPECT_EQ(text, "Sure.");
  EXPECT_EQ(nlohmann::json::parse(partial), nlohmann::json({{"city", "Paris \"é\""}, {"days", 3}}));
  EXPECT_EQ(signature.rfind("msg_", 0), 0u);
}

TEST_F(ScriptedServer, AnthropicNonStream) {
  const nlohmann::ordered_json tools = nlohmann::ordered_json::array({{{"name", "get_weather"}}});
  auto res = post("/v1/messages",
                  {{"max_tokens", 500}, {"tools", tools},
                   {"messages", {{{"role", "user"}, {"content", "weather?"}}}}},
                  kToolText);
  ASSERT_TRUE(res);
  const auto j = nlohmann::ordered_json::parse(res->body);
  ASSERT_EQ(j["content"].size(), 3u) << res->body;
  EXPECT_EQ(j["content"][0]["type"], "thinking");
  EXPECT_EQ(j["content"][0]["signature"], j["id"]);
  EXPECT_EQ(j["content"][1], nlohmann::ordered_json({{"type", "text"}, {"text", "Sure."}}));
  EXPECT_EQ(j["content"][2]["input"], nlohmann::ordered_json({{"city", "Paris \"é\""}, {"days", 3}}));
  EXPECT_EQ(j["stop_reason"], "tool_use");
}

TEST_F(ScriptedServer, AnthropicThinkingOnlyGetsEmptyTextBlock) {
  auto res = post("/v1/messages",
                  {{"max_tokens", 500}, {"stream", true}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}},
                  "just thinking");
  ASSERT_TRUE(res);
  const auto frames = parse_sse(res->body);
  std::vector<std::string> starts;
  for (const auto& f : frames)
    if (f.event == "content_block_start") starts.push_back(f.json()["content_block"]["type"]);
  EXPECT_EQ(starts, (std::vector<std::string>{"thinking", "text"}));
  EXPECT_EQ(frames[frames.size() - 2].json()["delta"]["stop_reason"], "end_turn");
}

TEST_F(ScriptedServer, AnthropicStopSequence) {
  auto res = post("/v1/messages",
                  {{"max_tokens", 500}, {"thinking", {{"type", "disabled"}}}, {"stop_sequences", {"##"}},
                   {"messages", {{{"role", "user"}, {"content", "hi"}}}}},
                  "one two ## three");
  ASSERT_TRUE(res);
  const auto j = nlohmann::ordered_json::parse(res->body);
  EXPECT_EQ(j["content"][0]["text"], "one two ");
  EXPECT_EQ(j["stop_reason"], "stop_sequence");
  EXPECT_EQ(j["stop_sequence"], "##");
}

TEST_F(ScriptedServer, ResponsesStreamSequence) {
  const nlohmann::ordered_json tools = nlohmann::ordered_json::array(
      {{{"type", "function"}, {"name", "get_weather"}, {"parameters", {{"type", "object"}}}}});
  auto res = post("/v1/responses",
                  {{"input", "weather?"}, {"tools", tools}, {"stream", true},
                   {"reasoning", {{"effort", "high"}, {"summary", "auto"}}}},
                  kToolText);
  ASSERT_TRUE(res);
  const auto frames = parse_sse(res->body);
  std::vector<std::string> types;
  int64_t seq = 0;
  for (const auto& f : frames) {
    const auto j = f.json();
    auto it = j.begin();
    EXPECT_EQ(it.key(), "type");
    ++it;
    EXPECT_EQ(it.key(), "sequence_number");
    EXPECT_EQ(j["sequence_number"], seq++);
    EXPECT_EQ(f.event, j["type"].get<std::string>());
    types.push_back(j["type"]);
    if (types.back() == "response.function_call_arguments.done") {
      EXPECT_EQ(j["arguments"], "{\"city\":\"Paris \\\"é\\\"\",\"days\":3}");
    }
    if (types.back() == "response.completed") {
      const auto& r = j["response"];
      EXPECT_EQ(r["status"], "completed");
      ASSERT_EQ(r["output"].size(), 3u);
      EXPECT_EQ(r["output"][0]["type"], "reasoning");
      EXPECT_EQ(r["output"][1]["content"][0]["text"], "Sure.");
      EXPECT_EQ(r["output"][2]["type"], "function_call");
      EXPECT_TRUE(std::regex_match(r["output"][2]["call_id"].get<std::string>(), std::regex("call_[0-9a-f]{32}")));
      EXPECT_EQ(r["output"][2]["id"].get<std::string>().rfind("fc_", 0), 0u);
    }
  }
  // Deltas collapsed: the lifecycle only.
  std::vector<std::string> lifecycle;
  for (const auto& t : types)
    if (lifecycle.empty() || lifecycle.back() != t) lifecycle.push_back(t);
  const std::vector<std::string> expected = {
      "response.created", "response.output_item.added", "response.reasoning_summary_part.added",
      "response.reasoning_summary_text.delta", "response.reasoning_summary_text.done",
      "response.reasoning_summary_part.done", "response.output_item.done",
      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
      "response.output_text.done", "response.content_part.done", "response.output_item.done",
      "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.done", "response.output_item.done", "response.completed"};
  EXPECT_EQ(lifecycle, expected);
}

TEST_F(ScriptedServer, ResponsesHidesReasoningWithoutSummary) {
  auto res = post("/v1/responses", {{"input", "hi"}}, "secret</think>visible");
  ASSERT_TRUE(res);
  const auto j = nlohmann::ordered_json::parse(res->body);
  ASSERT_EQ(j["output"].size(), 1u);
  EXPECT_EQ(j["output"][0]["type"], "message");
  EXPECT_EQ(j["output"][0]["content"][0]["text"], "visible");
  EXPECT_TRUE(std::regex_match(j["id"].get<std::string>(), std::regex("resp_[0-9a-f]{24}")));
}

TEST_F(ScriptedServer, ToolChoiceNoneLeavesDsmlAsContent) {
  auto res = post("/v1/chat/completions",
                  {{"messages", {{{"role", "user"}, {"content", "weather?"}}}}, {"tools", kOpenAITools},
                   {"tool_choice", "none"}},
                  kToolText);
  ASSERT_TRUE(res);
  const auto j = nlohmann::ordered_json::parse(res->body);
  const auto& msg = j["choices"][0]["message"];
  EXPECT_FALSE(msg.contains("tool_calls"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_NE(msg["content"].get<std::string>().find("<｜DSML｜invoke name=\"get_weather\">"), std::string::npos);
  // tool_choice none: no tool schemas in the prompt (failure-modes item 2).
  EXPECT_EQ(gen_->last_prompt_text().find("## Tools"), std::string::npos);
  EXPECT_EQ(gen_->last_prompt_text().find("get_weather"), std::string::npos);
}

TEST_F(ScriptedServer, ContentThatLooksLikeThinkingStaysContentInChatMode) {
  auto res = post("/v1/chat/completions",
                  {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"thinking", {{"type", "disabled"}}}},
                  "plain answer 😀 done");
  ASSERT_TRUE(res);
  const auto j = nlohmann::ordered_json::parse(res->body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "plain answer 😀 done");
  EXPECT_FALSE(j["choices"][0]["message"].contains("reasoning_content"));
}

TEST_F(ScriptedServer, ChatUsageChunkOnlyWhenAsked) {
  auto res = post("/v1/chat/completions",
                  {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"stream", true},
                   {"stream_options", {{"include_usage", true}}}},
                  "a</think>b");
  ASSERT_TRUE(res);
  const auto frames = parse_sse(res->body);
  ASSERT_GE(frames.size(), 3u);
  const auto usage = frames[frames.size() - 2].json();
  EXPECT_TRUE(usage["choices"].is_array());
  EXPECT_TRUE(usage["choices"].empty());
  // Four 3-byte pieces ("a</", "thi", "nk>", "b") and the EOS step.
  EXPECT_EQ(usage["usage"]["completion_tokens"], 5);
  EXPECT_EQ(frames[frames.size() - 3].json()["choices"][0]["finish_reason"], "stop");
}

}  // namespace
}  // namespace ds4::server

namespace ds4::server {
namespace {

// ---- exact DSML replay (product-surface §3.9) through every API ------------------------------

// Model output in a shape the canonical renderer would not write: plain <tool_calls> spelling,
// a single-space separator, JSON with spaces, two calls.
const std::string kOddTools =
    "Plan.</think>Checking \"both\".  <tool_calls>\n"
    "<invoke name=\"get_weather\"><parameter name=\"city\" string=\"true\">Oslo</parameter>"
    "<parameter name=\"opts\" string=\"false\">{ \"days\" : 2 }</parameter></invoke>\n"
    "<invoke name=\"get_weather\"><parameter name=\"city\" string=\"true\">Rome</parameter></invoke>\n"
    "</tool_calls>";
const std::string kOddBlock = kOddTools.substr(kOddTools.find("  <tool_calls>"));

TEST_F(ScriptedServer, ChatToolCallsReplayExactBytes) {
  using oj = nlohmann::ordered_json;
  oj body = {{"messages", {{{"role", "user"}, {"content", "weather?"}}}}, {"tools", kOpenAITools}};
  auto res = post("/v1/chat/completions", body, kOddTools);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const auto msg = oj::parse(res->body)["choices"][0]["message"];
  ASSERT_EQ(msg["tool_calls"].size(), 2u);
  EXPECT_EQ(msg["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Oslo\",\"opts\":{\"days\":2}}");
  // The client sends the turn back (as the SDKs do: content, reasoning, calls) with results.
  oj next = body;
  next["messages"].push_back(msg);
  for (int i = 0; i < 2; ++i)
    next["messages"].push_back({{"role", "tool"}, {"tool_call_id", msg["tool_calls"][i]["id"]}, {"content", "sunny"}});
  ASSERT_EQ(post("/v1/chat/completions", next, "Done.")->status, 200);
  const std::string replayed = gen_->last_prompt_text();
  EXPECT_NE(replayed.find("Plan.</think>Checking \"both\"." + kOddBlock + std::string(chat::kEos)),
            std::string::npos)
      << replayed;
  // An unknown id (or a call list that is not the whole block) renders canonically.
  oj other = next;
  other["messages"][1]["tool_calls"][1]["id"] = "call_0123456789abcdef0123456789abcdef";
  ASSERT_EQ(post("/v1/chat/completions", other, "Done.")->status, 200);
  const std::string canonical = gen_->last_prompt_text();
  EXPECT_EQ(canonical.find(kOddBlock), std::string::npos);
  oj calls = other["messages"][1]["tool_calls"];
  for (auto& c : calls) c["function"]["arguments"] = oj::parse(c["function"]["arguments"].get<std::string>());
  EXPECT_NE(canonical.find("Checking \"both\"." + chat::render_tool_calls_dsml(calls) + std::string(chat::kEos)),
            std::string::npos)
      << canonical;
  oj subset = next;
  subset["messages"][1]["tool_calls"].erase(1);
  subset["messages"].erase(3);
  ASSERT_EQ(post("/v1/chat/completions", subset, "Done.")->status, 200);
  EXPECT_EQ(gen_->last_prompt_text().find(kOddBlock), std::string::npos);
}

TEST_F(ScriptedServer, AnthropicToolUseReplayExactBytes) {
  using oj = nlohmann::ordered_json;
  const oj tools = oj::array({{{"name", "get_weather"}, {"input_schema", {{"type", "object"}}}}});
  oj body = {{"model", "deepseek-v4-flash"}, {"max_tokens", 500}, {"tools", tools},
             {"messages", {{{"role", "user"}, {"content", "weather?"}}}}};
  auto res = post("/v1/messages", body, kOddTools);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const auto j = oj::parse(res->body);
  EXPECT_EQ(j["stop_reason"], "tool_use");
  oj results = oj::array();
  for (const auto& b : j["content"])
    if (b["type"] == "tool_use")
      results.push_back({{"type", "tool_result"}, {"tool_use_id", b["id"]}, {"content", "sunny"}});
  ASSERT_EQ(results.size(), 2u);
  body["messages"].push_back({{"role", "assistant"}, {"content", j["content"]}});
  body["messages"].push_back({{"role", "user"}, {"content", results}});
  ASSERT_EQ(post("/v1/messages", body, "Done.")->status, 200);
  EXPECT_NE(gen_->last_prompt_text().find("Checking \"both\"." + kOddBlock + std::string(chat::kEos)),
            std::string::npos)
      << gen_->last_prompt_text();
}

TEST_F(ScriptedServer, ResponsesFunctionCallReplayExactBytes) {
  using oj = nlohmann::ordered_json;
  const oj tools = oj::array({{{"type", "function"}, {"name", "get_weather"}, {"parameters", {{"type", "object"}}}}});
  oj body = {{"input", oj::array({{{"type", "message"}, {"role", "user"}, {"content", "weather?"}}})},
             {"tools", tools}};
  auto res = post("/v1/responses", body, kOddTools);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const auto j = oj::parse(res->body);
  // As Codex replays a turn: its output items, then one output per call.
  oj input = body["input"];
  for (const auto& item : j["output"]) input.push_back(item);
  for (const auto& item : j["output"])
    if (item["type"] == "function_call")
      input.push_back({{"type", "function_call_output"}, {"call_id", item["call_id"]}, {"output", "sunny"}});
  body["input"] = input;
  ASSERT_EQ(post("/v1/responses", body, "Done.")->status, 200);
  // Responses hides reasoning without a summary opt-in; what it replays is the content and calls.
  EXPECT_NE(gen_->last_prompt_text().find("Checking \"both\"." + kOddBlock + std::string(chat::kEos)),
            std::string::npos)
      << gen_->last_prompt_text();
}

// A Core on a scripted generator behind an HttpServer on a free loopback port (4 threads, 1 MiB
// body limit unless `o` says otherwise), serving from a thread until the object goes away.
struct LocalHttpServer {
  LocalHttpServer(std::unique_ptr<ScriptedGenerator> gen, HttpOptions o, int64_t default_max_tokens = 0)
      : core(std::move(gen), {}),
        tokenizer(Engine::open_tokenizer(DS4_BINARY_DIR "/models/ds4-tiny-q2.gguf")),
        http(core, info_for(tokenizer.get(), default_max_tokens), o) {
    http.bind();
    thread = std::thread([this] { http.run(); });
  }
  ~LocalHttpServer() {
    core.shutdown();
    http.stop();
    thread.join();
  }
  static HttpOptions options() {
    return {.host = "127.0.0.1", .port = 0, .cors = false, .api_key = "", .max_body_bytes = 1u << 20, .threads = 4};
  }
  static ServerInfo info_for(const tok::Tokenizer* t, int64_t default_max_tokens) {
    ServerInfo info;
    info.tokenizer = t;
    info.ctx = 4096;
    if (default_max_tokens > 0) info.default_max_tokens = default_max_tokens;
    return info;
  }
  Core core;
  std::unique_ptr<tok::Tokenizer> tokenizer;
  HttpServer http;
  std::thread thread;
};

// A non-streamed request whose client goes away is cancelled: the worker is free again long
// before the generation could have ended (the scripted generator never stops by itself).
TEST(HttpServerTest, NonStreamDisconnectCancelsTheJob) {
  LocalHttpServer srv(std::make_unique<ScriptedGenerator>(std::vector<std::string>{"x"}, int64_t{1} << 40, false),
                      LocalHttpServer::options(), int64_t{1} << 40);
  Core& core = srv.core;
  HttpServer& http = srv.http;
  const std::string body = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1000000000000})";
  {
    httplib::Client c("127.0.0.1", http.port());
    c.set_read_timeout(0, 300000);  // gives up after 0.3 s and closes the connection
    auto r = c.Post("/v1/chat/completions", body, "application/json");
    EXPECT_FALSE(r);
  }
  const auto t0 = std::chrono::steady_clock::now();
  while (core.stats().busy && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const double freed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(core.stats().busy);
  EXPECT_LT(freed, 2.0);  // polled every 100 ms
  EXPECT_EQ(core.stats().jobs_failed, 1u);
}

// A chunked upload larger than the body limit is refused after at most the limit was read: the
// sender is cut off long before it sent everything.
TEST(HttpServerTest, ChunkedBodyBoundedByTheLimit) {
  LocalHttpServer srv(std::make_unique<ScriptedGenerator>(std::vector<std::string>{"x"}, 4096),
                      LocalHttpServer::options());
  HttpServer& http = srv.http;
  const std::string block(64 << 10, ' ');
  size_t sent = 0;
  constexpr size_t kTotal = size_t{256} << 20;  // 256 MiB offered
  httplib::Client c("127.0.0.1", http.port());
  c.set_write_timeout(5, 0);
  auto r = c.Post(
      "/v1/chat/completions",
      [&](size_t, httplib::DataSink& sink) {
        if (sent >= kTotal) {
          sink.done();
          return true;
        }
        sent += block.size();
        return sink.write(block.data(), block.size());
      },
      "application/json");
  if (r) {
    EXPECT_EQ(r->status, 413);
    EXPECT_EQ(nlohmann::json::parse(r->body)["error"]["type"], "invalid_request_error");
  }
  EXPECT_LT(sent, kTotal / 4) << "the server kept reading past its limit";
  // Within the limit a chunked body is accepted.
  std::string small = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})";
  bool once = false;
  auto ok = c.Post(
      "/v1/chat/completions",
      [&](size_t, httplib::DataSink& sink) {
        if (once) {
          sink.done();
          return true;
        }
        once = true;
        return sink.write(small.data(), small.size());
      },
      "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

// A client that trickles its request (headers or body never complete) is dropped by the socket
// receive deadline (failure-modes item 13); the server keeps serving others meanwhile.
TEST(HttpServerTest, SlowClientsAreCutOffByTheDeadline) {
  HttpOptions o = LocalHttpServer::options();
  o.io_timeout_s = 1;
  LocalHttpServer srv(std::make_unique<ScriptedGenerator>(std::vector<std::string>{"x"}, 4096), o);
  HttpServer& http = srv.http;
  auto seconds_until_closed = [&](const std::string& partial) {
    const int fd = test::connect_loopback(http.port(), 15);
    EXPECT_GE(fd, 0);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(::send(fd, partial.data(), partial.size(), MSG_NOSIGNAL), static_cast<ssize_t>(partial.size()));
    char buf[512];
    while (::recv(fd, buf, sizeof buf, 0) > 0) {
    }
    ::close(fd);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const double head = seconds_until_closed("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le");
  const double body = seconds_until_closed(
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"messages\":");
  EXPECT_GE(head, 0.9);
  EXPECT_LT(head, 5.0);
  EXPECT_GE(body, 0.9);
  EXPECT_LT(body, 5.0);
  httplib::Client c("127.0.0.1", http.port());
  EXPECT_EQ(c.Get("/health")->status, 200);
}

// A POST without Content-Length or chunked encoding has no body: 411 in the endpoint's error
// shape at once, not after the read timeout (httplib would wait for the connection to close).
TEST(HttpServerTest, BodylessPostGets411AtOnce) {
  HttpOptions o = LocalHttpServer::options();
  o.io_timeout_s = 10;
  LocalHttpServer srv(std::make_unique<ScriptedGenerator>(std::vector<std::string>{"x"}, 4096), o);
  auto exchange = [&](const std::string& path) {
    const int fd = test::connect_loopback(srv.http.port(), 15);
    EXPECT_GE(fd, 0);
    const std::string req = "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\r\n";
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    std::string got;
    char buf[512];
    for (ssize_t n; got.find("}}") == std::string::npos && (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
      got.append(buf, static_cast<size_t>(n));
    ::close(fd);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
    return got;
  };
  const std::string openai = exchange("/v1/chat/completions");
  EXPECT_EQ(openai.rfind("HTTP/1.1 411", 0), 0u) << openai;
  EXPECT_NE(openai.find("\"invalid_request_error\""), std::string::npos) << openai;
  EXPECT_NE(openai.find("Content-Length"), std::string::npos) << openai;
  const std::string anthropic = exchange("/v1/messages");
  EXPECT_EQ(anthropic.rfind("HTTP/1.1 411", 0), 0u) << anthropic;
  EXPECT_NE(anthropic.find("\"type\":\"error\""), std::string::npos) << anthropic;
  // Bodies with a length still work, and so do chunked ones.
  httplib::Client c("127.0.0.1", srv.http.port());
  const std::string body = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1})";
  const auto ok = c.Post("/v1/chat/completions", body, "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  const auto chunked = c.Post(
      "/v1/chat/completions",
      [&](size_t, httplib::DataSink& sink) {
        sink.write(body.data(), body.size());
        sink.done();
        return true;
      },
      "application/json");
  ASSERT_TRUE(chunked);
  EXPECT_EQ(chunked->status, 200) << chunked->body;
}

// §3.3: inside a tool block, structural tokens are sampled greedily and payload tokens with the
// request's settings (the parser state before each token decides).
TEST(Core, ToolStructureIsSampledGreedily) {
  const std::vector<std::string> script = {
      "Hm.</think>Ok.\n\n<｜DSML｜tool_calls>\n",               // 0: before the block: 1
      "<｜DSML｜invoke name=\"f\">\n",                           // 1: in the block: 0
      "<｜DSML｜parameter name=\"s\" string=\"true\">",          // 2: 0
      "Par", "is",                                               // 3, 4: string body: 1
      "</｜DSML｜parameter>\n",                                  // 5: still in the body: 1
      "<｜DSML｜parameter name=\"o\" string=\"false\">{\"k\": ", // 6: 0
      "\"v",                                                     // 7: before a JSON string: 0
      "al\"",                                                    // 8: inside it: 1
      ", \"n\": 3}",                                             // 9: after it: 0
      "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"};  // 10: 0
  auto gen = std::make_unique<ScriptedGenerator>(script, 4096);
  ScriptedGenerator* g = gen.get();
  Core core(std::move(gen), {});
  GenRequest req;
  req.prompt = {1};
  req.starts_in_thinking = true;
  req.parse_tool_calls = true;
  req.max_tokens = 100;
  req.sampling.temperature = 1;
  const GenResult r = core.submit(req)->wait();
  EXPECT_EQ(r.finish, FinishReason::tool_calls);
  ASSERT_EQ(r.output.tool_calls.size(), 1u);
  EXPECT_EQ(r.output.tool_calls[0].arguments, "{\"s\":\"Paris\",\"o\":{\"k\":\"val\",\"n\":3}}");
  const std::vector<float> expected = {1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 0};
  EXPECT_EQ(g->temperatures(), expected);
  // Without tools the same text is content: every token uses the request's settings.
  req.parse_tool_calls = false;
  core.submit(req)->wait();
  EXPECT_EQ(g->temperatures(), std::vector<float>(script.size() + 1, 1.0f));
}

// §3.9 step 5: after a thinking answer that ended with EOS, the key the core reports for the
// live frontier is exactly how the next request (chat and Anthropic) renders that turn, with its
// reasoning dropped.
TEST_F(ScriptedServer, ThinkingVisibleKeyIsTheNextRendering) {
  using oj = nlohmann::ordered_json;
  oj chat = {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "2+2?"}}}}};
  auto r = post("/v1/chat/completions", chat, "Add them.</think>It is 4.");
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string key = gen_->last_visible();
  ASSERT_FALSE(key.empty());
  chat["messages"].push_back(oj::parse(r->body)["choices"][0]["message"]);
  chat["messages"].push_back({{"role", "user"}, {"content", "And 3+3?"}});
  ASSERT_EQ(post("/v1/chat/completions", chat, "6")->status, 200);
  EXPECT_TRUE(gen_->last_prompt_text().starts_with(key)) << key << "\n---\n" << gen_->last_prompt_text();
  EXPECT_EQ(gen_->last_prompt_text().find("Add them."), std::string::npos);  // dropped

  oj msg = {{"model", "deepseek-v4-flash"}, {"max_tokens", 100}, {"thinking", {{"type", "enabled"}, {"budget_tokens", 50}}},
            {"messages", {{{"role", "user"}, {"content", "2+2?"}}}}};
  r = post("/v1/messages", msg, "Add.</think>Four.");
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string akey = gen_->last_visible();
  msg["messages"].push_back({{"role", "assistant"}, {"content", oj::parse(r->body)["content"]}});
  msg["messages"].push_back({{"role", "user"}, {"content", "More?"}});
  ASSERT_EQ(post("/v1/messages", msg, "No.")->status, 200);
  EXPECT_TRUE(gen_->last_prompt_text().starts_with(akey)) << akey << "\n---\n" << gen_->last_prompt_text();
  // A turn cut by max_tokens inside the reasoning reports no key.
  gen_->remember_visible("");
  oj cut = chat;
  cut["max_tokens"] = 2;
  post("/v1/chat/completions", cut, "Still thinking and thinking");
  EXPECT_EQ(gen_->last_visible(), "");
}

}  // namespace
}  // namespace ds4::server
