// Writer -> reader round trips: every metadata value type (nested arrays included), tensors of
// several ggml types at several alignments, streaming to a file and reading it back through
// mmap, plus a byte-exact check of the encoding against a hand-assembled file.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>

#include "gguf/reader.h"
#include "gguf/writer.h"
#include "raw_gguf.h"

namespace ds4::gguf {
namespace {

using testing::Raw;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

Value nested(uint32_t levels) {  // [[[...[7]...]]] with `levels` array levels
  Value v = Value::array(ValueType::U8, {Value::u8(7)});
  for (uint32_t i = 1; i < levels; ++i) v = Value::array(ValueType::ARRAY, {v});
  return v;
}

std::vector<std::pair<std::string, Value>> every_value() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  return {
      {"t.u8", Value::u8(255)},
      {"t.i8", Value::i8(-128)},
      {"t.u16", Value::u16(65535)},
      {"t.i16", Value::i16(-32768)},
      {"t.u32", Value::u32(4294967295u)},
      {"t.i32", Value::i32(std::numeric_limits<int32_t>::min())},
      {"t.f32", Value::f32(-1.5e-7f)},
      {"t.f32.nan", Value::f32(nan)},
      {"t.f32.negzero", Value::f32(-0.0f)},
      {"t.f32.denormal", Value::f32(1e-40f)},
      {"t.bool.true", Value::boolean(true)},
      {"t.bool.false", Value::boolean(false)},
      {"t.string", Value::string("h\xc3\xa9llo w\xc3\xb6rld")},
      {"t.string.empty", Value::string("")},
      {"t.string.nul", Value::string(std::string("a\0b", 3))},
      {"t.u64", Value::u64(std::numeric_limits<uint64_t>::max())},
      {"t.i64", Value::i64(std::numeric_limits<int64_t>::min())},
      {"t.f64", Value::f64(0.1)},
      {"a.u8", Value::array(ValueType::U8, {Value::u8(0), Value::u8(1), Value::u8(255)})},
      {"a.i8", Value::array(ValueType::I8, {Value::i8(-1), Value::i8(127)})},
      {"a.u16", Value::array(ValueType::U16, {Value::u16(1), Value::u16(65535)})},
      {"a.i16", Value::array(ValueType::I16, {Value::i16(-2), Value::i16(300)})},
      {"a.u32", Value::array(ValueType::U32, {Value::u32(0), Value::u32(4), Value::u32(128)})},
      {"a.i32", Value::array(ValueType::I32, {Value::i32(-5), Value::i32(6)})},
      {"a.f32", Value::array(ValueType::F32, {Value::f32(10.0f), Value::f32(-0.25f)})},
      {"a.bool", Value::array(ValueType::BOOL, {Value::boolean(true), Value::boolean(false)})},
      {"a.string", Value::array(ValueType::STRING, {Value::string("a"), Value::string(""), Value::string("ccc")})},
      {"a.u64", Value::array(ValueType::U64, {Value::u64(1ull << 40), Value::u64(std::numeric_limits<uint64_t>::max())})},
      {"a.i64", Value::array(ValueType::I64, {Value::i64(-(1ll << 40))})},
      {"a.f64", Value::array(ValueType::F64, {Value::f64(2.5), Value::f64(-1e-300)})},
      {"a.empty", Value::array(ValueType::U32, {})},
      {"a.nested", Value::array(ValueType::ARRAY, {Value::array(ValueType::U8, {Value::u8(1)}),
                                                  Value::array(ValueType::U8, {Value::u8(2), Value::u8(3)})})},
      {"a.nested.strings", Value::array(ValueType::ARRAY, {Value::array(ValueType::STRING, {Value::string("x")})})},
      {"a.nested.empty", Value::array(ValueType::ARRAY, {Value::array(ValueType::F64, {})})},
      {"a.depth8", nested(8)},
  };
}

TEST(GgufRoundTrip, EveryMetadataTypeSurvivesExactly) {
  Writer w;
  const auto values = every_value();
  for (const auto& [k, v] : values) w.set(k, v);
  const Reader r = Reader::from_bytes(w.to_bytes(), "t.gguf");
  ASSERT_EQ(r.metadata().size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const ValueRef& got = r.metadata()[i];
    EXPECT_EQ(got.key(), values[i].first);
    EXPECT_EQ(got.type(), values[i].second.type()) << values[i].first;
    EXPECT_TRUE(got.to_value() == values[i].second)
        << values[i].first << ": " << got.to_value().to_string() << " vs " << values[i].second.to_string();
    EXPECT_EQ(r.find(values[i].first), &got);
  }
  EXPECT_EQ(r.at("a.nested").type_name(), "array of array of u8");
  EXPECT_EQ(r.at("a.depth8").type_name(),
            "array of array of array of array of array of array of array of array of u8");
  EXPECT_EQ(r.at("a.f32").type_name(), "array of f32");
  EXPECT_EQ(r.at("a.nested").size(), 2u);
  EXPECT_EQ(r.at("a.nested").array_items()[1].to_value(),
            Value::array(ValueType::U8, {Value::u8(2), Value::u8(3)}));
  EXPECT_EQ(r.tensors().size(), 0u);
  EXPECT_EQ(r.version(), 3u);
  EXPECT_EQ(r.alignment(), 32u);
}

TEST(GgufRoundTrip, TypedGettersFollowDs4TypeRules) {
  Writer w;
  for (const auto& [k, v] : every_value()) w.set(k, v);
  const Reader r = Reader::from_bytes(w.to_bytes(), "t.gguf");
  EXPECT_EQ(r.get_u32("t.u32"), 4294967295u);
  EXPECT_EQ(r.get_u64("t.u32"), 4294967295u);  // u64 accepts u32
  EXPECT_EQ(r.get_u64("t.u64"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(r.get_f32("t.f32"), -1.5e-7f);
  EXPECT_EQ(r.get_f32("t.f64"), 0.1f);                 // f64 narrowed
  EXPECT_EQ(r.get_f32("t.u32"), 4294967296.0f);        // u32 converted (rounds to 2^32)
  EXPECT_EQ(r.get_f32("t.i32"), -2147483648.0f);       // i32 converted
  EXPECT_TRUE(r.get_bool("t.bool.true"));
  EXPECT_FALSE(r.get_bool("t.bool.false"));
  EXPECT_EQ(r.get_string("t.string"), "h\xc3\xa9llo w\xc3\xb6rld");
  EXPECT_EQ(r.get_string("t.string.nul"), std::string_view("a\0b", 3));
  EXPECT_EQ(r.get_int_array("a.u8"), (std::vector<int64_t>{0, 1, 255}));
  EXPECT_EQ(r.get_int_array("a.i8"), (std::vector<int64_t>{-1, 127}));
  EXPECT_EQ(r.get_int_array("a.i16"), (std::vector<int64_t>{-2, 300}));
  EXPECT_EQ(r.get_int_array("a.u32"), (std::vector<int64_t>{0, 4, 128}));
  EXPECT_EQ(r.get_int_array("a.i32"), (std::vector<int64_t>{-5, 6}));
  EXPECT_EQ(r.get_int_array("a.i64"), (std::vector<int64_t>{-(1ll << 40)}));
  EXPECT_EQ(r.get_int_array("a.empty"), (std::vector<int64_t>{}));
  EXPECT_EQ(r.get_f32_array("a.f32"), (std::vector<float>{10.0f, -0.25f}));
  EXPECT_EQ(r.get_f32_array("a.f64"), (std::vector<float>{2.5f, static_cast<float>(-1e-300)}));
  EXPECT_EQ(r.get_string_array("a.string"), (std::vector<std::string_view>{"a", "", "ccc"}));

  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const ds4::Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message([&] { r.get_u32("t.f32"); }), "t.gguf: metadata key 't.f32' has type f32, expected u32");
  EXPECT_EQ(message([&] { r.get_u32("t.u64"); }), "t.gguf: metadata key 't.u64' has type u64, expected u32");
  EXPECT_EQ(message([&] { r.get_u32("deepseek4.block_count"); }),
            "t.gguf: metadata key 'deepseek4.block_count' is missing (expected u32)");
  EXPECT_EQ(message([&] { r.get_u64("t.i64"); }), "t.gguf: metadata key 't.i64' has type i64, expected u64 or u32");
  EXPECT_EQ(message([&] { r.get_f32("t.string"); }),
            "t.gguf: metadata key 't.string' has type string, expected f32, f64, u32 or i32");
  EXPECT_EQ(message([&] { r.get_bool("t.u8"); }), "t.gguf: metadata key 't.u8' has type u8, expected bool");
  EXPECT_EQ(message([&] { r.get_string("a.string"); }),
            "t.gguf: metadata key 'a.string' has type array of string, expected string");
  EXPECT_EQ(message([&] { r.get_int_array("a.f32"); }),
            "t.gguf: metadata key 'a.f32' has type array of f32, expected array of integers");
  EXPECT_EQ(message([&] { r.get_int_array("t.u32"); }),
            "t.gguf: metadata key 't.u32' has type u32, expected array of integers");
  EXPECT_EQ(message([&] { r.get_f32_array("a.i32"); }),
            "t.gguf: metadata key 'a.i32' has type array of i32, expected array of f32 or f64");
  EXPECT_EQ(message([&] { r.get_string_array("a.nested.strings"); }),
            "t.gguf: metadata key 'a.nested.strings' has type array of array of string, expected array of string");
  EXPECT_EQ(message([&] { r.get_int_array("a.u64"); }),
            "t.gguf: metadata key 'a.u64': item 1 (18446744073709551615) does not fit in i64");
  EXPECT_EQ(message([&] { r.at("nope"); }), "t.gguf: metadata key 'nope' is missing");
  EXPECT_EQ(message([&] { r.tensor("w"); }), "t.gguf: tensor 'w' is missing");
  EXPECT_EQ(message([&] { r.at("t.u8").size(); }), "t.gguf: metadata key 't.u8' has type u8, expected array");
}

// The encoding written for a one-key, one-tensor file, assembled by hand from the format
// description (spec §2.1), byte for byte.
TEST(GgufRoundTrip, EncodingMatchesHandAssembledBytes) {
  Writer w;
  w.set("a", Value::u32(7));
  const float data[2] = {1.0f, 2.0f};
  w.add_tensor("w", GgmlType::F32, {2}, {reinterpret_cast<const uint8_t*>(data), sizeof(data)});
  const std::vector<uint8_t> got = w.to_bytes();

  Raw e;
  e.header(1, 1);   // 0..24
  e.str("a");       // 24..33
  e.u32(4);         // type u32
  e.u32(7);         // 37..41
  e.str("w");       // 41..50
  e.u32(1);         // ndim
  e.u64(2);         // dims[0]
  e.u32(0);         // F32
  e.u64(0);         // offset 0, entry ends at 74
  e.pad(32);        // data section at 96
  e.f32(1.0f);
  e.f32(2.0f);
  e.pad(32);        // trailing padding to 128
  EXPECT_EQ(got, e.b);
  EXPECT_EQ(got.size(), 128u);
  EXPECT_EQ(w.data_offset(), 96u);
  EXPECT_EQ(w.file_size(), 128u);
}

struct TensorCase {
  const char* name;
  GgmlType type;
  std::vector<uint64_t> dims;
  uint64_t elements;
  uint64_t bytes;  // hand-computed: blocks * block_bytes
};

std::vector<TensorCase> tensor_cases() {
  return {
      {"f32", GgmlType::F32, {3, 2}, 6, 24},
      {"f16", GgmlType::F16, {5}, 5, 10},
      {"bf16", GgmlType::BF16, {4, 1, 2}, 8, 16},
      {"q8_0", GgmlType::Q8_0, {64, 2}, 128, 4 * 34},
      {"q4_k", GgmlType::Q4_K, {256, 3}, 768, 3 * 144},
      {"iq2_xxs", GgmlType::IQ2_XXS, {512}, 512, 2 * 66},
      {"q2_k.8d", GgmlType::Q2_K, {256, 1, 1, 1, 1, 1, 1, 2}, 512, 2 * 84},
      {"i32", GgmlType::I32, {6, 4}, 24, 96},
  };
}

class GgufTensorAlignment : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufTensorAlignment, TensorsRoundTripAlignedAndPadded) {
  const uint32_t alignment = GetParam();
  Writer w;
  if (alignment != kDefaultAlignment) w.set_alignment(alignment);
  w.set("general.name", Value::string("tensors"));
  const auto cases = tensor_cases();
  std::vector<std::vector<uint8_t>> data;
  for (size_t i = 0; i < cases.size(); ++i) {
    data.push_back(random_bytes(cases[i].bytes, static_cast<uint32_t>(i + 1)));
    w.add_tensor(cases[i].name, cases[i].type, cases[i].dims, data.back());
  }
  const uint64_t expected_data_offset = w.data_offset();
  const uint64_t expected_size = w.file_size();
  const std::vector<TensorDecl> decls = w.tensors();
  const std::vector<uint8_t> bytes = w.to_bytes();
  ASSERT_EQ(bytes.size(), expected_size);
  const Reader r = Reader::from_memory(bytes, "t.gguf");

