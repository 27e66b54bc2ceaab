// Writes the GGUF reader fuzzer's seed corpus with gguf::Writer: small valid files covering
// every metadata value type, nested arrays, several tensor types and alignments.
// Usage: gguf_fuzz_seeds <output-dir>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"
#include "gguf/writer.h"

using namespace ds4::gguf;

namespace {

Value nested(int levels) {
  Value v = Value::array(ValueType::I16, {Value::i16(-3), Value::i16(5)});
  for (int i = 1; i < levels; ++i) v = Value::array(ValueType::ARRAY, {v});
  return v;
}

void every_scalar(Writer& w) {
  w.set("s.u8", Value::u8(200));
  w.set("s.i8", Value::i8(-7));
  w.set("s.u16", Value::u16(513));
  w.set("s.i16", Value::i16(-513));
  w.set("s.u32", Value::u32(43));
  w.set("s.i32", Value::i32(-43));
  w.set("s.f32", Value::f32(1e-6f));
  w.set("s.bool", Value::boolean(true));
  w.set("s.string", Value::string("joyai-llm"));
  w.set("s.u64", Value::u64(65536));
  w.set("s.i64", Value::i64(-65536));
  w.set("s.f64", Value::f64(160000.0));
}

void every_array(Writer& w) {
  const int32_t ratios[] = {0, 0, 4, 128, 4};
  w.set("a.i32", Value::i32_array(ratios));
  const float clamp[] = {10.0f, 10.0f, 10.0f};
  w.set("a.f32", Value::f32_array(clamp));
  const std::string tokens[] = {"<s>", "a", "\xc4\xa0the", ""};
  w.set("a.string", Value::string_array(tokens));
  w.set("a.bool", Value::array(ValueType::BOOL, {Value::boolean(false), Value::boolean(true)}));
  w.set("a.u64", Value::array(ValueType::U64, {Value::u64(1), Value::u64(2)}));
  w.set("a.f64", Value::array(ValueType::F64, {Value::f64(0.5)}));
  w.set("a.u8", Value::array(ValueType::U8, {Value::u8(1), Value::u8(2), Value::u8(3)}));
  w.set("a.empty", Value::array(ValueType::STRING, {}));
  w.set("a.nested2", nested(2));
  w.set("a.nested8", nested(8));
}

void tensors(Writer& w, int variant) {
  const std::vector<uint8_t> f32(4 * 6, 0x3f);
  const std::vector<uint8_t> q8(34, 0x11);
  const std::vector<uint8_t> i32(16, 0x02);
  w.add_tensor("output_norm.weight", ds4::GgmlType::F32, {6}, f32);
  if (variant > 0) w.add_tensor("blk.0.attn_q_a.weight", ds4::GgmlType::Q8_0, {32}, q8);
  if (variant > 1) w.add_tensor("blk.0.ffn_gate_tid2eid.weight", ds4::GgmlType::I32, {2, 2}, i32);
  if (variant > 2) w.add_tensor("f16.3d", ds4::GgmlType::F16, {2, 3, 2}, std::vector<uint8_t>(24, 0x3c));
}

void save(const std::filesystem::path& dir, const std::string& name, Writer& w) {
  w.write_file(dir / (name + ".gguf"));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output-dir>\n", argv[0]);
    return 2;
  }
  try {
    const std::filesystem::path dir = argv[1];
    std::filesystem::create_directories(dir);
    { Writer w; save(dir, "empty", w); }
    { Writer w; every_scalar(w); save(dir, "scalars", w); }
    { Writer w; every_array(w); save(dir, "arrays", w); }
    for (int variant = 0; variant < 4; ++variant) {
      Writer w;
      const uint32_t alignments[] = {32, 1, 8, 64};
      if (variant) w.set_alignment(alignments[variant]);
      w.set("general.architecture", Value::string("deepseek4"));
      w.set("deepseek4.block_count", Value::u32(7));
      tensors(w, variant);
      save(dir, "tensors" + std::to_string(variant), w);
    }
    { Writer w; every_scalar(w); every_array(w); tensors(w, 3); save(dir, "everything", w); }
  } catch (const ds4::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
