#include "common/rpc/proto_json.h"

#include <cstdint>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/util/sha256.h"

namespace baton {
namespace {

using Json = nlohmann::json;
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

// One value of `field` as printed by protobuf -> our form.
void fix_value(const FieldDescriptor& field, Json& value) {
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT64: {
      if (!value.is_string()) return;
      const std::string text = value.get<std::string>();
      const bool is_digest = absl::EndsWith(field.name(), "digest");
      if (field.cpp_type() == FieldDescriptor::CPPTYPE_UINT64) {
        uint64_t number = 0;
        if (!absl::SimpleAtoi(text, &number)) return;
        value = is_digest ? Json(absl::StrFormat("%016x", number)) : Json(number);
      } else {
        int64_t number = 0;
        if (!absl::SimpleAtoi(text, &number)) return;
        value = is_digest ? Json(absl::StrFormat("%016x", static_cast<uint64_t>(number))) : Json(number);
      }
      return;
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      if (field.type() != FieldDescriptor::TYPE_BYTES || !value.is_string()) return;
      std::string raw;
      if (!absl::Base64Unescape(value.get<std::string>(), &raw)) return;
      value = to_hex(reinterpret_cast<const uint8_t*>(raw.data()), raw.size());
      return;
    }
    default:
      return;
  }
}

void fix_message(const Descriptor& descriptor, Json& object);

void fix_field(const FieldDescriptor& field, Json& value) {
  if (field.is_map()) return;  // baton.proto has none; keys would need their own rule
  auto one = [&field](Json& v) {
    if (field.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (v.is_object()) fix_message(*field.message_type(), v);
    } else {
      fix_value(field, v);
    }
  };
  if (field.is_repeated() && value.is_array()) {
    for (Json& element : value) one(element);
  } else {
    one(value);
  }
}

void fix_message(const Descriptor& descriptor, Json& object) {
  for (int i = 0; i < descriptor.field_count(); ++i) {
    const FieldDescriptor& field = *descriptor.field(i);
    auto it = object.find(field.name());
    if (it != object.end()) fix_field(field, *it);
  }
}

}  // namespace

std::string proto_to_json(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(message, &text, options).ok()) return "null";
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return "null";
  fix_message(*message.GetDescriptor(), json);
  return json.dump();
}

}  // namespace baton
