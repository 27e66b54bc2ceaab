// Random identifiers of the server's API objects (product-surface §3.5): tool ids `call_` /
// `toolu_` + 32 lowercase hex characters, response ids `resp_` + 24 hex, all from /dev/urandom.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ds4::server {

/// `n_bytes` random bytes from /dev/urandom as 2*n_bytes lowercase hex characters.
/// Throws ds4::Error when /dev/urandom cannot be read.
std::string random_hex(size_t n_bytes);

/// `prefix` followed by 32 random hex characters, e.g. new_tool_id("call_").
std::string new_tool_id(std::string_view prefix);

}  // namespace ds4::server
