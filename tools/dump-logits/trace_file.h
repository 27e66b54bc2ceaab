// The dump tool's trace file: every intermediate cpu::Forward reports through its
// ForwardTrace hook, appended as one record per (position, name). Layout (little-endian):
//
//   file   = magic "DS4TRACE" (8 bytes), u32 version = 1, record*
//   record = u32 name_len, name (UTF-8, name_len bytes), i64 pos, u8 dtype (0 = f32, 1 = i32),
//            u8 ndim, u16 0, i64 dims[ndim] (numpy order), prod(dims) 4-byte values
//
// tools/reference/parity.py (read_trace) parses it with struct + numpy.frombuffer.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "backend/cpu/forward.h"

namespace ds4::dump {

/// Writes a trace file. `filters`: record only names containing one of these substrings
/// (empty = every name). Throws ds4::Error naming the file when it cannot be created or
/// written.
class TraceFile final : public cpu::ForwardTrace {
 public:
  TraceFile(const std::string& path, std::vector<std::string> filters);

  void f32(int64_t pos, const std::string& name, std::span<const float> values,
           const std::vector<int64_t>& shape) override;
  void i32(int64_t pos, const std::string& name, std::span<const int32_t> values,
           const std::vector<int64_t>& shape) override;

  /// Flushes and closes the file; throws ds4::Error when a write failed.
  void close();
  /// Records written so far.
  uint64_t records() const { return records_; }

 private:
  bool wanted(const std::string& name) const;
  void record(int64_t pos, const std::string& name, uint8_t dtype, const void* data,
              size_t count, const std::vector<int64_t>& shape);

  std::string path_;
  std::vector<std::string> filters_;
  std::ofstream out_;
  uint64_t records_ = 0;
};

}  // namespace ds4::dump