  EXPECT_EQ(r.alignment(), alignment);
  EXPECT_EQ(r.data_offset(), expected_data_offset);
  EXPECT_EQ(r.data_offset() % alignment, 0u);
  ASSERT_EQ(r.tensors().size(), cases.size());
  uint64_t expected_offset = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const TensorInfo& t = r.tensors()[i];
    SCOPED_TRACE(cases[i].name);
    EXPECT_EQ(t.name, cases[i].name);
    EXPECT_EQ(t.type(), cases[i].type);
    EXPECT_TRUE(t.type_known);
    EXPECT_EQ(std::vector<uint64_t>(t.shape().begin(), t.shape().end()), cases[i].dims);
    EXPECT_EQ(t.n_elements, cases[i].elements);
    EXPECT_EQ(t.n_bytes, cases[i].bytes);
    EXPECT_EQ(t.offset, expected_offset);
    EXPECT_EQ(t.offset, decls[i].offset);
    EXPECT_EQ(t.file_offset, r.data_offset() + t.offset);
    EXPECT_EQ(t.file_offset % alignment, 0u);
    EXPECT_EQ(t.data, bytes.data() + t.file_offset);  // zero-copy view into the buffer
    EXPECT_TRUE(std::equal(t.bytes().begin(), t.bytes().end(), data[i].begin(), data[i].end()));
    // padding after the tensor is zero
    const uint64_t end = t.file_offset + t.n_bytes;
    const uint64_t padded = r.data_offset() + align_up(t.offset + t.n_bytes, alignment);
    for (uint64_t p = end; p < padded; ++p) ASSERT_EQ(bytes[p], 0) << "padding byte " << p;
    EXPECT_EQ(r.find_tensor(cases[i].name), &t);
    expected_offset = align_up(t.offset + t.n_bytes, alignment);
  }
  EXPECT_EQ(r.data_offset() + expected_offset, bytes.size());
  EXPECT_EQ(r.tensor("q8_0").shape_string(), "[64, 2]");
  EXPECT_EQ(r.find_tensor("nope"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufTensorAlignment, ::testing::Values(1u, 8u, 32u, 64u, 4096u));

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::path(::testing::TempDir()) / ("ds4_gguf_" + name);
}

TEST(GgufRoundTrip, StreamingInOddChunksThroughFileSinkAndMmap) {
  const auto path = temp_path("stream.gguf");
  std::filesystem::remove(path);
  Writer w;
  w.set("general.architecture", Value::string("deepseek4"));
  const auto cases = tensor_cases();
  std::vector<std::vector<uint8_t>> data;
  for (size_t i = 0; i < cases.size(); ++i) {
    w.add_tensor(cases[i].name, cases[i].type, cases[i].dims);
    data.push_back(random_bytes(cases[i].bytes, static_cast<uint32_t>(100 + i)));
  }
  {
    FileSink sink(path);
    w.begin(sink);
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_EQ(w.current_tensor(), i);
      EXPECT_EQ(w.current_remaining(), cases[i].bytes);
      for (size_t at = 0; at < data[i].size(); at += 7) {
        const size_t n = std::min<size_t>(7, data[i].size() - at);
        w.write_tensor_data({data[i].data() + at, n});
      }
    }
    EXPECT_EQ(w.current_tensor(), cases.size());
    w.finish();
  }
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".partial"));
  ASSERT_EQ(std::filesystem::file_size(path), w.file_size());

  const Reader r = Reader::open(path);
  EXPECT_EQ(r.name(), path.string());
  EXPECT_EQ(r.get_string("general.architecture"), "deepseek4");
  for (size_t i = 0; i < cases.size(); ++i) {
    const TensorInfo& t = r.tensor(cases[i].name);
    EXPECT_TRUE(std::equal(t.bytes().begin(), t.bytes().end(), data[i].begin(), data[i].end())) << cases[i].name;
    EXPECT_GE(t.data, r.bytes().data());
    EXPECT_LE(t.data + t.n_bytes, r.bytes().data() + r.bytes().size());
  }
  // A moved reader keeps every view valid (state lives on the heap).
  Reader moved = Reader::from_bytes(std::vector<uint8_t>(r.bytes().begin(), r.bytes().end()), "m.gguf");
  const std::string_view name_view = moved.tensors()[0].name;
  Reader again = std::move(moved);
  EXPECT_EQ(name_view, "f32");
  EXPECT_EQ(again.tensors()[0].name.data(), name_view.data());
  std::filesystem::remove(path);
}

