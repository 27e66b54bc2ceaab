#include "server/http_server.h"

#include <httplib.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <sstream>

#include "common/error.h"

namespace ds4::server {
namespace {

constexpr int64_t kModelCreated = 1767225600;
constexpr int kKeepaliveMs = 5000;  // ": prefill" comment spacing while nothing else is sent

const char* status_text(int status) {
  switch (status) {
    case 400: return "bad request";
    case 401: return "invalid API key";
    case 404: return "unknown endpoint";
    case 405: return "method not allowed";
    case 413: return "request body too large";
    case 429: return "too many requests";
    case 503: return "server shutting down";
    default: return "request failed";
  }
}

// The method an endpoint serves ("POST" for the generation endpoints, "GET" for the others),
// or nullptr for a path this server does not know: a known path asked with another method is a
// 405 with an Allow header rather than a 404.
const char* endpoint_method(const std::string& path) {
  for (const char* p : {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"})
    if (path == p) return "POST";
  if (path == "/health" || path == "/metrics" || path == "/v1/models" || path.rfind("/v1/models/", 0) == 0)
    return "GET";
  return nullptr;
}

// The socket of the connection `req` arrived on. httplib 0.11 does not hand it to handlers, so it
// is found among the process's descriptors by its address pair (the connection stays open while
// the handler runs, so the descriptor cannot be reused meanwhile). -1 when not found.
int find_connection_socket(const httplib::Request& req) {
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (const dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    sockaddr_in local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    if (::getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &ll) != 0 ||
        local.sin_family != AF_INET || ntohs(local.sin_port) != req.local_port)
      continue;
    if (::getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0 ||
        ntohs(peer.sin_port) != req.remote_port)
      continue;
    char ip[INET_ADDRSTRLEN] = {};
    if (!::inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip) || req.remote_addr != ip) continue;
    found = static_cast<int>(fd);
    break;
  }
  ::closedir(d);
  return found;
}

// True when the peer closed (or reset) the connection. The request was read completely, so
// readable bytes can only be a FIN (recv 0) or data the client sent after it (still there).
bool peer_gone(int fd) {
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  return false;
}

constexpr int kDisconnectPollMs = 100;
constexpr int kListenBacklog = 128;  // product-surface §3.1

// httplib 0.11 listens with a backlog of 5, which overflows when many clients connect at once
// (connections then stall for a SYN retry or are reset). Linux lets listen() be called again on
// the listening socket to raise it; the socket is found by its port and SO_ACCEPTCONN.
void raise_listen_backlog(int port) {
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return;
  while (const dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    sockaddr_in local{};
    socklen_t ll = sizeof local;
    int accepting = 0;
    socklen_t al = sizeof accepting;
    if (::getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &ll) == 0 &&
        local.sin_family == AF_INET && ntohs(local.sin_port) == port &&
        ::getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_ACCEPTCONN, &accepting, &al) == 0 && accepting)
      ::listen(static_cast<int>(fd), kListenBacklog);
  }
  ::closedir(d);
}

}  // namespace

HttpServer::HttpServer(Core& core, ServerInfo info, HttpOptions options)
    : core_(core), info_(std::move(info)), options_(std::move(options)),
      http_(std::make_unique<httplib::Server>()) {
  if (options_.host == "localhost") options_.host = "127.0.0.1";
  const int threads = options_.threads;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http_->set_payload_max_length(options_.max_body_bytes);
  // One request per connection, as ds4 does (product-surface §3.1: Connection: close).
  http_->set_keep_alive_max_count(1);
  http_->set_read_timeout(options_.io_timeout_s, 0);
  http_->set_write_timeout(options_.io_timeout_s, 0);
  // httplib's default sets SO_REUSEPORT, which lets a second server bind a port that is in use
  // (the kernel then splits connections between them). SO_REUSEADDR alone keeps restarts quick
  // and makes a busy port an error.
  http_->set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  install_routes();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::bind() {
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
    if (port_ < 0) fail("cannot bind {}: not a local IPv4 address, or no free port", options_.host);
  } else {
    if (!http_->bind_to_port(options_.host, options_.port))
      fail("cannot bind {}:{} (address in use, or not a local IPv4 address)", options_.host, options_.port);
    port_ = options_.port;
  }
  raise_listen_backlog(port_);
}

