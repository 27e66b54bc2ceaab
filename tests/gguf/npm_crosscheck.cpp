// Cross-check against an independent GGUF parser: the npm package @huggingface/gguf@0.4.6,
// installed at test time into <build>/npm. A file written by gguf::Writer must read the same
// in both parsers (metadata types, values, tensor directory, data-section offset). Skips with
// a message when node/npm are missing or the package cannot be installed (no network).
// Registered as its own ctest test with label "npm".
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gguf/reader.h"
#include "gguf/writer.h"

namespace ds4::gguf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kPrefix = fs::path(DS4_BINARY_DIR) / "npm";
constexpr const char* kPackage = "@huggingface/gguf@0.4.6";

// Runs a shell command and returns its stdout; sets `rc` to the exit status.
std::string run(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    *rc = -1;
    return out;
  }
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  *rc = ::pclose(p);
  return out;
}

// Installs the package once; returns an empty string on success or the reason to skip.
std::string ensure_package() {
  int rc = 0;
  run("node --version >/dev/null 2>&1 && npm --version >/dev/null 2>&1", &rc);
  if (rc != 0) return "node or npm is not installed";
  const fs::path pkg = kPrefix / "node_modules/@huggingface/gguf/package.json";
  bool have = false;
  if (fs::exists(pkg)) {
    std::ifstream in(pkg);
    have = json::parse(in, nullptr, false).value("version", "") == "0.4.6";
  }
  if (!have) {
    fs::create_directories(kPrefix);
    const std::string log = run("npm install --prefix '" + kPrefix.string() + "' " + kPackage +
                                    " --no-audit --no-fund --loglevel=error 2>&1",
                                &rc);
    if (rc != 0) return "npm install " + std::string(kPackage) + " failed (offline?): " + log;
  }
  fs::copy_file(fs::path(DS4_SOURCE_DIR) / "tests/gguf/gguf_dump.mjs", kPrefix / "gguf_dump.mjs",
                fs::copy_options::overwrite_existing);
  return "";
}

json dump_with_npm(const fs::path& file) {
  int rc = 0;
  const std::string out = run("node '" + (kPrefix / "gguf_dump.mjs").string() + "' '" + file.string() + "' 2>&1", &rc);
  if (rc != 0) ADD_FAILURE() << "node failed: " << out;
  return json::parse(out);
}

// Compares one of our values with the npm parser's JSON rendering of it.
void expect_same(const Value& ours, const json& theirs, const std::string& where) {
  SCOPED_TRACE(where);
  switch (ours.type()) {
    case ValueType::U8: EXPECT_EQ(theirs.get<int64_t>(), ours.get<uint8_t>()); break;
    case ValueType::I8: EXPECT_EQ(theirs.get<int64_t>(), ours.get<int8_t>()); break;
    case ValueType::U16: EXPECT_EQ(theirs.get<int64_t>(), ours.get<uint16_t>()); break;
    case ValueType::I16: EXPECT_EQ(theirs.get<int64_t>(), ours.get<int16_t>()); break;
    case ValueType::U32: EXPECT_EQ(theirs.get<int64_t>(), ours.get<uint32_t>()); break;
    case ValueType::I32: EXPECT_EQ(theirs.get<int64_t>(), ours.get<int32_t>()); break;
    case ValueType::U64: EXPECT_EQ(theirs.get<std::string>(), std::to_string(ours.get<uint64_t>())); break;
    case ValueType::I64: EXPECT_EQ(theirs.get<std::string>(), std::to_string(ours.get<int64_t>())); break;
    case ValueType::F32: EXPECT_EQ(theirs.get<double>(), static_cast<double>(ours.get<float>())); break;
    case ValueType::F64: EXPECT_EQ(theirs.get<double>(), ours.get<double>()); break;
    case ValueType::BOOL: EXPECT_EQ(theirs.get<bool>(), ours.get<bool>()); break;
    case ValueType::STRING: EXPECT_EQ(theirs.get<std::string>(), ours.get<std::string>()); break;
    case ValueType::ARRAY:
      ASSERT_TRUE(theirs.is_array());
      ASSERT_EQ(theirs.size(), ours.items().size());
      for (size_t i = 0; i < theirs.size(); ++i) expect_same(ours.items()[i], theirs[i], where + "[" + std::to_string(i) + "]");
      break;
  }
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + 31 * i);
  return v;
}

