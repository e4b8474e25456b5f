// One GGUF metadata value: a scalar, a string, or an array (arrays may nest).
// Values are small (48 bytes) so a 150K-entry vocabulary array costs a few MB
// plus the string bytes themselves.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace baton {

// Type ids exactly as stored in GGUF files.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// Is `raw` one of the ids above?
bool gguf_value_type_valid(uint32_t raw);
// "uint8", "string", "array", ... ("unknown" for ids outside the enum).
std::string_view gguf_value_type_name(GgufValueType type);
// Bytes of a fixed-size scalar type; 0 for string and array.
uint64_t gguf_value_type_size(GgufValueType type);

class GgufValue {
 public:
  GgufValue() = default;  // uint8 zero; use the factories below

  static GgufValue u8(uint8_t v);
  static GgufValue i8(int8_t v);
  static GgufValue u16(uint16_t v);
  static GgufValue i16(int16_t v);
  static GgufValue u32(uint32_t v);
  static GgufValue i32(int32_t v);
  static GgufValue u64(uint64_t v);
  static GgufValue i64(int64_t v);
  static GgufValue f32(float v);
  static GgufValue f64(double v);
  static GgufValue boolean(bool v);
  static GgufValue string(std::string v);
  // Every element must have type `elem_type` (BATON_CHECK); for kArray elements
  // each inner array carries its own element type.
  static GgufValue array(GgufValueType elem_type, std::vector<GgufValue> elems);
  static GgufValue string_array(std::vector<std::string> v);
  static GgufValue f32_array(const std::vector<float>& v);
  static GgufValue i32_array(const std::vector<int32_t>& v);

  GgufValueType type() const { return type_; }
  bool is_array() const { return type_ == GgufValueType::kArray; }
  // Element type of an array (kUint8 if not an array).
  GgufValueType array_type() const { return elem_type_; }
  // Elements of an array; empty if not an array.
  const std::vector<GgufValue>& array() const;

  // Any integer type or bool; uint64 above INT64_MAX is an error.
  absl::StatusOr<int64_t> as_int() const;
  // float32, float64 or any integer type.
  absl::StatusOr<double> as_float() const;
  absl::StatusOr<bool> as_bool() const;
  // View into this value; valid while the value lives.
  absl::StatusOr<std::string_view> as_string() const;

  // Raw scalar payload for serialization: integers as their two's-complement
  // bits (sign-extended), bool as 0/1, floats as the double's bits.
  uint64_t raw_bits() const;

  // "string", "array of string", "array of array of int32", ...
  std::string type_description() const;

  friend bool operator==(const GgufValue& a, const GgufValue& b);

 private:
  static GgufValue scalar(GgufValueType type, uint64_t bits);

  GgufValueType type_ = GgufValueType::kUint8;
  GgufValueType elem_type_ = GgufValueType::kUint8;  // arrays only
  // Scalars: raw_bits(); strings: the bytes; arrays: the elements.
  std::variant<uint64_t, std::string, std::vector<GgufValue>> payload_ = uint64_t{0};
};

}  // namespace baton
