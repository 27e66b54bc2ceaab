#include "npy.h"

#include <bit>
#include <fstream>

#include "common/error.h"

namespace ds4::dump {
namespace {

static_assert(std::endian::native == std::endian::little, "the .npy writer emits host order");

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void write_array(const std::string& path, const std::string& descr, const void* data,
                 size_t count, const std::vector<int64_t>& shape) {
  const std::string header = npy_header(descr, shape);
  if (static_cast<size_t>(element_count(shape)) != count)
    fail("{}: {} values do not fill the shape ({} elements)", path, count, element_count(shape));
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail("{}: cannot open for writing", path);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(count * 4));
  if (!f) fail("{}: write failed", path);
}

}  // namespace

std::string npy_header(const std::string& descr, const std::vector<int64_t>& shape) {
  if (descr != "<f4" && descr != "<i4") fail("npy: unsupported dtype '{}'", descr);
  std::string dims;  // "(2, 3)", "(5,)" (a 1-tuple keeps its comma), "()"
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) fail("npy: negative dimension {}", shape[i]);
    if (i > 0) dims.append(", ");
    dims.append(std::to_string(shape[i]));
  }
  if (shape.size() == 1) dims.push_back(',');
  std::string dict =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, dims);
  // magic(6) + version(2) + length(2) + dict + padding + '\n' is a multiple of 64.
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(dict.size() & 0xff));
  out.push_back(static_cast<char>(dict.size() >> 8));
  out.append(dict);
  return out;
}

void write_npy(const std::string& path, std::span<const float> values,
               const std::vector<int64_t>& shape) {
  write_array(path, "<f4", values.data(), values.size(), shape);
}

void write_npy(const std::string& path, std::span<const int32_t> values,
               const std::vector<int64_t>& shape) {
  write_array(path, "<i4", values.data(), values.size(), shape);
}

}  // namespace ds4::dump
