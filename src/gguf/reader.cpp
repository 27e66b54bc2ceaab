#include "gguf/reader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_map>
#include <utility>

#include "common/error.h"
#include "gguf/mapped_file.h"

namespace ds4::gguf {

namespace {

// Smallest encoding of one item of `type` inside an array: used to reject counts that cannot
// fit in the bytes that remain before anything is allocated or looped over.
uint64_t min_encoded_size(ValueType type) {
  switch (type) {
    case ValueType::STRING: return 8;   // u64 length, possibly zero bytes
    case ValueType::ARRAY: return 12;   // u32 item type + u64 count
    default: return scalar_size(type);
  }
}

// Entries reserve at most this many slots up front; beyond that vectors grow only as entries
// actually parse, so a bogus count in a huge file never triggers a huge allocation.
constexpr uint64_t kMaxReserve = 1u << 16;

// Smallest metadata entry: empty key (8) + type (4) + one u8 value (1).
constexpr uint64_t kMinMetadataEntry = 13;
// Smallest tensor directory entry: empty name (8) + ndim (4) + one dim (8) + type (4) + offset (8).
constexpr uint64_t kMinTensorEntry = 32;

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Bytes taken by an already validated value of `type` starting at `p`.
uint64_t encoded_size(const uint8_t* p, ValueType type) {
  switch (type) {
    case ValueType::STRING: return 8 + load<uint64_t>(p);
    case ValueType::ARRAY: {
      const auto item = static_cast<ValueType>(load<uint32_t>(p));
      const uint64_t count = load<uint64_t>(p + 4);
      if (item != ValueType::STRING && item != ValueType::ARRAY) return 12 + count * scalar_size(item);
      uint64_t off = 12;
      for (uint64_t i = 0; i < count; ++i) off += encoded_size(p + off, item);
      return off;
    }
    default: return scalar_size(type);
  }
}

// Decodes an already validated value into an owned Value.
Value decode(const uint8_t* p, ValueType type) {
  switch (type) {
    case ValueType::U8: return Value::u8(load<uint8_t>(p));
    case ValueType::I8: return Value::i8(load<int8_t>(p));
    case ValueType::U16: return Value::u16(load<uint16_t>(p));
    case ValueType::I16: return Value::i16(load<int16_t>(p));
    case ValueType::U32: return Value::u32(load<uint32_t>(p));
    case ValueType::I32: return Value::i32(load<int32_t>(p));
    case ValueType::F32: return Value::f32(load<float>(p));
    case ValueType::BOOL: return Value::boolean(load<uint8_t>(p) != 0);
    case ValueType::STRING:
      return Value::string(std::string(reinterpret_cast<const char*>(p + 8), load<uint64_t>(p)));
    case ValueType::U64: return Value::u64(load<uint64_t>(p));
    case ValueType::I64: return Value::i64(load<int64_t>(p));
    case ValueType::F64: return Value::f64(load<double>(p));
    case ValueType::ARRAY: {
      const auto item = static_cast<ValueType>(load<uint32_t>(p));
      const uint64_t count = load<uint64_t>(p + 4);
      std::vector<Value> items;
      items.reserve(static_cast<size_t>(std::min<uint64_t>(count, kMaxReserve)));
      uint64_t off = 12;
      for (uint64_t i = 0; i < count; ++i) {
        items.push_back(decode(p + off, item));
        off += encoded_size(p + off, item);
      }
      return Value::array(item, std::move(items));
    }
  }
  return Value();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Parser state

struct ReaderState {
  std::string name;
  std::optional<MappedFile> file;
  std::vector<uint8_t> owned;
  const uint8_t* data = nullptr;
  uint64_t size = 0;

  uint32_t version = 0;
  uint32_t alignment = kDefaultAlignment;
  uint64_t data_offset = 0;
  std::vector<ValueRef> metadata;
  std::unordered_map<std::string_view, size_t> meta_index;
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string_view, size_t> tensor_index;

  void parse();
};

namespace {

// Bounds-checked little-endian reads over the file. `context` names the entry being parsed
// ("metadata key 'x'", "tensor 'y'") and prefixes every error.
class Cursor {
 public:
  explicit Cursor(const ReaderState& s) : s_(s) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return s_.size - pos_; }
  void set_context(std::string context) { context_ = std::move(context); }

  template <typename... Args>
  [[noreturn]] void fail_at(uint64_t off, fmt::format_string<Args...> f, Args&&... args) const {
    const std::string msg = fmt::format(f, std::forward<Args>(args)...);
    if (context_.empty()) fail("{}: offset {}: {}", s_.name, off, msg);
    fail("{}: offset {}: {}: {}", s_.name, off, context_, msg);
  }

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining()) {
      fail_at(pos_, "truncated file: {} needs {} bytes, {} remain", what, n, remaining());
    }
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    const T v = load<T>(s_.data + pos_);
    pos_ += sizeof(T);
    return v;
  }

