// Test helpers: build GGUF model files from a Config and a (possibly corrupted) tensor plan.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "../gguf/raw_gguf.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "model/config.h"
#include "model/layout.h"

namespace ds4::model::testing {

struct PlannedTensor {
  std::string name;
  GgmlType type;
  std::vector<uint64_t> shape;
};

/// Every tensor of `cfg` (optional ones included) with the recipe's type.
inline std::vector<PlannedTensor> plan(const Config& cfg, Recipe recipe) {
  std::vector<PlannedTensor> out;
  for (const TensorSpec& s : expected_tensors(cfg)) out.push_back({s.name, recipe_type(s, recipe), s.shape});
  return out;
}

inline PlannedTensor& find(std::vector<PlannedTensor>& p, const std::string& name) {
  auto it = std::find_if(p.begin(), p.end(), [&](const PlannedTensor& t) { return t.name == name; });
  if (it == p.end()) throw std::runtime_error("no planned tensor " + name);
  return *it;
}

inline void drop(std::vector<PlannedTensor>& p, const std::string& name) {
  p.erase(std::remove_if(p.begin(), p.end(), [&](const PlannedTensor& t) { return t.name == name; }), p.end());
}

/// A complete GGUF in memory: cfg's metadata and every planned tensor filled with zeros,
/// streamed through the writer in 64 KiB chunks.
inline std::vector<uint8_t> write_model(const Config& cfg, const std::vector<PlannedTensor>& tensors) {
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::string("deepseek4"));
  cfg.write_metadata(w);
  for (const PlannedTensor& t : tensors) w.add_tensor(t.name, t.type, t.shape);
  gguf::MemorySink sink;
  w.begin(sink);
  const std::vector<uint8_t> zeros(64 << 10, 0);
  for (const gguf::TensorDecl& t : w.tensors()) {
    for (uint64_t left = t.n_bytes; left > 0;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, zeros.size()));
      w.write_tensor_data({zeros.data(), n});
      left -= n;
    }
  }
  w.finish();
  return sink.take();
}

/// A GGUF whose tensors all share data offset 0 (overlap is legal), in a sparse file just big
/// enough for the largest tensor: lets tests validate real-size layouts (Flash, Pro) without
/// writing hundreds of gigabytes. Metadata is cfg's.
inline void write_sparse_model(const std::filesystem::path& path, const Config& cfg,
                               const std::vector<PlannedTensor>& tensors) {
  gguf::Writer meta;
  cfg.write_metadata(meta);
  std::vector<uint8_t> head = meta.to_bytes();  // header + metadata + padding, no tensors
  {
    const gguf::Reader parsed = gguf::Reader::from_memory(head);
    const gguf::ValueRef& last = parsed.metadata().back();
    head.resize(static_cast<size_t>(last.offset() + last.byte_size()));  // drop the padding
  }
  gguf::testing::Raw r;
  r.b = std::move(head);
  const uint64_t n_tensors = tensors.size();
  r.patch<uint64_t>(8, n_tensors);
  uint64_t biggest = 0;
  for (const PlannedTensor& t : tensors) {
    r.str(t.name);
    r.u32(static_cast<uint32_t>(t.shape.size()));
    uint64_t n = 1;
    for (uint64_t d : t.shape) {
      r.u64(d);
      n *= d;
    }
    r.u32(static_cast<uint32_t>(t.type));
    r.u64(0);
    const auto info = ggml_type_info(static_cast<uint32_t>(t.type));
    biggest = std::max(biggest, *gguf::tensor_nbytes(*info, n));
  }
  r.pad(32);
  const uint64_t size = r.size() + biggest;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || ::write(fd, r.b.data(), r.b.size()) != static_cast<ssize_t>(r.b.size()) ||
      ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    throw std::runtime_error("cannot write " + path.string());
  }
  ::close(fd);
}

}  // namespace ds4::model::testing
