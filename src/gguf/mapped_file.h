// Read-only memory mapping of a whole file (RAII). The GGUF reader parses the mapping in place
// and hands out pointers into it, so tensor data is never copied (spec §2.1: "mmapped
// read-only"). Pages are loaded lazily by the kernel as tensors are touched.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace ds4::gguf {

/// A read-only, private mapping of a file. Move-only; unmaps on destruction.
class MappedFile {
 public:
  /// Maps `path` read-only. Throws ds4::Error ("<path>: cannot open: <strerror>") when the file
  /// cannot be opened, stat'ed or mapped, or is not a regular file. An empty file gives an
  /// empty mapping (data() == nullptr, size() == 0).
  explicit MappedFile(const std::filesystem::path& path);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, static_cast<size_t>(size_)}; }
  const std::string& path() const { return path_; }

 private:
  void release() noexcept;

  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace ds4::gguf