  void skip(uint64_t n, std::string_view what) {
    need(n, what);
    pos_ += n;
  }

  std::string_view string(std::string_view what) {
    const uint64_t len_off = pos_;
    const uint64_t len = read<uint64_t>(what);
    if (len > remaining()) {
      fail_at(len_off, "{} length {} runs past the end of the file ({} bytes remain)", what, len,
              remaining());
    }
    std::string_view sv(reinterpret_cast<const char*>(s_.data + pos_), static_cast<size_t>(len));
    pos_ += len;
    return sv;
  }

  // Validates one value of `type`; `depth` is the array nesting level of its container.
  void skip_value(ValueType type, uint32_t depth) {
    switch (type) {
      case ValueType::STRING:
        string("string value");
        return;
      case ValueType::BOOL: {
        const uint64_t off = pos_;
        const uint8_t b = read<uint8_t>("bool value");
        if (b > 1) fail_at(off, "bool value {} is neither 0 nor 1", b);
        return;
      }
      case ValueType::ARRAY:
        skip_array(depth + 1);
        return;
      default:
        skip(scalar_size(type), "value");
        return;
    }
  }

 private:
  void skip_array(uint32_t level) {
    if (level > kMaxArrayDepth) fail_at(pos_, "arrays nested deeper than {} levels", kMaxArrayDepth);
    const uint64_t type_off = pos_;
    const uint32_t item = read<uint32_t>("array item type");
    if (item > kMaxValueType) fail_at(type_off, "unknown array item type {}", item);
    const auto item_type = static_cast<ValueType>(item);
    const uint64_t count_off = pos_;
    const uint64_t count = read<uint64_t>("array count");
    const uint64_t min = min_encoded_size(item_type);
    if (count > remaining() / min) {
      fail_at(count_off,
              "array count {} is impossible: {} items need at least {} bytes each, {} bytes remain "
              "(a truncated or corrupt file)",
              count, value_type_name(item), min, remaining());
    }
    if (item_type == ValueType::BOOL || item_type == ValueType::STRING || item_type == ValueType::ARRAY) {
      for (uint64_t i = 0; i < count; ++i) skip_value(item_type, level);  // per-item checks
    } else {
      skip(count * min, "array items");
    }
  }

  const ReaderState& s_;
  uint64_t pos_ = 0;
  std::string context_;
};

}  // namespace

