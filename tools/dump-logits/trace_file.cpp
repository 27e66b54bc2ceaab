#include "trace_file.h"

#include <bit>

#include "common/error.h"

namespace ds4::dump {
namespace {

static_assert(std::endian::native == std::endian::little, "the trace file is host order");

template <typename T>
void put(std::ofstream& f, T v) {
  f.write(reinterpret_cast<const char*>(&v), sizeof v);
}

}  // namespace

TraceFile::TraceFile(const std::string& path, std::vector<std::string> filters)
    : path_(path), filters_(std::move(filters)), out_(path, std::ios::binary | std::ios::trunc) {
  if (!out_) fail("{}: cannot open for writing", path);
  out_.write("DS4TRACE", 8);
  put<uint32_t>(out_, 1);
}

bool TraceFile::wanted(const std::string& name) const {
  if (filters_.empty()) return true;
  for (const std::string& f : filters_)
    if (name.find(f) != std::string::npos) return true;
  return false;
}

void TraceFile::record(int64_t pos, const std::string& name, uint8_t dtype, const void* data,
                       size_t count, const std::vector<int64_t>& shape) {
  if (!wanted(name)) return;
  put<uint32_t>(out_, static_cast<uint32_t>(name.size()));
  out_.write(name.data(), static_cast<std::streamsize>(name.size()));
  put<int64_t>(out_, pos);
  put<uint8_t>(out_, dtype);
  put<uint8_t>(out_, static_cast<uint8_t>(shape.size()));
  put<uint16_t>(out_, 0);
  for (int64_t d : shape) put<int64_t>(out_, d);
  out_.write(static_cast<const char*>(data), static_cast<std::streamsize>(count * 4));
  if (!out_) fail("{}: write failed", path_);
  ++records_;
}

void TraceFile::f32(int64_t pos, const std::string& name, std::span<const float> values,
                    const std::vector<int64_t>& shape) {
  record(pos, name, 0, values.data(), values.size(), shape);
}

void TraceFile::i32(int64_t pos, const std::string& name, std::span<const int32_t> values,
                    const std::vector<int64_t>& shape) {
  record(pos, name, 1, values.data(), values.size(), shape);
}

void TraceFile::close() {
  out_.flush();
  if (!out_) fail("{}: write failed", path_);
  out_.close();
}

}  // namespace ds4::dump
