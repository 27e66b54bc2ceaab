#include "gguf/writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace ds4::gguf {

namespace {

constexpr size_t kFileBuffer = 4u << 20;  // FileSink coalesces small chunks up to 4 MiB

uint64_t string_size(std::string_view s) { return 8 + s.size(); }

uint64_t value_size(const Value& v) {
  switch (v.type()) {
    case ValueType::STRING: return string_size(v.get<std::string>());
    case ValueType::ARRAY: {
      uint64_t n = 12;
      for (const Value& item : v.items()) n += value_size(item);
      return n;
    }
    default: return scalar_size(v.type());
  }
}

template <typename T>
void put(std::vector<uint8_t>& out, T x) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &x, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

// Serializes the value bytes (without the type id).
void put_value(std::vector<uint8_t>& out, const Value& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          put_string(out, x);
        } else if constexpr (std::is_same_v<T, ArrayValue>) {
          put<uint32_t>(out, static_cast<uint32_t>(x.item_type));
          put<uint64_t>(out, x.items.size());
          for (const Value& item : x.items) put_value(out, item);
        } else if constexpr (std::is_same_v<T, bool>) {
          put<uint8_t>(out, x ? 1 : 0);
        } else {
          put<T>(out, x);
        }
      },
      v.storage());
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// FileSink

