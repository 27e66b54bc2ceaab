// Minimal NumPy .npy (format 1.0) writer for the dump tool: little-endian f32 ('<f4') and i32
// ('<i4') arrays in C order, which numpy.load reads without options.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ds4::dump {

/// The complete .npy header (magic, version 1.0, header length, dict, padding to a multiple
/// of 64 bytes, final newline) for an array of `descr` ("<f4" or "<i4") with `shape`
/// (numpy order; empty = scalar). Throws ds4::Error for another descr or a negative dim.
std::string npy_header(const std::string& descr, const std::vector<int64_t>& shape);

/// Writes `values` as a .npy file of dtype float32 and `shape` (product must equal
/// values.size()). Throws ds4::Error naming the file when the shape does not match or the
/// file cannot be written.
void write_npy(const std::string& path, std::span<const float> values,
               const std::vector<int64_t>& shape);

/// Same for int32 values.
void write_npy(const std::string& path, std::span<const int32_t> values,
               const std::vector<int64_t>& shape);

}  // namespace ds4::dump
