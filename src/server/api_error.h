// The error a request can end with before or instead of a generation: HTTP status, message and
// the machine-readable extras of product-surface §3.7 (context overflow). Each API adapter turns
// it into its own error body shape.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace ds4::server {

/// A request-level failure. `status` is the HTTP status (400, 404, 409, 413, 429, 500, 503);
/// `code`/`param` are the OpenAI error fields (empty = omitted); n_prompt_tokens/n_ctx are set
/// (>= 0) only for context_length_exceeded.
struct ApiError : std::runtime_error {
  ApiError(int status, const std::string& message, std::string code = {}, std::string param = {})
      : std::runtime_error(message), status(status), code(std::move(code)), param(std::move(param)) {}
  int status;
  std::string code;
  std::string param;
  int64_t n_prompt_tokens = -1;
  int64_t n_ctx = -1;
};

}  // namespace ds4::server