bool HttpServer::run() { return http_->listen_after_bind(); }

void HttpServer::stop() {
  if (http_) http_->stop();
}

void HttpServer::count_status(int status) {
  std::lock_guard lock(mu_);
  ++statuses_[status];
}

ojson HttpServer::model_object() const {
  const int64_t max_completion = std::min(info_.default_max_tokens, info_.ctx);
  return {{"id", info_.model_id},
          {"object", "model"},
          {"created", kModelCreated},
          {"owned_by", "ds4.c"},
          {"name", "DeepSeek V4 Flash"},
          {"context_length", info_.ctx},
          {"top_provider", {{"context_length", info_.ctx},
                            {"max_completion_tokens", max_completion},
                            {"is_moderated", false}}},
          {"supported_parameters", {"tools", "tool_choice", "max_tokens", "temperature", "top_p",
                                    "top_k", "min_p", "stop", "seed", "stream", "reasoning_effort"}}};
}

std::string HttpServer::metrics_text() const {
  const CoreStats s = core_.stats();
  std::ostringstream o;
  auto metric = [&](const char* name, const char* type, const char* help, auto value) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n'
      << name << ' ' << value << '\n';
  };
  {
    std::lock_guard lock(mu_);
    o << "# HELP ds4_http_requests_total HTTP requests by endpoint\n"
         "# TYPE ds4_http_requests_total counter\n";
    for (const auto& [k, v] : requests_) o << "ds4_http_requests_total{endpoint=\"" << k << "\"} " << v << '\n';
    o << "# HELP ds4_http_responses_total HTTP responses by status\n"
         "# TYPE ds4_http_responses_total counter\n";
    for (const auto& [k, v] : statuses_) o << "ds4_http_responses_total{status=\"" << k << "\"} " << v << '\n';
  }
  metric("ds4_generations_total", "counter", "Generation jobs run", s.jobs);
  metric("ds4_generations_failed_total", "counter", "Generation jobs that ended with an error", s.jobs_failed);
  metric("ds4_prompt_tokens_total", "counter", "Prompt tokens of all jobs", s.prompt_tokens);
  metric("ds4_cached_tokens_total", "counter", "Prompt tokens reused from the live session", s.cached_tokens);
  metric("ds4_completion_tokens_total", "counter", "Generated tokens", s.completion_tokens);
  metric("ds4_cache_hits_total", "counter", "Jobs that reused a prompt prefix", s.cache_hits);
  metric("ds4_prefill_seconds_total", "counter", "Seconds spent in prefill", s.prefill_seconds);
  metric("ds4_decode_seconds_total", "counter", "Seconds spent generating", s.decode_seconds);
  metric("ds4_prefill_tokens_per_second", "gauge", "Prefill speed of the last job", s.last_prefill_tps);
  metric("ds4_decode_tokens_per_second", "gauge", "Generation speed of the last job", s.last_decode_tps);
  metric("ds4_queue_depth", "gauge", "Jobs waiting for the worker", s.queued);
  metric("ds4_busy", "gauge", "1 while a job runs", s.busy ? 1 : 0);
  metric("ds4_streams_open", "gauge", "SSE responses in progress", streams_open_.load());
  return o.str();
}