void ReaderState::parse() {
  Cursor c(*this);
  c.set_context("header");
  if (c.remaining() < sizeof(uint32_t))  // not even the magic: say what the file is not
    c.fail_at(0, "{} bytes, shorter than the 4-byte magic \"GGUF\"; not a GGUF file", c.remaining());
  const uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kMagic) {
    c.fail_at(0, "bad magic 0x{:08x}, expected 0x{:08x} (\"GGUF\"); not a GGUF file", magic, kMagic);
  }
  version = c.read<uint32_t>("version");
  if (version != kVersion) {
    if (version == 0x03000000u) c.fail_at(4, "big-endian GGUF files are not supported");
    c.fail_at(4, "unsupported GGUF version {}, expected {}", version, kVersion);
  }
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  if (n_kv > c.remaining() / kMinMetadataEntry) {
    c.fail_at(16, "metadata count {} is impossible: each entry needs at least {} bytes, {} bytes remain",
              n_kv, kMinMetadataEntry, c.remaining());
  }
  if (n_tensors > c.remaining() / kMinTensorEntry) {
    c.fail_at(8, "tensor count {} is impossible: each entry needs at least {} bytes, {} bytes remain",
              n_tensors, kMinTensorEntry, c.remaining());
  }

  // Metadata.
  metadata.reserve(static_cast<size_t>(std::min(n_kv, kMaxReserve)));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t entry_off = c.pos();
    c.set_context(fmt::format("metadata entry {}", i));
    const std::string_view key = c.string("key");
    if (key.empty()) c.fail_at(entry_off, "empty metadata key");
    c.set_context(fmt::format("metadata key '{}'", key));
    const uint64_t type_off = c.pos();
    const uint32_t type = c.read<uint32_t>("value type");
    if (type > kMaxValueType) c.fail_at(type_off, "unknown value type {}", type);
    const uint64_t value_off = c.pos();
    c.skip_value(static_cast<ValueType>(type), 0);

    ValueRef v;
    v.source_ = &name;
    v.base_ = data;
    v.key_ = key;
    v.offset_ = value_off;
    v.size_ = c.pos() - value_off;
    v.type_ = static_cast<ValueType>(type);
    const auto [it, inserted] = meta_index.emplace(key, metadata.size());
    if (!inserted) {
      c.set_context("");
      c.fail_at(entry_off, "duplicate metadata key '{}' (first defined at offset {})", key,
                metadata[it->second].offset_);
    }
    metadata.push_back(v);
  }

  if (auto it = meta_index.find(kAlignmentKey); it != meta_index.end()) {
    const ValueRef& v = metadata[it->second];
    c.set_context("");
    if (v.type_ != ValueType::U32) {
      c.fail_at(v.offset_, "{} has type {}, expected u32", kAlignmentKey, v.type_name());
    }
    const uint32_t a = load<uint32_t>(v.bytes());
    if (a == 0) c.fail_at(v.offset_, "{} is 0; it must be a non-zero power of two", kAlignmentKey);
    if (!is_power_of_two(a)) c.fail_at(v.offset_, "{} {} is not a power of two", kAlignmentKey, a);
    alignment = a;
  }

  // Tensor directory.
  c.set_context("");
  if (n_tensors > c.remaining() / kMinTensorEntry) {
    c.fail_at(8, "tensor count {} is impossible: each directory entry needs at least {} bytes, {} bytes remain after the metadata",
              n_tensors, kMinTensorEntry, c.remaining());
  }
  struct FieldOffsets {
    uint64_t dims;
    uint64_t offset;
  };
  std::vector<FieldOffsets> fields;
  tensors.reserve(static_cast<size_t>(std::min(n_tensors, kMaxReserve)));
  fields.reserve(tensors.capacity());
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.directory_offset = c.pos();
    c.set_context(fmt::format("tensor {}", i));
    t.name = c.string("name");
    c.set_context(fmt::format("tensor '{}'", t.name));
    const uint64_t ndim_off = c.pos();
    t.n_dims = c.read<uint32_t>("dimension count");
    if (t.n_dims == 0 || t.n_dims > kMaxDims) {
      c.fail_at(ndim_off, "dimension count {} is out of range 1..{}", t.n_dims, kMaxDims);
    }
    t.dims.fill(1);
    const uint64_t dims_off = c.pos();
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      const uint64_t dim_off = c.pos();
      t.dims[d] = c.read<uint64_t>("dimension");
      if (t.dims[d] == 0) c.fail_at(dim_off, "dimension {} is 0", d);
    }
    const auto n = element_count(t.shape());
    if (!n) c.fail_at(dims_off, "element count of shape {} overflows int64", t.shape_string());
    t.n_elements = *n;
    t.type_id = c.read<uint32_t>("type");
    const uint64_t offset_off = c.pos();
    t.offset = c.read<uint64_t>("data offset");
    const auto [it, inserted] = tensor_index.emplace(t.name, tensors.size());
    if (!inserted) {
      c.set_context("");
      c.fail_at(t.directory_offset, "duplicate tensor name '{}' (tensors {} and {})", t.name, it->second, i);
    }
    tensors.push_back(t);
    fields.push_back({dims_off, offset_off});
  }

  // Data section and per-tensor extents.
  data_offset = align_up(c.pos(), alignment);
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorInfo& t = tensors[i];
    c.set_context(fmt::format("tensor '{}'", t.name));
    if (const auto info = ggml_type_info(t.type_id)) {
      const auto bytes = tensor_nbytes(*info, t.n_elements);
      if (!bytes) {
        c.fail_at(fields[i].dims, "byte size of {} {} elements overflows u64", t.n_elements, info->name);
      }
      t.n_bytes = *bytes;
      t.type_known = true;
    }
    if (t.offset % alignment != 0) {
      c.fail_at(fields[i].offset, "data offset {} is not a multiple of the alignment {}", t.offset, alignment);
    }
    if (data_offset > size || t.offset > size - data_offset || t.n_bytes > size - data_offset - t.offset) {
      c.fail_at(fields[i].offset,
                "data ({} bytes at offset {} of the data section, which starts at {}) extends past the end of the file ({} bytes)",
                t.n_bytes, t.offset, data_offset, size);
    }
    t.file_offset = data_offset + t.offset;
    t.data = data + t.file_offset;
  }
}