FileSink::FileSink(std::filesystem::path path) : path_(std::move(path)) {
  partial_ = path_;
  partial_ += ".partial";
  fd_ = ::open(partial_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("{}: cannot create: {}", partial_.string(), std::strerror(errno));
  buffer_.reserve(kFileBuffer);
}

FileSink::~FileSink() {
  if (fd_ >= 0) {  // not finished: drop the incomplete file
    ::close(fd_);
    ::unlink(partial_.c_str());
  }
}

void FileSink::write_fully(const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("{}: write failed: {}", partial_.string(), std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void FileSink::flush() {
  write_fully(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void FileSink::write(std::span<const uint8_t> bytes) {
  if (fd_ < 0) fail("{}: write after finish", path_.string());
  if (buffer_.size() + bytes.size() > kFileBuffer) flush();
  if (bytes.size() >= kFileBuffer) {
    write_fully(bytes.data(), bytes.size());
  } else {
    buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
  }
}

void FileSink::finish() {
  if (fd_ < 0) fail("{}: finished twice", path_.string());
  flush();
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(partial_.c_str());
    fail("{}: close failed: {}", partial_.string(), std::strerror(err));
  }
  if (::rename(partial_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(partial_.c_str());
    fail("{}: cannot rename {} to it: {}", path_.string(), partial_.string(), std::strerror(err));
  }
}

// ---------------------------------------------------------------------------------------------
// Writer: declaration

void Writer::require_declaring(const char* what) const {
  if (state_ != State::Declaring) fail("gguf writer: {} after begin()", what);
}

void Writer::set(std::string key, Value value) {
  require_declaring("set()");
  if (key.empty()) fail("gguf writer: empty metadata key");
  if (key == kAlignmentKey) {
    if (value.type() != ValueType::U32) {
      fail("gguf writer: {} must be u32, got {}", kAlignmentKey, value_type_name(value.type()));
    }
    const uint32_t a = value.get<uint32_t>();
    if (!is_power_of_two(a)) fail("gguf writer: {} {} is not a non-zero power of two", kAlignmentKey, a);
    if (!tensors_.empty()) fail("gguf writer: {} must be set before the first tensor", kAlignmentKey);
    alignment_ = a;
  }
  if (!keys_.insert(key).second) fail("gguf writer: metadata key '{}' is set twice", key);
  metadata_.emplace_back(std::move(key), std::move(value));
}

void Writer::set_alignment(uint32_t alignment) { set(kAlignmentKey, Value::u32(alignment)); }

size_t Writer::add_tensor(std::string name, GgmlType type, std::vector<uint64_t> dims) {
  require_declaring("add_tensor()");
  if (name.empty()) fail("gguf writer: empty tensor name");
  if (names_.count(name)) fail("gguf writer: tensor '{}' is declared twice", name);
  if (dims.empty() || dims.size() > kMaxDims) {
    fail("gguf writer: tensor '{}' has {} dimensions, expected 1..{}", name, dims.size(), kMaxDims);
  }
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 0) fail("gguf writer: tensor '{}' dimension {} is 0", name, d);
  }
  const auto n = element_count(dims);
  if (!n) fail("gguf writer: tensor '{}' element count overflows int64", name);
  const auto info = ggml_type_info(static_cast<uint32_t>(type));
  if (!info) fail("gguf writer: tensor '{}' has unknown ggml type {}", name, static_cast<uint32_t>(type));
  if (dims[0] % info->block_elems != 0) {
    fail("gguf writer: tensor '{}' row length {} is not a multiple of the {} block size {}", name, dims[0],
         info->name, info->block_elems);
  }
  const auto bytes = tensor_nbytes(*info, *n);
  if (!bytes) fail("gguf writer: tensor '{}' byte size overflows u64", name);
  const uint64_t offset = align_up(data_section_end(), alignment_);
  if (offset < data_section_end() || *bytes > UINT64_MAX - alignment_ - offset) {
    fail("gguf writer: tensor '{}' does not fit in a 64-bit file", name);
  }
  names_.insert(name);
  tensors_.push_back(TensorDecl{std::move(name), type, std::move(dims), *n, *bytes, offset});
  data_.emplace_back();
  return tensors_.size() - 1;
}

size_t Writer::add_tensor(std::string name, GgmlType type, std::vector<uint64_t> dims,
                          std::span<const uint8_t> data) {
  const size_t i = add_tensor(std::move(name), type, std::move(dims));
  if (data.size() != tensors_[i].n_bytes) {
    const std::string bad = tensors_[i].name;
    const uint64_t want = tensors_[i].n_bytes;
    names_.erase(bad);
    tensors_.pop_back();
    data_.pop_back();
    fail("gguf writer: tensor '{}' needs {} bytes of data, got {}", bad, want, data.size());
  }
  data_[i].emplace(data.begin(), data.end());
  return i;
}

uint64_t Writer::data_section_end() const {
  return tensors_.empty() ? 0 : tensors_.back().offset + tensors_.back().n_bytes;
}

uint64_t Writer::data_offset() const {
  uint64_t n = kHeaderBytes;
  for (const auto& [key, value] : metadata_) n += string_size(key) + 4 + value_size(value);
  for (const TensorDecl& t : tensors_) n += string_size(t.name) + 4 + 8 * t.dims.size() + 4 + 8;
  return align_up(n, alignment_);
}

uint64_t Writer::file_size() const { return data_offset() + align_up(data_section_end(), alignment_); }

// ---------------------------------------------------------------------------------------------
// Writer: streaming

void Writer::begin(Sink& sink) {
  require_declaring("begin()");
  std::vector<uint8_t> head;
  head.reserve(static_cast<size_t>(data_offset()));
  put<uint32_t>(head, kMagic);
  put<uint32_t>(head, kVersion);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    put_string(head, key);
    put<uint32_t>(head, static_cast<uint32_t>(value.type()));
    put_value(head, value);
  }
  for (const TensorDecl& t : tensors_) {
    put_string(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) put<uint64_t>(head, d);
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, t.offset);
  }
  head.resize(static_cast<size_t>(align_up(head.size(), alignment_)), 0);
  state_ = State::Streaming;
  sink_ = &sink;
  current_ = 0;
  written_ = 0;
  sink.write(head);
}

uint64_t Writer::current_remaining() const {
  return current_ < tensors_.size() ? tensors_[current_].n_bytes - written_ : 0;
}

void Writer::write_tensor_data(std::span<const uint8_t> bytes) {
  if (state_ != State::Streaming) fail("gguf writer: write_tensor_data() outside begin()..finish()");
  if (bytes.empty()) return;
  if (current_ == tensors_.size()) fail("gguf writer: {} bytes of tensor data after the last tensor", bytes.size());
  const TensorDecl& t = tensors_[current_];
  if (bytes.size() > t.n_bytes - written_) {
    fail("gguf writer: tensor '{}' needs {} more bytes, got a chunk of {}", t.name, t.n_bytes - written_,
         bytes.size());
  }
  sink_->write(bytes);
  written_ += bytes.size();
  if (written_ == t.n_bytes) {
    static constexpr uint8_t kZeros[256] = {};
    uint64_t pad = align_up(t.n_bytes, alignment_) - t.n_bytes;
    while (pad > 0) {
      const uint64_t n = std::min<uint64_t>(pad, sizeof(kZeros));
      sink_->write({kZeros, static_cast<size_t>(n)});
      pad -= n;
    }
    ++current_;
    written_ = 0;
  }
}

void Writer::finish() {
  if (state_ != State::Streaming) fail("gguf writer: finish() without begin()");
  if (current_ != tensors_.size()) {
    const TensorDecl& t = tensors_[current_];
    fail("gguf writer: finish() before all tensor data was written: tensor '{}' has {} of {} bytes "
         "({} of {} tensors complete)", t.name, written_, t.n_bytes, current_, tensors_.size());
  }
  state_ = State::Done;
  sink_->finish();
}

void Writer::write_all_in_memory(Sink& sink) {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (!data_[i]) fail("gguf writer: tensor '{}' was declared without data", tensors_[i].name);
  }
  begin(sink);
  for (size_t i = 0; i < tensors_.size(); ++i) write_tensor_data(*data_[i]);
  finish();
}

std::vector<uint8_t> Writer::to_bytes() {
  MemorySink sink;
  write_all_in_memory(sink);
  return sink.take();
}

void Writer::write_file(const std::filesystem::path& path) {
  FileSink sink(path);
  write_all_in_memory(sink);
}

}  // namespace ds4::gguf