TEST(GgufNpmCrossCheck, IndependentParserReadsOurFileTheSameWay) {
  if (const std::string why = ensure_package(); !why.empty()) GTEST_SKIP() << why;

  Writer w;
  w.set_alignment(64);
  w.set("general.architecture", Value::string("deepseek4"));
  w.set("general.name", Value::string("cross-check \xe2\x9c\x93"));
  w.set("t.u8", Value::u8(200));
  w.set("t.i8", Value::i8(-100));
  w.set("t.u16", Value::u16(60000));
  w.set("t.i16", Value::i16(-30000));
  w.set("deepseek4.block_count", Value::u32(43));
  w.set("t.i32", Value::i32(-2000000000));
  w.set("deepseek4.rope.freq_base", Value::f32(10000.0f));
  w.set("t.f32.small", Value::f32(1e-6f));
  w.set("deepseek4.expert_weights_norm", Value::boolean(true));
  w.set("deepseek4.context_length", Value::u64(1ull << 50));
  w.set("t.i64", Value::i64(-(1ll << 62)));
  w.set("t.f64", Value::f64(0.1));
  const int32_t ratios[] = {0, 0, 4, 128, 4, 128, 4};
  w.set("deepseek4.attention.compress_ratios", Value::i32_array(ratios));
  const float clamp[] = {10.0f, 10.0f, 7.5f};
  w.set("deepseek4.swiglu_clamp_exp", Value::f32_array(clamp));
  const std::string tokens[] = {"<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "a", "", "\xc4\xa0the"};
  w.set("tokenizer.ggml.tokens", Value::string_array(tokens));
  w.set("t.bools", Value::array(ValueType::BOOL, {Value::boolean(false), Value::boolean(true)}));
  w.set("t.u64s", Value::array(ValueType::U64, {Value::u64(0), Value::u64(~0ull)}));
  w.set("t.nested", Value::array(ValueType::ARRAY, {Value::array(ValueType::ARRAY, {Value::array(ValueType::U16, {Value::u16(9)})}),
                                                    Value::array(ValueType::ARRAY, {})}));
  w.set("t.empty", Value::array(ValueType::F64, {}));

  w.add_tensor("token_embd.weight", GgmlType::F16, {64, 3}, pattern(64 * 3 * 2, 1));
  w.add_tensor("blk.0.attn_q_a.weight", GgmlType::Q8_0, {64, 2}, pattern(4 * 34, 2));
  w.add_tensor("blk.0.ffn_gate_exps.weight", GgmlType::IQ2_XXS, {256, 2, 3}, pattern(6 * 66, 3));
  w.add_tensor("blk.0.ffn_down_exps.weight", GgmlType::Q2_K, {256, 2, 3}, pattern(6 * 84, 4));
  w.add_tensor("blk.0.ffn_up_exps.weight", GgmlType::Q4_K, {256, 2, 3}, pattern(6 * 144, 5));
  w.add_tensor("blk.0.ffn_gate_tid2eid.weight", GgmlType::I32, {3, 5}, pattern(60, 6));
  w.add_tensor("output_norm.weight", GgmlType::F32, {7}, pattern(28, 7));
  w.add_tensor("blk.0.attn_q_b.weight", GgmlType::BF16, {8, 2}, pattern(32, 8));

  const fs::path file = kPrefix / "crosscheck.gguf";
  w.write_file(file);
  const Reader ours = Reader::open(file);
  const json theirs = dump_with_npm(file);

  EXPECT_EQ(theirs["version"].get<int>(), 3);
  EXPECT_EQ(theirs["tensor_count"].get<std::string>(), std::to_string(ours.tensors().size()));
  EXPECT_EQ(theirs["kv_count"].get<std::string>(), std::to_string(ours.metadata().size()));
  EXPECT_EQ(theirs["tensor_data_offset"].get<std::string>(), std::to_string(ours.data_offset()));

  const json& meta = theirs["metadata"];
  EXPECT_EQ(meta.size(), ours.metadata().size());
  for (const ValueRef& v : ours.metadata()) {
    const std::string key(v.key());
    ASSERT_TRUE(meta.contains(key)) << key;
    const json& entry = meta[key];
    EXPECT_EQ(entry["type"].get<uint32_t>(), static_cast<uint32_t>(v.type())) << key;
    if (v.type() == ValueType::ARRAY) {
      EXPECT_EQ(entry["subType"].get<uint32_t>(), static_cast<uint32_t>(v.item_type())) << key;
    }
    expect_same(v.to_value(), entry["value"], key);
  }

  const json& tensors = theirs["tensors"];
  ASSERT_EQ(tensors.size(), ours.tensors().size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = ours.tensors()[i];
    SCOPED_TRACE(std::string(t.name));
    EXPECT_EQ(tensors[i]["name"].get<std::string>(), t.name);
    EXPECT_EQ(tensors[i]["n_dims"].get<uint32_t>(), t.n_dims);
    EXPECT_EQ(tensors[i]["dtype"].get<uint32_t>(), t.type_id);
    EXPECT_EQ(tensors[i]["offset"].get<std::string>(), std::to_string(t.offset));
    ASSERT_EQ(tensors[i]["shape"].size(), t.n_dims);
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      EXPECT_EQ(tensors[i]["shape"][d].get<std::string>(), std::to_string(t.dims[d]));
    }
  }
}

}  // namespace
}  // namespace ds4::gguf
