#include "gguf/value.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "gguf/format.h"

namespace ds4::gguf {

std::string value_type_name(uint32_t type) {
  static constexpr const char* kNames[] = {"u8",  "i8",   "u16",    "i16",   "u32", "i32", "f32",
                                           "bool", "string", "array", "u64", "i64", "f64"};
  if (type <= kMaxValueType) return kNames[type];
  return fmt::format("type {}", type);
}

uint32_t scalar_size(ValueType type) {
  switch (type) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    case ValueType::STRING: case ValueType::ARRAY: return 0;
  }
  return 0;
}

bool is_integer_type(ValueType type) {
  switch (type) {
    case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16:
    case ValueType::U32: case ValueType::I32: case ValueType::U64: case ValueType::I64:
      return true;
    default:
      return false;
  }
}

Value Value::array(ValueType item_type, std::vector<Value> items) {
  if (static_cast<uint32_t>(item_type) > kMaxValueType) {
    fail("gguf value: unknown array item type {}", static_cast<uint32_t>(item_type));
  }
  uint32_t depth = 1;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].type() != item_type) {
      fail("gguf value: array of {} has item {} of type {}", value_type_name(item_type), i,
           value_type_name(items[i].type()));
    }
    depth = std::max(depth, 1 + items[i].depth());
  }
  if (depth > kMaxArrayDepth) {
    fail("gguf value: arrays nested {} levels deep, at most {} allowed", depth, kMaxArrayDepth);
  }
  return Value(Storage(std::in_place_index<9>, ArrayValue{item_type, std::move(items)}));
}

namespace {
template <typename T, typename F>
Value make_array(ValueType type, std::span<const T> xs, F make) {
  std::vector<Value> items;
  items.reserve(xs.size());
  for (const T& x : xs) items.push_back(make(x));
  return Value::array(type, std::move(items));
}
}  // namespace

Value Value::u32_array(std::span<const uint32_t> xs) { return make_array(ValueType::U32, xs, Value::u32); }
Value Value::i32_array(std::span<const int32_t> xs) { return make_array(ValueType::I32, xs, Value::i32); }
Value Value::f32_array(std::span<const float> xs) { return make_array(ValueType::F32, xs, Value::f32); }
Value Value::string_array(std::span<const std::string> xs) {
  return make_array(ValueType::STRING, xs, [](const std::string& s) { return Value::string(s); });
}

uint32_t Value::depth() const {
  if (type() != ValueType::ARRAY) return 0;
  uint32_t d = 1;
  for (const Value& v : items()) d = std::max(d, 1 + v.depth());
  return d;
}

std::string Value::to_string() const {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return fmt::format("\"{}\"", x);
        } else if constexpr (std::is_same_v<T, ArrayValue>) {
          std::string out = "[";
          for (size_t i = 0; i < x.items.size(); ++i) {
            if (i) out += ", ";
            if (i == 8 && x.items.size() > 10) {
              out += fmt::format("... {} more", x.items.size() - 8);
              break;
            }
            out += x.items[i].to_string();
          }
          return out + "]";
        } else if constexpr (std::is_same_v<T, bool>) {
          return x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t>) {
          return fmt::format("{}", static_cast<int>(x));
        } else {
          return fmt::format("{}", x);
        }
      },
      v_);
}

namespace {
template <typename T>
bool same_bits(const T& a, const T& b) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::memcmp(&a, &b, sizeof(T)) == 0;
  } else {
    return a == b;
  }
}
}  // namespace

bool operator==(const ArrayValue& a, const ArrayValue& b) {
  return a.item_type == b.item_type && a.items == b.items;
}

bool operator==(const Value& a, const Value& b) {
  if (a.v_.index() != b.v_.index()) return false;
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        return same_bits(x, std::get<T>(b.v_));
      },
      a.v_);
}

}  // namespace ds4::gguf
