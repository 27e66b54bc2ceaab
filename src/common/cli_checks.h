// CLI11 validators shared by the command-line front ends (ds4, ds4-server, ds4-bench).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace ds4 {

/// Refuses an empty value for a list option (e.g. `--gpu-devices ""`), which would otherwise read
/// as "option not given": "needs at least one <what>, e.g. <example>". Parse-time error (exit 2).
inline CLI::Validator non_empty_list(const std::string& what, const std::string& example) {
  return CLI::Validator(
      [what, example](std::string& s) {
        return s.empty() ? "needs at least one " + what + ", e.g. " + example : std::string();
      },
      "LIST", "non-empty");
}

}  // namespace ds4