TEST(GgufRoundTrip, UnfinishedFileSinkLeavesNoFile) {
  const auto path = temp_path("unfinished.gguf");
  std::filesystem::remove(path);
  {
    Writer w;
    w.add_tensor("x", GgmlType::F32, {4});
    FileSink sink(path);
    w.begin(sink);
    w.write_tensor_data(std::vector<uint8_t>(8, 1));
    EXPECT_TRUE(std::filesystem::exists(path.string() + ".partial"));
    EXPECT_THROW(w.finish(), ds4::Error);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".partial"));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ds4::Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(GgufWriter, MisuseGivesClearErrors) {
  Writer w;
  w.set("k", Value::u8(1));
  EXPECT_EQ(error_of([&] { w.set("k", Value::u8(2)); }), "gguf writer: metadata key 'k' is set twice");
  EXPECT_EQ(error_of([&] { w.set("", Value::u8(2)); }), "gguf writer: empty metadata key");
  EXPECT_EQ(error_of([&] { w.set_alignment(48); }), "gguf writer: general.alignment 48 is not a non-zero power of two");
  EXPECT_EQ(error_of([&] { w.set_alignment(0); }), "gguf writer: general.alignment 0 is not a non-zero power of two");
  EXPECT_EQ(error_of([&] { w.set("general.alignment", Value::u64(32)); }),
            "gguf writer: general.alignment must be u32, got u64");
  EXPECT_EQ(error_of([&] { w.add_tensor("a", GgmlType::F32, {}); }),
            "gguf writer: tensor 'a' has 0 dimensions, expected 1..8");
  EXPECT_EQ(error_of([&] { w.add_tensor("a", GgmlType::F32, {1, 1, 1, 1, 1, 1, 1, 1, 1}); }),
            "gguf writer: tensor 'a' has 9 dimensions, expected 1..8");
  EXPECT_EQ(error_of([&] { w.add_tensor("a", GgmlType::F32, {4, 0}); }), "gguf writer: tensor 'a' dimension 1 is 0");
  EXPECT_EQ(error_of([&] { w.add_tensor("a", GgmlType::F32, {1ull << 32, 1ull << 32}); }),
            "gguf writer: tensor 'a' element count overflows int64");
  EXPECT_EQ(error_of([&] { w.add_tensor("a", static_cast<GgmlType>(77), {4}); }),
            "gguf writer: tensor 'a' has unknown ggml type 77");
  EXPECT_EQ(error_of([&] { w.add_tensor("a", GgmlType::Q8_0, {48, 2}); }),
            "gguf writer: tensor 'a' row length 48 is not a multiple of the Q8_0 block size 32");
  EXPECT_EQ(error_of([&] { w.add_tensor("", GgmlType::F32, {4}); }), "gguf writer: empty tensor name");
  EXPECT_EQ(error_of([&] { w.add_tensor("a", GgmlType::F32, {4}, std::vector<uint8_t>(15)); }),
            "gguf writer: tensor 'a' needs 16 bytes of data, got 15");
  w.add_tensor("a", GgmlType::F32, {4});  // the failed declarations left no trace
  EXPECT_EQ(error_of([&] { w.add_tensor("a", GgmlType::F32, {4}); }), "gguf writer: tensor 'a' is declared twice");
  EXPECT_EQ(error_of([&] { w.set_alignment(64); }), "gguf writer: general.alignment must be set before the first tensor");
  EXPECT_EQ(error_of([&] { w.write_tensor_data(std::vector<uint8_t>(4)); }),
            "gguf writer: write_tensor_data() outside begin()..finish()");
  EXPECT_EQ(error_of([&] { w.finish(); }), "gguf writer: finish() without begin()");
  EXPECT_EQ(error_of([&] { (void)w.to_bytes(); }), "gguf writer: tensor 'a' was declared without data");

  MemorySink sink;
  w.begin(sink);
  EXPECT_EQ(error_of([&] { w.set("z", Value::u8(0)); }), "gguf writer: set() after begin()");
  EXPECT_EQ(error_of([&] { w.add_tensor("b", GgmlType::F32, {4}); }), "gguf writer: add_tensor() after begin()");
  EXPECT_EQ(error_of([&] { w.write_tensor_data(std::vector<uint8_t>(17)); }),
            "gguf writer: tensor 'a' needs 16 more bytes, got a chunk of 17");
  w.write_tensor_data(std::vector<uint8_t>(10));
  EXPECT_EQ(error_of([&] { w.finish(); }),
            "gguf writer: finish() before all tensor data was written: tensor 'a' has 10 of 16 bytes (0 of 1 tensors complete)");
  w.write_tensor_data(std::vector<uint8_t>(6));
  EXPECT_EQ(error_of([&] { w.write_tensor_data(std::vector<uint8_t>(1)); }),
            "gguf writer: 1 bytes of tensor data after the last tensor");
  w.finish();
  EXPECT_EQ(sink.bytes().size(), w.file_size());
  EXPECT_NO_THROW(Reader::from_memory(sink.bytes()));
}