void HttpServer::install_routes() {
  auto& h = *http_;
  h.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    auto refuse = [&](int status, const std::string& message) {  // in the endpoint's error shape
      ApiError e(status, message);
      const ojson body = req.path == "/v1/messages" ? anthropic_error_body(e) : openai_error_body(e);
      res.status = status;
      res.set_content(dump_json(body), "application/json");
      count_status(status);
      return httplib::Server::HandlerResponse::Handled;
    };
    if (options_.cors) {
      res.set_header("Access-Control-Allow-Origin", "*");
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "*");
    }
    if (req.method == "OPTIONS") {
      res.status = 204;
      count_status(204);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!options_.api_key.empty() && req.path != "/health") {
      std::string given = req.get_header_value("x-api-key");
      const std::string auth = req.get_header_value("Authorization");
      if (auth.rfind("Bearer ", 0) == 0) given = auth.substr(7);
      if (given != options_.api_key) return refuse(401, "invalid API key");
    }
    // A POST without Content-Length or chunked encoding: httplib would read its body until the
    // connection closes (the client waits for an answer, so until the read timeout). Such a
    // request has no body (RFC 9112 6.3), and every POST endpoint needs one: 411 at once.
    if (req.method == "POST" && !req.has_header("Content-Length") &&
        req.get_header_value("Transfer-Encoding").find("chunked") == std::string::npos)
      return refuse(411, "a POST request needs a body with Content-Length (or chunked transfer encoding)");
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Errors httplib raises itself (404 unknown path, 413 body too large, 400 bad HTTP).
  h.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      if (const char* allowed = endpoint_method(req.path); allowed && req.method != allowed) {
        res.status = 405;
        res.set_header("Allow", allowed);
      }
    ApiError e(res.status, status_text(res.status));
    const ojson body = req.path == "/v1/messages" ? anthropic_error_body(e) : openai_error_body(e);
    res.set_content(dump_json(body), "application/json");
    count_status(res.status);
  });

  h.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const CoreStats s = core_.stats();
    ojson body = {{"status", core_.shutting_down() ? "shutting_down" : "ok"},
                  {"busy", s.busy}, {"queued", s.queued}};
    res.status = core_.shutting_down() ? 503 : 200;
    res.set_content(dump_json(body), "application/json");
  });
  h.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(), "text/plain; version=0.0.4");
  });
  h.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump_json({{"object", "list"}, {"data", ojson::array({model_object()})}}),
                    "application/json");
  });
  h.Get(R"(/v1/models/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    if (id != info_.model_id && id != "deepseek-v4-pro") {
      ApiError e(404, "model \"" + id + "\" not found", "model_not_found");
      res.status = 404;
      res.set_content(dump_json(openai_error_body(e)), "application/json");
      return;
    }
    res.set_content(dump_json(model_object()), "application/json");
  });

  auto generation = [this](Api api, const char* name) {
    return [this, api, name](const httplib::Request& req, httplib::Response& res,
                             const httplib::ContentReader& reader) {
      {
        std::lock_guard lock(mu_);
        ++requests_[name];
      }
      // The body is read here, not by httplib: httplib 0.11 checks its payload limit against
      // Content-Length only and would buffer a chunked upload whole. Reading stops at the limit,
      // so at most max_body_bytes are ever held (Content-Length bodies over the limit are
      // refused by httplib before any byte is kept).
      std::string raw;
      bool too_large = false;
      const bool read_ok = reader([&](const char* data, size_t n) {
        if (raw.size() + n > options_.max_body_bytes) {
          too_large = true;
          return false;
        }
        raw.append(data, n);
        return true;
      });
      if (too_large || res.status == 413 || (!read_ok && raw.size() >= options_.max_body_bytes)) {
        ApiError e(413, "request body too large (limit " + std::to_string(options_.max_body_bytes) + " bytes)");
        res.status = 413;
        res.set_content(dump_json(error_body_for(api, e)), "application/json");
        count_status(413);
        return;
      }
      if (!read_ok) {
        ApiError e(400, "bad HTTP request");
        res.status = 400;
        res.set_content(dump_json(error_body_for(api, e)), "application/json");
        count_status(400);
        return;
      }
      std::unique_ptr<Adapter> adapter;
      std::shared_ptr<Job> job;
      try {
        const ojson body = parse_json_body(raw);
        adapter = make_adapter(api, body, info_);
        job = core_.submit(adapter->request());
      } catch (const ApiError& e) {
        res.status = e.status;
        res.set_content(dump_json(error_body_for(api, e)), "application/json");
        count_status(e.status);
        return;
      }
      if (!adapter->stream()) {
        // Nothing is written until the result is ready, so a client that leaves is noticed by
        // polling its socket: the job is cancelled (prefill and generation stop promptly).
        const int fd = find_connection_socket(req);
        std::vector<GenEvent> ignored;
        while (!job->wait_events(ignored, kDisconnectPollMs)) {
          ignored.clear();
          if (fd >= 0 && !job->cancelled() && peer_gone(fd)) job->cancel();
        }
        const GenResult& r = job->wait();
        if (r.failed_early) {
          ApiError e(r.error_status == 499 ? 500 : r.error_status, r.error);
          res.status = e.status;
          res.set_content(dump_json(adapter->error_body(e)), "application/json");
        } else {
          res.status = 200;  // httplib fills in 200 only after the handler returns
          res.set_content(dump_json(adapter->response(r)), "application/json");
        }
        count_status(res.status);
        return;
      }
      res.set_header("Cache-Control", "no-cache");
      count_status(200);
      std::shared_ptr<Adapter> shared(std::move(adapter));
      ++streams_open_;
      const int fd = find_connection_socket(req);
      res.set_chunked_content_provider(
          "text/event-stream",
          [this, job, shared, fd](size_t, httplib::DataSink& sink) {
            auto last_write = std::chrono::steady_clock::now();
            auto write = [&](const std::string& s) {
              if (s.empty()) return true;
              if (!sink.write(s.data(), s.size())) {
                job->cancel();
                return false;
              }
              last_write = std::chrono::steady_clock::now();
              return true;
            };
            // A comment line when nothing was sent for a while (queue, prefill, or events this
            // API does not show, such as hidden reasoning): keeps proxies and clients patient and
            // notices a client that went away.
            auto keepalive = [&](const char* what) {
              if (std::chrono::steady_clock::now() - last_write < std::chrono::milliseconds(kKeepaliveMs))
                return true;
              return write(std::string(": ") + what + "\n\n");
            };
            // Headers are out; keep the connection alive (and notice a client that left) while
            // the job waits in the queue and prefills.
            Usage usage;
            bool prepared = false;
            // The socket is also polled, so a client that leaves while its job waits in the queue
            // or prefills is noticed within kDisconnectPollMs, not at the next keepalive.
            for (;;) {
              if (job->wait_prepared(usage, kDisconnectPollMs)) {
                prepared = true;
                break;
              }
              if (job->done()) break;  // failed before the prefill finished
              if (fd >= 0 && peer_gone(fd)) {
                job->cancel();
                return false;
              }
              if (!keepalive("prefill")) return false;
            }
            if (prepared && !write(shared->stream_begin(usage))) return false;
            std::vector<GenEvent> events;
            for (;;) {
              events.clear();
              const bool finished = job->wait_events(events, kKeepaliveMs);
              for (const auto& e : events)
                if (!write(shared->stream_event(e))) return false;
              if (!finished && !keepalive("keepalive")) return false;
              if (finished) break;
            }
            const GenResult& r = job->wait();
            if (r.failed_early) {
              if (!write(shared->stream_error(r.error))) return false;
            } else if (!write(shared->stream_end(r))) {
              return false;
            }
            sink.done();
            return true;
          },
          [this, job](bool) {
            job->cancel();  // no-op when finished; stops the worker when the client went away
            --streams_open_;
          });
    };
  };
  h.Post("/v1/chat/completions", generation(Api::chat, "chat_completions"));
  h.Post("/v1/completions", generation(Api::completions, "completions"));
  h.Post("/v1/responses", generation(Api::responses, "responses"));
  h.Post("/v1/messages", generation(Api::anthropic, "messages"));
}

}  // namespace ds4::server
