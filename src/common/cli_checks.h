// CLI11 validators and parsing shared by the command-line front ends (ds4, ds4-server, ds4-bench)
// and the tools (ds4-make-model, ds4-tokenize, ds4-dump-logits).
#pragma once

#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

namespace ds4 {

/// Parse errors printed as "<app name>: <message>" (then CLI11's "Run with --help ..." line), as
/// every other error of the front ends is; the exit code stays the caller's (2).
inline void name_parse_errors(CLI::App& app) {
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    return a->get_name() + ": " + CLI::FailureMessage::simple(a, e);
  });
}

/// app.parse(args...) (argc, argv or a reversed argument vector); a parse error prints CLI11's
/// message named as name_parse_errors does (--help: the help text) and exits: 0 for --help, 2 for
/// every usage error (CLI11's own exit codes differ by error: 106 for a missing option, 109 for an
/// unknown one, ...).
template <typename... Args>
void parse_or_exit(CLI::App& app, Args&&... args) {
  name_parse_errors(app);
  try {
    app.parse(std::forward<Args>(args)...);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    std::exit(rc == 0 ? 0 : 2);
  }
}

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
/// number says so ("Failed parsing abc as a number") instead of "not in range"; a NaN is refused
/// too (it would pass the range check). No help text.
/// Integer types are parsed strictly (digits, a sign only for signed types, no wrap-around or
/// clamping): CLI11's own conversion takes "-1" as an unsigned type's largest value and clamps
/// values past the range, so `--seed -1` and `--seed 99999999999999999999` would silently become
/// 18446744073709551615, and `-n 99999999999999999999` 9223372036854775807.
template <typename T>
CLI::Validator parses_as(const std::string& what) {
  return CLI::Validator(
      [what](std::string& s) {
        T v{};
        if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
          const char* end = s.data() + s.size();
          const auto r = std::from_chars(s.data(), end, v);
          const std::string max = std::to_string(std::numeric_limits<T>::max());
          if (r.ec == std::errc::result_out_of_range) return "Value " + s + " is larger than " + max;
          const bool ok = r.ec == std::errc() && r.ptr == end && !s.empty();
          // No lower bound here: the option's range check (e.g. --seed's >= 1) reports it.
          return ok ? std::string() : "Failed parsing " + s + " as " + what + " (digits only, at most " + max + ")";
        } else if constexpr (std::is_integral_v<T>) {  // signed: a value past the type's range is refused too
          const char* end = s.data() + s.size();
          const auto r = std::from_chars(s.data(), end, v);
          if (r.ec == std::errc::result_out_of_range && r.ptr == end)
            return s[0] == '-' ? "Value " + s + " is smaller than " + std::to_string(std::numeric_limits<T>::min())
                               : "Value " + s + " is larger than " + std::to_string(std::numeric_limits<T>::max());
          return r.ec == std::errc() && r.ptr == end && !s.empty() ? std::string() : "Failed parsing " + s + " as " + what;
        } else {
          if (!CLI::detail::lexical_cast(s, v)) return "Failed parsing " + s + " as " + what;
          // A NaN passes every range check (its comparisons are false): refused here.
          if constexpr (std::is_floating_point_v<T>)
            if (std::isnan(v)) return "Failed parsing " + s + " as " + what + " (NaN is not a value)";
          return std::string();
        }
      },
      "", "parses as " + what);
}
inline CLI::Validator number() { return parses_as<double>("a number"); }
/// As number(), for integer options of type T ("Failed parsing 12x as a whole number").
template <typename T = int64_t>
CLI::Validator whole_number() {
  return parses_as<T>("a whole number");
}

/// A lower bound alone, for counts with no meaningful upper one (e.g. -n): "Value 0 is less than 1"
/// (CLI::Range would print an arbitrary upper bound). Put it after whole_number(), which rejects
/// what does not parse.
template <typename T = int64_t>
CLI::Validator at_least(T lo) {
  return CLI::Validator(
      [lo](std::string& s) {
        T v{};
        if (CLI::detail::lexical_cast(s, v) && v < lo) return "Value " + s + " is less than " + std::to_string(lo);
        return std::string();
      },
      "at least " + std::to_string(lo));
}

/// The DS4_THREADS environment variable, read when -t/--threads is not given (product surface
/// §2.1): 0 when unset or empty; otherwise a whole number from 1 to 4096 (the -t range). Anything
/// else prints "<prog>: DS4_THREADS must be a whole number from 1 to 4096, got "<value>"" and
/// exits with 2, as a bad -t does.
inline int threads_from_env(const char* prog) {
  const char* v = std::getenv("DS4_THREADS");
  if (!v || !*v) return 0;
  int n = 0;
  const char* end = v + std::strlen(v);
  const auto r = std::from_chars(v, end, n);
  if (r.ec != std::errc() || r.ptr != end || n < 1 || n > 4096) {
    std::fprintf(stderr, "%s: DS4_THREADS must be a whole number from 1 to 4096, got \"%s\"\n", prog, v);
    std::exit(2);
  }
  return n;
}

}  // namespace ds4
