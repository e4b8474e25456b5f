#include "common/gguf/gguf_value.h"

#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/util/check.h"

namespace baton {

bool gguf_value_type_valid(uint32_t raw) { return raw <= static_cast<uint32_t>(GgufValueType::kFloat64); }

std::string_view gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8: return "uint8";
    case GgufValueType::kInt8: return "int8";
    case GgufValueType::kUint16: return "uint16";
    case GgufValueType::kInt16: return "int16";
    case GgufValueType::kUint32: return "uint32";
    case GgufValueType::kInt32: return "int32";
    case GgufValueType::kFloat32: return "float32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kUint64: return "uint64";
    case GgufValueType::kInt64: return "int64";
    case GgufValueType::kFloat64: return "float64";
  }
  return "unknown";
}

uint64_t gguf_value_type_size(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16: return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32: return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64: return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray: return 0;
  }
  return 0;
}

namespace {

uint64_t double_bits(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
}

double bits_double(uint64_t bits) {
  double v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

bool is_integer_type(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64: return true;
    default: return false;
  }
}

}  // namespace

GgufValue GgufValue::scalar(GgufValueType type, uint64_t bits) {
  GgufValue v;
  v.type_ = type;
  v.payload_ = bits;
  return v;
}

// Signed values are stored sign-extended so as_int() is a plain cast.
GgufValue GgufValue::u8(uint8_t v) { return scalar(GgufValueType::kUint8, v); }
GgufValue GgufValue::i8(int8_t v) { return scalar(GgufValueType::kInt8, static_cast<uint64_t>(int64_t{v})); }
GgufValue GgufValue::u16(uint16_t v) { return scalar(GgufValueType::kUint16, v); }
GgufValue GgufValue::i16(int16_t v) { return scalar(GgufValueType::kInt16, static_cast<uint64_t>(int64_t{v})); }
GgufValue GgufValue::u32(uint32_t v) { return scalar(GgufValueType::kUint32, v); }
GgufValue GgufValue::i32(int32_t v) { return scalar(GgufValueType::kInt32, static_cast<uint64_t>(int64_t{v})); }
GgufValue GgufValue::u64(uint64_t v) { return scalar(GgufValueType::kUint64, v); }
GgufValue GgufValue::i64(int64_t v) { return scalar(GgufValueType::kInt64, static_cast<uint64_t>(v)); }
GgufValue GgufValue::f32(float v) { return scalar(GgufValueType::kFloat32, double_bits(static_cast<double>(v))); }
GgufValue GgufValue::f64(double v) { return scalar(GgufValueType::kFloat64, double_bits(v)); }
GgufValue GgufValue::boolean(bool v) { return scalar(GgufValueType::kBool, v ? 1 : 0); }

GgufValue GgufValue::string(std::string v) {
  GgufValue out;
  out.type_ = GgufValueType::kString;
  out.payload_ = std::move(v);
  return out;
}

GgufValue GgufValue::array(GgufValueType elem_type, std::vector<GgufValue> elems) {
  for (const GgufValue& e : elems) {
    BATON_CHECK(e.type() == elem_type, "GGUF array element type differs from the array's element type");
  }
  GgufValue out;
  out.type_ = GgufValueType::kArray;
  out.elem_type_ = elem_type;
  out.payload_ = std::move(elems);
  return out;
}

GgufValue GgufValue::string_array(std::vector<std::string> v) {
  std::vector<GgufValue> elems;
  elems.reserve(v.size());
  for (std::string& s : v) elems.push_back(string(std::move(s)));
  return array(GgufValueType::kString, std::move(elems));
}

GgufValue GgufValue::f32_array(const std::vector<float>& v) {
  std::vector<GgufValue> elems;
  elems.reserve(v.size());
  for (float f : v) elems.push_back(f32(f));
  return array(GgufValueType::kFloat32, std::move(elems));
}

GgufValue GgufValue::i32_array(const std::vector<int32_t>& v) {
  std::vector<GgufValue> elems;
  elems.reserve(v.size());
  for (int32_t i : v) elems.push_back(i32(i));
  return array(GgufValueType::kInt32, std::move(elems));
}

const std::vector<GgufValue>& GgufValue::array() const {
  static const std::vector<GgufValue> kEmpty;
  if (const auto* elems = std::get_if<std::vector<GgufValue>>(&payload_)) return *elems;
  return kEmpty;
}

uint64_t GgufValue::raw_bits() const {
  if (const auto* bits = std::get_if<uint64_t>(&payload_)) return *bits;
  return 0;
}

std::string GgufValue::type_description() const {
  if (!is_array()) return std::string(gguf_value_type_name(type_));
  std::string out = "array of ";
  if (elem_type_ == GgufValueType::kArray && !array().empty()) {
    out += array().front().type_description();
  } else {
    out += gguf_value_type_name(elem_type_);
  }
  return out;
}

absl::StatusOr<int64_t> GgufValue::as_int() const {
  if (type_ == GgufValueType::kBool) return static_cast<int64_t>(raw_bits());
  if (!is_integer_type(type_)) {
    return absl::InvalidArgumentError(absl::StrCat("value has type ", type_description(), ", expected an integer"));
  }
  const uint64_t bits = raw_bits();
  if (type_ == GgufValueType::kUint64 && bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("uint64 value ", bits, " exceeds the int64 limit ", std::numeric_limits<int64_t>::max()));
  }
  return static_cast<int64_t>(bits);
}

absl::StatusOr<double> GgufValue::as_float() const {
  if (type_ == GgufValueType::kFloat32 || type_ == GgufValueType::kFloat64) return bits_double(raw_bits());
  if (type_ == GgufValueType::kUint64) return static_cast<double>(raw_bits());
  if (is_integer_type(type_)) return static_cast<double>(static_cast<int64_t>(raw_bits()));
  return absl::InvalidArgumentError(absl::StrCat("value has type ", type_description(), ", expected a number"));
}

absl::StatusOr<bool> GgufValue::as_bool() const {
  if (type_ != GgufValueType::kBool) {
    return absl::InvalidArgumentError(absl::StrCat("value has type ", type_description(), ", expected bool"));
  }
  return raw_bits() != 0;
}

absl::StatusOr<std::string_view> GgufValue::as_string() const {
  if (const auto* s = std::get_if<std::string>(&payload_)) return std::string_view(*s);
  return absl::InvalidArgumentError(absl::StrCat("value has type ", type_description(), ", expected string"));
}

bool operator==(const GgufValue& a, const GgufValue& b) {
  if (a.type_ != b.type_) return false;
  if (a.is_array() && a.elem_type_ != b.elem_type_) return false;
  return a.payload_ == b.payload_;
}

}  // namespace baton
