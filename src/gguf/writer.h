// GGUF v3 writer (spec §2.1). Files are produced in two phases so that a 150 GB model never sits
// in memory:
//   1. declare: set() every metadata value, add_tensor() every tensor (name, type, dims) in file
//      order; offsets and the total size are known from then on;
//   2. stream: begin(sink) writes header + metadata + directory + padding, then
//      write_tensor_data() takes each tensor's bytes, in declaration order, in chunks of any size
//      (a chunk never spans two tensors); padding between tensors is inserted automatically;
//      finish() checks that every byte arrived and commits the sink.
// A generator drives it from one loop:
//   gguf::Writer w; w.set(...);
//   for (const auto& spec : model::expected_tensors(cfg))
//     w.add_tensor(spec.name, model::recipe_type(spec, recipe), spec.shape);
//   gguf::FileSink sink(path); w.begin(sink);
//   for (const auto& t : w.tensors()) { /* produce t.n_bytes bytes */ w.write_tensor_data(chunk); }
//   w.finish();
// For tests, add_tensor(name, type, dims, bytes) keeps the data and to_bytes() / write_file()
// do everything at once.
//
// Layout written (same as ggml): tensors are placed in declaration order, each at the next
// multiple of the alignment; every tensor, the last included, is followed by zero padding up
// to the alignment. general.alignment is written only when set_alignment() was called.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/ggml_type.h"
#include "gguf/format.h"
#include "gguf/value.h"

namespace ds4::gguf {

/// Destination of a writer's bytes.
class Sink {
 public:
  virtual ~Sink() = default;
  /// Appends bytes. Throws ds4::Error on failure.
  virtual void write(std::span<const uint8_t> bytes) = 0;
  /// Called once after the last byte. Throws ds4::Error on failure.
  virtual void finish() {}
};

/// Collects the file in memory.
class MemorySink final : public Sink {
 public:
  void write(std::span<const uint8_t> bytes) override { bytes_.insert(bytes_.end(), bytes.begin(), bytes.end()); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

/// Writes `<path>.partial` (buffered) and renames it to `path` in finish(), so an interrupted
/// write never leaves a file that looks complete. The partial file is removed if the sink is
/// destroyed before finish(). No fsync is done. Errors: "<path>: cannot create: ...",
/// "<path>: write failed: ...", "<path>: cannot rename ...".
class FileSink final : public Sink {
 public:
  explicit FileSink(std::filesystem::path path);
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;
  ~FileSink() override;
  void write(std::span<const uint8_t> bytes) override;
  void finish() override;

 private:
  void flush();
  void write_fully(const uint8_t* p, size_t n);
  std::filesystem::path path_;
  std::filesystem::path partial_;
  int fd_ = -1;
  std::vector<uint8_t> buffer_;
};

/// One declared tensor with its computed place in the data section.
struct TensorDecl {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<uint64_t> dims;  // GGUF order, 1..8 entries, all > 0
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;        // ceil(n_elements / block) * block_bytes
  uint64_t offset = 0;         // relative to the data section, a multiple of the alignment
};

/// Builds a GGUF v3 file; see the file comment for the two phases. All misuse throws
/// ds4::Error with a "gguf writer: ..." message.
class Writer {
 public:
  /// Adds a metadata entry (written in call order). Throws on an empty or repeated key, and
  /// for "general.alignment" unless it is a u32 power of two set before any tensor.
  void set(std::string key, Value value);
  /// Sets the tensor-data alignment and writes it as general.alignment (u32). Must be a
  /// non-zero power of two and be called before add_tensor().
  void set_alignment(uint32_t alignment);
  uint32_t alignment() const { return alignment_; }
  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }

  /// Declares a tensor for streaming (data supplied later by write_tensor_data). Returns its
  /// index. Throws on an empty or repeated name, rank outside 1..8, a zero dim, an element
  /// count above INT64_MAX, an unknown type, dims[0] not a multiple of the type's block size
  /// (ggml cannot address partial blocks), or a byte size overflow.
  size_t add_tensor(std::string name, GgmlType type, std::vector<uint64_t> dims);
  /// Declares a tensor and keeps a copy of its bytes (for to_bytes / write_file). Throws when
  /// data.size() differs from the tensor's byte size.
  size_t add_tensor(std::string name, GgmlType type, std::vector<uint64_t> dims, std::span<const uint8_t> data);
  const std::vector<TensorDecl>& tensors() const { return tensors_; }

  /// Absolute file offset of the data section (header, metadata, directory and padding).
  uint64_t data_offset() const;
  /// Size of the complete file.
  uint64_t file_size() const;

  /// Writes header, metadata, directory and padding to `sink`; no declaration is allowed after.
  void begin(Sink& sink);
  /// Appends bytes of the current tensor (declaration order). A chunk may not exceed what the
  /// current tensor still needs; zero-length chunks are fine.
  void write_tensor_data(std::span<const uint8_t> bytes);
  /// Index of the tensor the next write_tensor_data() bytes belong to (tensors().size() when
  /// all are complete).
  size_t current_tensor() const { return current_; }
  /// Bytes the current tensor still needs.
  uint64_t current_remaining() const;
  /// Checks that every tensor is complete and finishes the sink.
  void finish();

  /// Whole file in memory; every tensor must have been declared with its data. One-shot.
  std::vector<uint8_t> to_bytes();
  /// Whole file to `path` through a FileSink; every tensor must have its data. One-shot.
  void write_file(const std::filesystem::path& path);

 private:
  enum class State { Declaring, Streaming, Done };
  void require_declaring(const char* what) const;
  uint64_t data_section_end() const;
  void write_all_in_memory(Sink& sink);

  State state_ = State::Declaring;
  uint32_t alignment_ = kDefaultAlignment;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<TensorDecl> tensors_;
  std::vector<std::optional<std::vector<uint8_t>>> data_;
  std::unordered_set<std::string> keys_;
  std::unordered_set<std::string> names_;
  Sink* sink_ = nullptr;
  size_t current_ = 0;
  uint64_t written_ = 0;  // bytes of the current tensor already written
};

}  // namespace ds4::gguf
