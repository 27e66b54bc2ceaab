// The HTTP layer of ds4-server (product-surface §3.1, §3.6-3.7): routes, CORS, API key, body
// limits, JSON and SSE replies, /health and /metrics. Request parsing, rendering and
// tokenization run on the connection's thread; generation runs on the Core's worker.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "server/adapter.h"
#include "server/core.h"

namespace httplib {
class Server;
}

namespace ds4::server {

/// HTTP options (ds4-server flags).
struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;               ///< 0 = any free port (see HttpServer::port())
  bool cors = false;             ///< Access-Control-Allow-* headers on every reply
  std::string api_key;           ///< when set, required as `Authorization: Bearer KEY` or `x-api-key`
  size_t max_body_bytes = 64u << 20;  ///< larger bodies get 413
  int threads = 64;              ///< connection threads
  int io_timeout_s = 10;         ///< socket send/receive timeout: a client that trickles its request is dropped
};

/// The server. bind() then run() (blocking) on one thread; stop() from any thread.
class HttpServer {
 public:
  HttpServer(Core& core, ServerInfo info, HttpOptions options);
  ~HttpServer();

  /// Binds the listening socket ("localhost" means 127.0.0.1). Throws ds4::Error when it fails.
  void bind();
  /// The bound port.
  int port() const { return port_; }
  /// Serves until stop(). Returns false when the listener failed.
  bool run();
  /// Stops accepting and ends run(). Safe from any thread (not from a signal handler).
  void stop();

  /// Prometheus text exposition of the counters (GET /metrics).
  std::string metrics_text() const;
  /// The model object of GET /v1/models.
  ojson model_object() const;

 private:
  void install_routes();
  void count_status(int status);

  Core& core_;
  ServerInfo info_;
  HttpOptions options_;
  std::unique_ptr<httplib::Server> http_;
  int port_ = 0;
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> requests_;  // per endpoint
  std::map<int, uint64_t> statuses_;          // per HTTP status
  std::atomic<int64_t> streams_open_{0};
};

}  // namespace ds4::server
