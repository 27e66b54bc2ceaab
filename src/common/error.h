// Errors: every failure a user can cause (bad file, bad flag, bad request) is reported as a
// ds4::Error carrying a complete, human-readable message. Front ends catch it, print it and exit
// non-zero (CLI) or map it to the API's error shape (server). Internal invariants use assert.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace ds4 {

/// A user-visible failure with a complete message ("model.gguf: offset 24: bad magic ...").
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Throws ds4::Error with a fmt-formatted message. Never returns.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace ds4