TEST(GgufValue, ArraysAreHomogeneousAndDepthLimited) {
  EXPECT_EQ(error_of([] { Value::array(ValueType::U8, {Value::u8(1), Value::u16(2)}); }),
            "gguf value: array of u8 has item 1 of type u16");
  EXPECT_EQ(nested(8).depth(), 8u);
  EXPECT_EQ(error_of([] { nested(9); }), "gguf value: arrays nested 9 levels deep, at most 8 allowed");
  EXPECT_EQ(Value::f32(std::nanf("")), Value::f32(std::nanf("")));  // bitwise equality
  EXPECT_FALSE(Value::f32(0.0f) == Value::f32(-0.0f));
  EXPECT_FALSE(Value::u32(1) == Value::i32(1));
  EXPECT_EQ(Value::array(ValueType::I8, {Value::i8(-3), Value::i8(4)}).to_string(), "[-3, 4]");
  EXPECT_EQ(Value::string("x").to_string(), "\"x\"");
  EXPECT_EQ(value_type_name(ValueType::BOOL), "bool");
  EXPECT_EQ(value_type_name(99), "type 99");
  for (uint32_t t = 0; t <= kMaxValueType; ++t) {
    if (t == 9) continue;
    const Value v = Value::array(static_cast<ValueType>(t), {});
    EXPECT_EQ(static_cast<uint32_t>(v.item_type()), t);
  }
  const std::string tokens[] = {"a", "b"};
  EXPECT_EQ(Value::string_array(tokens), Value::array(ValueType::STRING, {Value::string("a"), Value::string("b")}));
  const uint32_t u[] = {0, 4};
  EXPECT_EQ(Value::u32_array(u), Value::array(ValueType::U32, {Value::u32(0), Value::u32(4)}));
}

TEST(GgufMappedFile, MissingAndEmptyFiles) {
  const auto missing = temp_path("does-not-exist.gguf");
  std::filesystem::remove(missing);
  EXPECT_EQ(error_of([&] { Reader::open(missing); }),
            missing.string() + ": cannot open: No such file or directory");
  const auto empty = temp_path("empty.gguf");
  { std::ofstream(empty).flush(); }
  EXPECT_EQ(error_of([&] { Reader::open(empty); }),
            empty.string() + ": offset 0: header: 0 bytes, shorter than the 4-byte magic \"GGUF\"; not a GGUF file");
  EXPECT_EQ(error_of([&] { Reader::open(::testing::TempDir()); }), ::testing::TempDir() + ": not a regular file");
  std::filesystem::remove(empty);
}

}  // namespace
}  // namespace ds4::gguf