// ---------------------------------------------------------------------------------------------
// ValueRef

void ValueRef::type_error(std::string_view expected) const {
  fail("{}: metadata key '{}' has type {}, expected {}", *source_, key_, type_name(), expected);
}

ValueType ValueRef::item_type() const {
  if (type_ != ValueType::ARRAY) type_error("array");
  return static_cast<ValueType>(load<uint32_t>(bytes()));
}

uint64_t ValueRef::size() const {
  if (type_ != ValueType::ARRAY) type_error("array");
  return load<uint64_t>(bytes() + 4);
}

std::string ValueRef::type_name() const {
  if (type_ != ValueType::ARRAY) return value_type_name(type_);
  const ValueType item = item_type();
  if (item == ValueType::ARRAY && size() > 0) return "array of " + array_items().front().type_name();
  return "array of " + value_type_name(item);
}

uint32_t ValueRef::as_u32() const {
  if (type_ != ValueType::U32) type_error("u32");
  return load<uint32_t>(bytes());
}

uint64_t ValueRef::as_u64() const {
  if (type_ == ValueType::U64) return load<uint64_t>(bytes());
  if (type_ == ValueType::U32) return load<uint32_t>(bytes());
  type_error("u64 or u32");
}

float ValueRef::as_f32() const {
  switch (type_) {
    case ValueType::F32: return load<float>(bytes());
    case ValueType::F64: return static_cast<float>(load<double>(bytes()));
    case ValueType::U32: return static_cast<float>(load<uint32_t>(bytes()));
    case ValueType::I32: return static_cast<float>(load<int32_t>(bytes()));
    default: type_error("f32, f64, u32 or i32");
  }
}

bool ValueRef::as_bool() const {
  if (type_ != ValueType::BOOL) type_error("bool");
  return load<uint8_t>(bytes()) != 0;
}

std::string_view ValueRef::as_string() const {
  if (type_ != ValueType::STRING) type_error("string");
  return {reinterpret_cast<const char*>(bytes() + 8), static_cast<size_t>(load<uint64_t>(bytes()))};
}

std::vector<ValueRef> ValueRef::array_items() const {
  const ValueType item = item_type();
  const uint64_t count = size();
  std::vector<ValueRef> out;
  out.reserve(static_cast<size_t>(std::min(count, kMaxReserve)));
  uint64_t off = offset_ + 12;
  for (uint64_t i = 0; i < count; ++i) {
    ValueRef r = *this;
    r.type_ = item;
    r.offset_ = off;
    r.size_ = encoded_size(base_ + off, item);
    off += r.size_;
    out.push_back(r);
  }
  return out;
}

std::vector<int64_t> ValueRef::as_int_array() const {
  if (type_ != ValueType::ARRAY || !is_integer_type(item_type())) type_error("array of integers");
  const ValueType item = item_type();
  const uint64_t count = size();
  const uint32_t width = scalar_size(item);
  const uint8_t* p = bytes() + 12;
  std::vector<int64_t> out(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i, p += width) {
    switch (item) {
      case ValueType::U8: out[i] = load<uint8_t>(p); break;
      case ValueType::I8: out[i] = load<int8_t>(p); break;
      case ValueType::U16: out[i] = load<uint16_t>(p); break;
      case ValueType::I16: out[i] = load<int16_t>(p); break;
      case ValueType::U32: out[i] = load<uint32_t>(p); break;
      case ValueType::I32: out[i] = load<int32_t>(p); break;
      case ValueType::I64: out[i] = load<int64_t>(p); break;
      case ValueType::U64: {
        const uint64_t u = load<uint64_t>(p);
        if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          fail("{}: metadata key '{}': item {} ({}) does not fit in i64", *source_, key_, i, u);
        }
        out[i] = static_cast<int64_t>(u);
        break;
      }
      default: break;
    }
  }
  return out;
}

std::vector<float> ValueRef::as_f32_array() const {
  if (type_ != ValueType::ARRAY || (item_type() != ValueType::F32 && item_type() != ValueType::F64)) {
    type_error("array of f32 or f64");
  }
  const bool f64 = item_type() == ValueType::F64;
  const uint64_t count = size();
  const uint8_t* p = bytes() + 12;
  std::vector<float> out(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i) {
    out[i] = f64 ? static_cast<float>(load<double>(p + 8 * i)) : load<float>(p + 4 * i);
  }
  return out;
}

