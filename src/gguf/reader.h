// GGUF v3 reader (spec §2.1). Parses the header, every metadata value, the tensor directory
// and the data-section start, validating everything against the file size before touching it.
// Nothing is copied: keys, strings and tensor data are views into the mapping (or the caller's
// buffer) and stay valid as long as the Reader lives (moving a Reader keeps them valid).
//
// Every malformed input throws ds4::Error naming the file, the byte offset and the problem:
//   "model.gguf: offset 24: truncated file: key of metadata entry 0 needs 8 bytes, 3 remain"
// Checks: magic, version 3, counts against the bytes remaining (no allocation from a bogus
// count), string lengths, value type ids 0..12, bool bytes 0/1, array nesting <= 8,
// duplicate and empty metadata keys, general.alignment (u32, non-zero power of two), tensor
// rank 1..8, zero dims, element count <= INT64_MAX, byte size overflow, data offsets that are
// multiples of the alignment (a deliberate addition to ds4's checks so that every zero-copy
// tensor pointer is aligned), tensor data past the end of the file, duplicate tensor names.
// Overlapping tensors are allowed.
//
// A tensor whose ggml type id this build does not know is recorded with type_known == false
// and n_bytes == 0 (its start offset is still checked); model layout validation rejects it if
// the model needs it.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/ggml_type.h"
#include "gguf/format.h"
#include "gguf/value.h"

namespace ds4::gguf {

struct ReaderState;

/// A zero-copy view of one metadata value inside a parsed file. Typed accessors follow ds4's
/// metadata type rules (spec §1.3) and throw ds4::Error on a type mismatch:
///   "model.gguf: metadata key 'deepseek4.block_count' has type f32, expected u32".
class ValueRef {
 public:
  /// The metadata key this value belongs to (array items report their parent's key).
  std::string_view key() const { return key_; }
  ValueType type() const { return type_; }
  /// File offset of the first byte of the value (after the key and type id).
  uint64_t offset() const { return offset_; }
  /// Bytes the value occupies in the file.
  uint64_t byte_size() const { return size_; }

  /// Item type of an array value. Throws ds4::Error when this is not an array.
  ValueType item_type() const;
  /// Number of items of an array value. Throws ds4::Error when this is not an array.
  uint64_t size() const;
  /// Type for messages: "u32", "array of f32", "array of array of u8".
  std::string type_name() const;

  /// u32 only (ds4 `required_u32`).
  uint32_t as_u32() const;
  /// u64 or u32 (ds4 `required_u64`).
  uint64_t as_u64() const;
  /// f32, f64 (narrowed), u32 or i32 (converted) (ds4 `required_f32`).
  float as_f32() const;
  /// bool only.
  bool as_bool() const;
  /// string only; the view points into the file.
  std::string_view as_string() const;
  /// Array of any integer type, widened to int64. Throws when a u64 item exceeds INT64_MAX.
  std::vector<int64_t> as_int_array() const;
  /// Array of f32 or f64 (narrowed to float).
  std::vector<float> as_f32_array() const;
  /// Array of strings; the views point into the file.
  std::vector<std::string_view> as_string_array() const;
  /// The items of an array (of any item type), each as its own ValueRef.
  std::vector<ValueRef> array_items() const;
  /// An owned copy of the value, exactly as stored (any type, nested arrays included).
  Value to_value() const;

 private:
  friend class Reader;
  friend struct ReaderState;
  [[noreturn]] void type_error(std::string_view expected) const;
  const uint8_t* bytes() const { return base_ + offset_; }

  const std::string* source_ = nullptr;  // file name for messages (owned by the reader state)
  const uint8_t* base_ = nullptr;        // start of the file
  std::string_view key_;
  uint64_t offset_ = 0;
  uint64_t size_ = 0;
  ValueType type_ = ValueType::U8;
};

/// One tensor directory entry, validated against the file.
struct TensorInfo {
  std::string_view name;                 // view into the file
  uint32_t type_id = 0;                  // raw ggml type id (may be unknown, see type_known)
  uint32_t n_dims = 0;                   // 1..kMaxDims
  std::array<uint64_t, kMaxDims> dims{}; // GGUF order (dims[0] innermost); unused dims are 1
  uint64_t n_elements = 0;               // product of the dims
  uint64_t offset = 0;                   // data offset relative to the data section, as stored
  uint64_t file_offset = 0;              // absolute byte offset of the data in the file
  uint64_t n_bytes = 0;                  // ceil(n_elements / block) * block_bytes; 0 if unknown
  bool type_known = false;               // type_id is in the ggml type table
  const uint8_t* data = nullptr;         // first data byte inside the mapping
  uint64_t directory_offset = 0;         // file offset of this entry in the tensor directory

  /// The dims that exist, GGUF order.
  std::span<const uint64_t> shape() const { return {dims.data(), n_dims}; }
  /// The tensor's bytes (empty when the type is unknown).
  std::span<const uint8_t> bytes() const { return {data, static_cast<size_t>(n_bytes)}; }
  GgmlType type() const { return static_cast<GgmlType>(type_id); }
  /// "[4096, 1024]"
  std::string shape_string() const;
};

/// A parsed GGUF file. Move-only.
class Reader {
 public:
  /// Maps `path` read-only and parses it. Messages name the file as `path` is spelled.
  static Reader open(const std::filesystem::path& path);
  /// Parses a caller-owned buffer, which must outlive the Reader; `name` is used in messages.
  static Reader from_memory(std::span<const uint8_t> bytes, std::string name = "<memory>");
  /// Parses a buffer the Reader takes ownership of.
  static Reader from_bytes(std::vector<uint8_t> bytes, std::string name = "<memory>");

  Reader(Reader&&) noexcept;
  Reader& operator=(Reader&&) noexcept;
  ~Reader();

  const std::string& name() const;
  uint32_t version() const;
  /// Tensor-data alignment: general.alignment or 32.
  uint32_t alignment() const;
  /// Absolute file offset of the data section: align_up(end of directory, alignment).
  uint64_t data_offset() const;
  uint64_t file_size() const;
  /// The whole file.
  std::span<const uint8_t> bytes() const;

  /// Every metadata entry in file order.
  const std::vector<ValueRef>& metadata() const;
  /// The entry for `key`, or nullptr.
  const ValueRef* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  /// The entry for `key`. Throws ds4::Error "<file>: metadata key 'k' is missing" when absent.
  const ValueRef& at(std::string_view key) const;

  /// Typed getters: `at(key).as_*()`; a missing key throws
  /// "<file>: metadata key 'k' is missing (expected u32)", a wrong type throws as ValueRef does.
  uint32_t get_u32(std::string_view key) const;
  uint64_t get_u64(std::string_view key) const;
  float get_f32(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  std::string_view get_string(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;
  std::vector<float> get_f32_array(std::string_view key) const;
  std::vector<std::string_view> get_string_array(std::string_view key) const;

  /// Every tensor in directory order.
  const std::vector<TensorInfo>& tensors() const;
  /// The tensor called `name`, or nullptr.
  const TensorInfo* find_tensor(std::string_view name) const;
  /// The tensor called `name`. Throws ds4::Error "<file>: tensor 'x' is missing" when absent.
  const TensorInfo& tensor(std::string_view name) const;

 private:
  explicit Reader(std::unique_ptr<ReaderState> state);
  const ValueRef& require(std::string_view key, std::string_view expected) const;
  std::unique_ptr<ReaderState> s_;
};

}  // namespace ds4::gguf
