// Malformed GGUF inputs: every prefix of a valid file, every byte flipped to several values,
// and each header/metadata/directory field corrupted on purpose. Each must give a ds4::Error
// naming the file and the exact byte offset of the bad field, never a crash or another
// exception type (the fuzzer in fuzz/ covers random inputs).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "gguf/reader.h"
#include "gguf/writer.h"
#include "raw_gguf.h"

namespace ds4::gguf {
namespace {

using testing::parse_error;
using testing::Raw;

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// A small file touching every parser path: strings, arrays of strings, nested arrays, bools,
// alignment, and two tensors.
std::vector<uint8_t> small_valid_file() {
  Writer w;
  w.set_alignment(16);
  w.set("general.name", Value::string("tiny"));
  w.set("tok", Value::array(ValueType::STRING, {Value::string("a"), Value::string("bc")}));
  w.set("nest", Value::array(ValueType::ARRAY, {Value::array(ValueType::I16, {Value::i16(-1)})}));
  w.set("flag", Value::boolean(true));
  w.set("ratio", Value::array(ValueType::U32, {Value::u32(0), Value::u32(4)}));
  w.set("eps", Value::f32(1e-6f));
  w.add_tensor("a", GgmlType::F32, {3}, std::vector<uint8_t>(12, 0x11));
  w.add_tensor("b", GgmlType::Q8_0, {32}, std::vector<uint8_t>(34, 0x22));
  return w.to_bytes();
}

TEST(GgufCorrupt, EveryTruncationIsReportedPrecisely) {
  const std::vector<uint8_t> full = small_valid_file();
  const Reader ok = Reader::from_memory(full, "t.gguf");
  const TensorInfo& last = ok.tensors().back();
  const uint64_t data_end = last.file_offset + last.n_bytes;
  ASSERT_GT(data_end, 150u);
  for (uint64_t len = 0; len < data_end; ++len) {
    const std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<ptrdiff_t>(len));
    const std::string msg = parse_error(cut);
    SCOPED_TRACE(fmt::format("prefix of {} bytes: {}", len, msg));
    EXPECT_TRUE(starts_with(msg, "t.gguf: offset "));
    if (len >= ok.data_offset()) {
      EXPECT_NE(msg.find("extends past the end of the file"), std::string::npos);
    } else if (len < 4) {
      EXPECT_NE(msg.find("shorter than the 4-byte magic \"GGUF\"; not a GGUF file"), std::string::npos);
    } else {
      EXPECT_TRUE(msg.find("truncated file") != std::string::npos ||
                  msg.find("runs past the end of the file") != std::string::npos ||
                  msg.find("is impossible") != std::string::npos ||
                  msg.find("extends past the end of the file") != std::string::npos);
    }
  }
  // Cutting only trailing padding after the last tensor is harmless.
  for (uint64_t len = data_end; len <= full.size(); ++len) {
    EXPECT_NO_THROW(Reader::from_memory(std::span(full.data(), len), "t.gguf")) << len;
  }
}

// Each byte set to several values: the parser either accepts the (reinterpreted) file or throws
// ds4::Error with file and offset; when it accepts, every accessor stays inside the buffer.
TEST(GgufCorrupt, EveryByteFlippedNeverCrashes) {
  const std::vector<uint8_t> full = small_valid_file();
  size_t accepted = 0;
  size_t rejected = 0;
  for (size_t p = 0; p < full.size(); ++p) {
    for (int variant = 0; variant < 5; ++variant) {
      std::vector<uint8_t> bad = full;
      const uint8_t b = full[p];
      const uint8_t values[5] = {0x00, 0xff, 0x80, static_cast<uint8_t>(b ^ 1), static_cast<uint8_t>(b + 9)};
      bad[p] = values[variant];
      try {
        const Reader r = Reader::from_memory(bad, "t.gguf");
        for (const ValueRef& v : r.metadata()) {
          (void)v.to_value();
          (void)v.type_name();
        }
        uint64_t sum = 0;
        for (const TensorInfo& t : r.tensors()) {
          for (uint8_t x : t.bytes()) sum += x;
          EXPECT_LE(t.file_offset + t.n_bytes, bad.size());
        }
        (void)sum;
        ++accepted;
      } catch (const ds4::Error& e) {
        EXPECT_TRUE(starts_with(e.what(), "t.gguf: offset ")) << e.what();
        ++rejected;
      }
    }
  }
  EXPECT_GT(rejected, full.size());  // most header/directory corruptions are caught
  EXPECT_GT(accepted, 0u);           // data-byte changes are not errors
}

// Every metadata value type id and every tensor type id set to each id in turn: unknown value
// types are rejected at their offset; known ones reinterpret the bytes (accepted or ds4::Error);
// unknown tensor types are recorded.
TEST(GgufCorrupt, FlippedTypeIds) {
  const std::vector<uint8_t> full = small_valid_file();
  const Reader ok = Reader::from_memory(full, "t.gguf");
  for (const ValueRef& v : ok.metadata()) {
    const uint64_t type_at = v.offset() - 4;
    for (uint32_t type = 0; type < 16; ++type) {
      std::vector<uint8_t> bad = full;
      std::memcpy(bad.data() + type_at, &type, 4);
      try {
        const Reader r = Reader::from_memory(bad, "t.gguf");
        EXPECT_LE(type, kMaxValueType);
        (void)r.at(v.key()).to_value();
      } catch (const ds4::Error& e) {
        if (type > kMaxValueType) {
          EXPECT_EQ(std::string(e.what()), fmt::format("t.gguf: offset {}: metadata key '{}': unknown value type {}",
                                                       type_at, v.key(), type));
        } else {
          EXPECT_TRUE(starts_with(e.what(), "t.gguf: offset ")) << e.what();
        }
      }
    }
  }
  for (const TensorInfo& t : ok.tensors()) {
    const uint64_t type_at = t.directory_offset + 8 + t.name.size() + 4 + 8 * t.n_dims;
    for (uint32_t type = 0; type < 48; ++type) {
      std::vector<uint8_t> bad = full;
      std::memcpy(bad.data() + type_at, &type, 4);
      try {
        const Reader r = Reader::from_memory(bad, "t.gguf");
        const TensorInfo& got = r.tensor(t.name);
        EXPECT_EQ(got.type_id, type);
        EXPECT_EQ(got.type_known, ggml_type_info(type).has_value());
      } catch (const ds4::Error& e) {
        // a larger type no longer fits in the file
        EXPECT_NE(std::string(e.what()).find("extends past the end of the file"), std::string::npos) << e.what();
      }
    }
  }
}

TEST(GgufCorrupt, HeaderFields) {
  const std::vector<uint8_t> good = small_valid_file();
  {
    auto bad = good;
    std::memcpy(bad.data(), "GGML", 4);
    EXPECT_EQ(parse_error(bad), "t.gguf: offset 0: header: bad magic 0x4c4d4747, expected 0x46554747 (\"GGUF\"); not a GGUF file");
  }
  {
    Raw r;
    r.header(0, 0, 2);
    EXPECT_EQ(parse_error(r.b), "t.gguf: offset 4: header: unsupported GGUF version 2, expected 3");
  }
  {
    Raw r;
    r.header(0, 0, 0x03000000u);
    EXPECT_EQ(parse_error(r.b), "t.gguf: offset 4: header: big-endian GGUF files are not supported");
  }
  {
    auto bad = good;
    const uint64_t absurd = 1ull << 60;
    std::memcpy(bad.data() + 16, &absurd, 8);
    EXPECT_EQ(parse_error(bad), fmt::format("t.gguf: offset 16: header: metadata count 1152921504606846976 is "
                                            "impossible: each entry needs at least 13 bytes, {} bytes remain",
                                            good.size() - 24));
  }
  {
    auto bad = good;
    const uint64_t absurd = ~0ull;
    std::memcpy(bad.data() + 8, &absurd, 8);
    EXPECT_EQ(parse_error(bad), fmt::format("t.gguf: offset 8: header: tensor count 18446744073709551615 is "
                                            "impossible: each entry needs at least 32 bytes, {} bytes remain",
                                            good.size() - 24));
  }
  {
    // Plausible at the header, impossible once the metadata has been read.
    Raw r;
    r.header(3, 1);
    r.str("k");
    r.u32(7);  // bool
    r.u8(1);
    r.fill(85);
    EXPECT_EQ(parse_error(r.b), "t.gguf: offset 8: tensor count 3 is impossible: each directory entry needs at "
                                "least 32 bytes, 85 bytes remain after the metadata");
  }
  EXPECT_EQ(parse_error({0x47, 0x47}),
            "t.gguf: offset 0: header: 2 bytes, shorter than the 4-byte magic \"GGUF\"; not a GGUF file");
}

TEST(GgufCorrupt, MetadataFields) {
  {  // unknown value type
    Raw r;
    r.header(0, 1);
    r.str("k");
    const size_t type_at = r.u32(13);
    r.u32(0);
    EXPECT_EQ(parse_error(r.b), fmt::format("t.gguf: offset {}: metadata key 'k': unknown value type 13", type_at));
  }
  {  // string length past EOF
    Raw r;
    r.header(0, 1);
    r.str("k");
    r.u32(8);
    const size_t len_at = r.u64(1ull << 40);
    r.fill(5, 'x');
    EXPECT_EQ(parse_error(r.b), fmt::format("t.gguf: offset {}: metadata key 'k': string value length 1099511627776 "
                                            "runs past the end of the file (5 bytes remain)",
                                            len_at));
  }
  {  // key length past EOF
    Raw r;
    r.header(0, 1);
    r.u64(100);
    r.fill(20, 'k');
    EXPECT_EQ(parse_error(r.b), "t.gguf: offset 24: metadata entry 0: key length 100 runs past the end of the file (20 bytes remain)");
  }
  {  // empty key
    Raw r;
    r.header(0, 1);
    r.str("");
    r.u32(0);
    r.u8(0);
    EXPECT_EQ(parse_error(r.b), "t.gguf: offset 24: metadata entry 0: empty metadata key");
  }
  {  // duplicate key
    Raw r;
    r.header(0, 2);
    r.str("a");
    r.u32(0);
    const size_t first_value = r.u8(1);
    const size_t second = r.str("a");
    r.u32(0);
    r.u8(2);
    EXPECT_EQ(parse_error(r.b), fmt::format("t.gguf: offset {}: duplicate metadata key 'a' (first defined at offset {})",
                                            second, first_value));
  }
  {  // bool byte other than 0/1
    Raw r;
    r.header(0, 1);
    r.str("b");
    r.u32(7);
    const size_t at = r.u8(2);
    EXPECT_EQ(parse_error(r.b), fmt::format("t.gguf: offset {}: metadata key 'b': bool value 2 is neither 0 nor 1", at));
  }
  {  // unknown array item type
    Raw r;
    r.header(0, 1);
    r.str("arr");
    r.u32(9);
    const size_t at = r.u32(99);
    r.u64(0);
    EXPECT_EQ(parse_error(r.b), fmt::format("t.gguf: offset {}: metadata key 'arr': unknown array item type 99", at));
  }
  {  // absurd array count: rejected before any allocation or loop
    Raw r;
    r.header(0, 1);
    r.str("arr");
    r.u32(9);
    r.u32(4);
    const size_t at = r.u64(1ull << 62);
    r.fill(16);
    EXPECT_EQ(parse_error(r.b), fmt::format("t.gguf: offset {}: metadata key 'arr': array count 4611686018427387904 is "
                                            "impossible: u32 items need at least 4 bytes each, 16 bytes remain (a "
                                            "truncated or corrupt file)",
                                            at));
  }
  {  // array of strings with a huge count
    Raw r;
    r.header(0, 1);
    r.str("toks");
    r.u32(9);
    r.u32(8);
    const size_t at = r.u64(3);
    r.str("a");
    EXPECT_EQ(parse_error(r.b), fmt::format("t.gguf: offset {}: metadata key 'toks': array count 3 is impossible: "
                                            "string items need at least 8 bytes each, 9 bytes remain (a truncated or "
                                            "corrupt file)",
                                            at));
  }
}

std::vector<uint8_t> nested_arrays(uint32_t levels, size_t* innermost_header) {
  Raw r;
  r.header(0, 1);
  r.str("deep");
  r.u32(9);  // the value is an array (level 1)
  for (uint32_t level = 1; level < levels; ++level) {
    *innermost_header = r.u32(9);  // items are arrays
    r.u64(1);
  }
  *innermost_header = r.size();
  r.u32(0);  // innermost items are u8
  r.u64(1);
  r.u8(42);
  return r.b;
}

TEST(GgufCorrupt, ArrayNestingDepthLimit) {
  size_t at = 0;
  const std::vector<uint8_t> eight = nested_arrays(8, &at);
  const Reader r = Reader::from_memory(eight, "t.gguf");
  Value v = r.at("deep").to_value();
  for (int i = 0; i < 7; ++i) {
    Value inner = v.items().at(0);  // copy out before replacing its owner
    v = std::move(inner);
  }
  EXPECT_EQ(v, Value::array(ValueType::U8, {Value::u8(42)}));

  const std::vector<uint8_t> nine = nested_arrays(9, &at);
  EXPECT_EQ(parse_error(nine), fmt::format("t.gguf: offset {}: metadata key 'deep': arrays nested deeper than 8 levels", at));
}

// One metadata entry "general.alignment" of the given type/value, no tensors.
std::vector<uint8_t> with_alignment(uint32_t type, uint64_t value, size_t* value_at) {
  Raw r;
  r.header(0, 1);
  r.str("general.alignment");
  r.u32(type);
  *value_at = type == 10 ? r.u64(value) : r.u32(static_cast<uint32_t>(value));
  return r.b;
}

TEST(GgufCorrupt, Alignment) {
  size_t at = 0;
  auto zero = with_alignment(4, 0, &at);
  EXPECT_EQ(parse_error(zero), fmt::format("t.gguf: offset {}: general.alignment is 0; it must be a non-zero power of two", at));
  auto odd = with_alignment(4, 48, &at);
  EXPECT_EQ(parse_error(odd), fmt::format("t.gguf: offset {}: general.alignment 48 is not a power of two", at));
  auto wide = with_alignment(10, 32, &at);
  EXPECT_EQ(parse_error(wide), fmt::format("t.gguf: offset {}: general.alignment has type u64, expected u32", at));
  auto fine = with_alignment(4, 64, &at);
  const Reader r = Reader::from_memory(fine, "t.gguf");
  EXPECT_EQ(r.alignment(), 64u);
  EXPECT_EQ(r.data_offset(), 64u);  // the metadata ends at 57, aligned up
}

// Offsets of the fields of the single tensor written by one_tensor().
struct Fields {
  size_t entry, ndim, dims, type, offset;
};

// One tensor "w" with the given fields, followed by `data_bytes` of data (alignment 32).
std::vector<uint8_t> one_tensor(std::vector<uint64_t> dims, uint32_t type, uint64_t offset, size_t data_bytes,
                                Fields* f, uint32_t ndim_override = 0) {
  Raw r;
  r.header(1, 0);
  f->entry = r.str("w");
  f->ndim = r.u32(ndim_override ? ndim_override : static_cast<uint32_t>(dims.size()));
  f->dims = r.size();
  for (uint64_t d : dims) r.u64(d);
  f->type = r.u32(type);
  f->offset = r.u64(offset);
  r.pad(32);
  r.fill(data_bytes, 0x5a);
  return r.b;
}

TEST(GgufCorrupt, TensorDirectoryFields) {
  Fields f{};
  auto no_dims = one_tensor({}, 0, 0, 0, &f);
  no_dims.resize(no_dims.size() + 64);  // enough bytes that the count check passes
  EXPECT_EQ(parse_error(no_dims), fmt::format("t.gguf: offset {}: tensor 'w': dimension count 0 is out of range 1..8", f.ndim));

  auto nine_dims = one_tensor({1, 1, 1, 1, 1, 1, 1, 1, 1}, 0, 0, 4, &f);
  EXPECT_EQ(parse_error(nine_dims), fmt::format("t.gguf: offset {}: tensor 'w': dimension count 9 is out of range 1..8", f.ndim));

  auto zero_dim = one_tensor({4, 0}, 0, 0, 16, &f);
  EXPECT_EQ(parse_error(zero_dim), fmt::format("t.gguf: offset {}: tensor 'w': dimension 1 is 0", f.dims + 8));

  auto overflow = one_tensor({1ull << 32, 1ull << 32}, 0, 0, 16, &f);
  EXPECT_EQ(parse_error(overflow),
            fmt::format("t.gguf: offset {}: tensor 'w': element count of shape [4294967296, 4294967296] overflows int64", f.dims));

  auto bytes_overflow = one_tensor({1ull << 31, 1ull << 31}, 0, 0, 16, &f);  // 2^62 f32 = 2^64 bytes
  EXPECT_EQ(parse_error(bytes_overflow),
            fmt::format("t.gguf: offset {}: tensor 'w': byte size of 4611686018427387904 F32 elements overflows u64", f.dims));

  auto past_eof = one_tensor({4}, 0, 1ull << 40, 16, &f);
  EXPECT_EQ(parse_error(past_eof),
            fmt::format("t.gguf: offset {}: tensor 'w': data (16 bytes at offset 1099511627776 of the data section, which "
                        "starts at 64) extends past the end of the file (80 bytes)",
                        f.offset));

  auto short_data = one_tensor({5}, 0, 0, 19, &f);
  EXPECT_EQ(parse_error(short_data),
            fmt::format("t.gguf: offset {}: tensor 'w': data (20 bytes at offset 0 of the data section, which starts at 64) "
                        "extends past the end of the file (83 bytes)",
                        f.offset));

  auto misaligned = one_tensor({4}, 0, 4, 32, &f);
  EXPECT_EQ(parse_error(misaligned),
            fmt::format("t.gguf: offset {}: tensor 'w': data offset 4 is not a multiple of the alignment 32", f.offset));
}

TEST(GgufCorrupt, DuplicateTensorNames) {
  Raw r;
  r.header(2, 0);
  r.str("w");
  r.u32(1);
  r.u64(4);
  r.u32(0);
  r.u64(0);
  const size_t second = r.str("w");
  r.u32(1);
  r.u64(4);
  r.u32(0);
  r.u64(0);  // overlapping the first tensor is allowed; the name clash is not
  r.pad(32);
  r.fill(16);
  EXPECT_EQ(parse_error(r.b), fmt::format("t.gguf: offset {}: duplicate tensor name 'w' (tensors 0 and 1)", second));
}

TEST(GgufCorrupt, OverlappingTensorsAreAllowed) {
  Raw r;
  r.header(2, 0);
  for (const char* name : {"x", "y"}) {
    r.str(name);
    r.u32(1);
    r.u64(4);
    r.u32(0);
    r.u64(0);
  }
  r.pad(32);
  r.fill(16, 7);
  const Reader reader = Reader::from_memory(r.b, "t.gguf");
  EXPECT_EQ(reader.tensor("x").data, reader.tensor("y").data);
}

TEST(GgufCorrupt, UnknownTensorTypeIsRecordedWithoutSize) {
  Fields f{};
  auto bytes = one_tensor({8, 2}, 77, 0, 0, &f);
  const Reader r = Reader::from_memory(bytes, "t.gguf");
  const TensorInfo& t = r.tensor("w");
  EXPECT_FALSE(t.type_known);
  EXPECT_EQ(t.type_id, 77u);
  EXPECT_EQ(t.n_bytes, 0u);
  EXPECT_EQ(t.n_elements, 16u);
  EXPECT_EQ(t.bytes().size(), 0u);
  EXPECT_EQ(ggml_type_name(t.type_id), "type 77");
  // its start must still lie inside the file
  auto far = one_tensor({8, 2}, 77, 1 << 20, 0, &f);
  EXPECT_NE(parse_error(far).find("extends past the end of the file"), std::string::npos);
}

TEST(GgufCorrupt, PartialBlocksUseCeilingByteSize) {
  // Spec §2.1: bytes = ceil(elements / block) * block_bytes (ds4 does not require whole rows).
  Fields f{};
  auto bytes = one_tensor({40}, 8, 0, 68, &f);  // 40 Q8_0 elements -> 2 blocks of 34 bytes
  const Reader r = Reader::from_memory(bytes, "t.gguf");
  EXPECT_EQ(r.tensor("w").n_bytes, 68u);
}

}  // namespace
}  // namespace ds4::gguf
