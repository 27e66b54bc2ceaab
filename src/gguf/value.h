// GGUF metadata values (spec §2.1): the 13 value types and an owned value that holds any of
// them, including arrays of arrays. The writer takes `Value`s; the reader hands out zero-copy
// `ValueRef`s (reader.h) that convert to `Value` with `to_value()`.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace ds4::gguf {

/// GGUF metadata value type ids (u32 on disk).
enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8,
  ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

/// Largest valid value type id.
inline constexpr uint32_t kMaxValueType = 12;

/// Short name of a value type for messages: "u8", "i32", "f32", "bool", "string", "array", ...
/// Ids outside 0..12 give "type N".
std::string value_type_name(uint32_t type);
inline std::string value_type_name(ValueType t) { return value_type_name(static_cast<uint32_t>(t)); }

/// Size in bytes of one scalar of `type` on disk (u8..f64, bool); 0 for STRING and ARRAY.
uint32_t scalar_size(ValueType type);

/// True for the integer types u8, i8, u16, i16, u32, i32, u64, i64.
bool is_integer_type(ValueType type);

class Value;

/// Items of an array value; every item has type `item_type`.
struct ArrayValue {
  ValueType item_type = ValueType::U8;
  std::vector<Value> items;
};

/// An owned GGUF metadata value of any type. The variant index equals the GGUF type id.
/// Equality compares types and values exactly (floats bit for bit, so NaN == NaN).
class Value {
 public:
  using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, ArrayValue, uint64_t, int64_t, double>;

  Value() : v_(uint8_t{0}) {}

  static Value u8(uint8_t x) { return Value(Storage(std::in_place_index<0>, x)); }
  static Value i8(int8_t x) { return Value(Storage(std::in_place_index<1>, x)); }
  static Value u16(uint16_t x) { return Value(Storage(std::in_place_index<2>, x)); }
  static Value i16(int16_t x) { return Value(Storage(std::in_place_index<3>, x)); }
  static Value u32(uint32_t x) { return Value(Storage(std::in_place_index<4>, x)); }
  static Value i32(int32_t x) { return Value(Storage(std::in_place_index<5>, x)); }
  static Value f32(float x) { return Value(Storage(std::in_place_index<6>, x)); }
  static Value boolean(bool x) { return Value(Storage(std::in_place_index<7>, x)); }
  static Value string(std::string x) { return Value(Storage(std::in_place_index<8>, std::move(x))); }
  static Value u64(uint64_t x) { return Value(Storage(std::in_place_index<10>, x)); }
  static Value i64(int64_t x) { return Value(Storage(std::in_place_index<11>, x)); }
  static Value f64(double x) { return Value(Storage(std::in_place_index<12>, x)); }

  /// An array of `item_type` items. Throws ds4::Error when an item has another type or when
  /// nesting exceeds kMaxArrayDepth levels.
  static Value array(ValueType item_type, std::vector<Value> items);

  /// Typed array shortcuts (the common metadata shapes).
  static Value u32_array(std::span<const uint32_t> xs);
  static Value i32_array(std::span<const int32_t> xs);
  static Value f32_array(std::span<const float> xs);
  static Value string_array(std::span<const std::string> xs);

  ValueType type() const { return static_cast<ValueType>(v_.index()); }
  const Storage& storage() const { return v_; }

  /// The scalar of type T (e.g. get<uint32_t>()); throws std::bad_variant_access on mismatch.
  template <typename T>
  const T& get() const { return std::get<T>(v_); }

  /// Array accessors; throw std::bad_variant_access when this is not an array.
  const ArrayValue& array_value() const { return std::get<ArrayValue>(v_); }
  ValueType item_type() const { return array_value().item_type; }
  const std::vector<Value>& items() const { return array_value().items; }

  /// Nesting depth: 0 for scalars and strings, 1 + max item depth for arrays.
  uint32_t depth() const;

  /// Human-readable rendering for messages and test failures: 3, -1.5, "abc", [1, 2], ...
  std::string to_string() const;

  friend bool operator==(const Value& a, const Value& b);

 private:
  explicit Value(Storage v) : v_(std::move(v)) {}
  Storage v_;
};

bool operator==(const ArrayValue& a, const ArrayValue& b);

}  // namespace ds4::gguf