std::vector<std::string_view> ValueRef::as_string_array() const {
  if (type_ != ValueType::ARRAY || item_type() != ValueType::STRING) type_error("array of string");
  const uint64_t count = size();
  std::vector<std::string_view> out;
  out.reserve(static_cast<size_t>(count));
  const uint8_t* p = bytes() + 12;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t len = load<uint64_t>(p);
    out.emplace_back(reinterpret_cast<const char*>(p + 8), static_cast<size_t>(len));
    p += 8 + len;
  }
  return out;
}

Value ValueRef::to_value() const { return decode(bytes(), type_); }

// ---------------------------------------------------------------------------------------------
// TensorInfo

std::string TensorInfo::shape_string() const { return fmt::format("[{}]", fmt::join(shape(), ", ")); }

// ---------------------------------------------------------------------------------------------
// Reader

Reader::Reader(std::unique_ptr<ReaderState> state) : s_(std::move(state)) { s_->parse(); }
Reader::Reader(Reader&&) noexcept = default;
Reader& Reader::operator=(Reader&&) noexcept = default;
Reader::~Reader() = default;

Reader Reader::open(const std::filesystem::path& path) {
  auto s = std::make_unique<ReaderState>();
  s->name = path.string();
  s->file.emplace(path);
  s->data = s->file->data();
  s->size = s->file->size();
  return Reader(std::move(s));
}

Reader Reader::from_memory(std::span<const uint8_t> bytes, std::string name) {
  auto s = std::make_unique<ReaderState>();
  s->name = std::move(name);
  s->data = bytes.data();
  s->size = bytes.size();
  return Reader(std::move(s));
}

Reader Reader::from_bytes(std::vector<uint8_t> bytes, std::string name) {
  auto s = std::make_unique<ReaderState>();
  s->name = std::move(name);
  s->owned = std::move(bytes);
  s->data = s->owned.data();
  s->size = s->owned.size();
  return Reader(std::move(s));
}

const std::string& Reader::name() const { return s_->name; }
uint32_t Reader::version() const { return s_->version; }
uint32_t Reader::alignment() const { return s_->alignment; }
uint64_t Reader::data_offset() const { return s_->data_offset; }
uint64_t Reader::file_size() const { return s_->size; }
std::span<const uint8_t> Reader::bytes() const { return {s_->data, static_cast<size_t>(s_->size)}; }
const std::vector<ValueRef>& Reader::metadata() const { return s_->metadata; }
const std::vector<TensorInfo>& Reader::tensors() const { return s_->tensors; }

const ValueRef* Reader::find(std::string_view key) const {
  const auto it = s_->meta_index.find(key);
  return it == s_->meta_index.end() ? nullptr : &s_->metadata[it->second];
}

const ValueRef& Reader::at(std::string_view key) const {
  if (const ValueRef* v = find(key)) return *v;
  fail("{}: metadata key '{}' is missing", s_->name, key);
}

const ValueRef& Reader::require(std::string_view key, std::string_view expected) const {
  if (const ValueRef* v = find(key)) return *v;
  fail("{}: metadata key '{}' is missing (expected {})", s_->name, key, expected);
}

uint32_t Reader::get_u32(std::string_view key) const { return require(key, "u32").as_u32(); }
uint64_t Reader::get_u64(std::string_view key) const { return require(key, "u64").as_u64(); }
float Reader::get_f32(std::string_view key) const { return require(key, "f32").as_f32(); }
bool Reader::get_bool(std::string_view key) const { return require(key, "bool").as_bool(); }
std::string_view Reader::get_string(std::string_view key) const {
  return require(key, "string").as_string();
}
std::vector<int64_t> Reader::get_int_array(std::string_view key) const {
  return require(key, "array of integers").as_int_array();
}
std::vector<float> Reader::get_f32_array(std::string_view key) const {
  return require(key, "array of f32").as_f32_array();
}
std::vector<std::string_view> Reader::get_string_array(std::string_view key) const {
  return require(key, "array of string").as_string_array();
}

const TensorInfo* Reader::find_tensor(std::string_view name) const {
  const auto it = s_->tensor_index.find(name);
  return it == s_->tensor_index.end() ? nullptr : &s_->tensors[it->second];
}

const TensorInfo& Reader::tensor(std::string_view name) const {
  if (const TensorInfo* t = find_tensor(name)) return *t;
  fail("{}: tensor '{}' is missing", s_->name, name);
}

}  // namespace ds4::gguf
