// CLI11 validators shared by the command-line front ends (ds4, ds4-server, ds4-bench).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
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

/// A numeric option's type check, run before its range check so that a value that is not a
/// number says so ("Failed parsing abc as a number") instead of "not in range". No help text.
template <typename T>
CLI::Validator parses_as(const std::string& what) {
  return CLI::Validator(
      [what](std::string& s) {
        T v{};
        return CLI::detail::lexical_cast(s, v) ? std::string() : "Failed parsing " + s + " as " + what;
      },
      "", "parses as " + what);
}
inline CLI::Validator number() { return parses_as<double>("a number"); }
/// As number(), for integer options of type T ("Failed parsing 12x as a whole number").
template <typename T = int64_t>
CLI::Validator whole_number() {
  return parses_as<T>("a whole number");
}

/// Parse errors printed as "<app name>: <message>" (then CLI11's "Run with --help ..." line), as
/// every other error of the front ends is; the exit code stays the caller's (2).
inline void name_parse_errors(CLI::App& app) {
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    return a->get_name() + ": " + CLI::FailureMessage::simple(a, e);
  });
}

}  // namespace ds4
