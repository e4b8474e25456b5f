#include "json_line.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace baton::cli {

namespace {

// The double nearest to `digits` (a figure as printf wrote it): nlohmann
// prints it back as exactly those digits (shortest round trip). Locale-free
// both ways, unlike strtod.
Json as_printed(const std::string& digits) {
  double parsed = 0;
  if (!absl::SimpleAtod(digits, &parsed)) return nullptr;
  return parsed;
}

std::string dump(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

void append_json(const Json& value, std::string& out) {
  if (value.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [key, member] : value.items()) {
      if (!first) out += ", ";
      first = false;
      out += dump(Json(key));
      out += ": ";
      append_json(member, out);
    }
    out += '}';
  } else if (value.is_array()) {
    out += '[';
    for (size_t i = 0; i < value.size(); ++i) {
      if (i > 0) out += ", ";
      append_json(value[i], out);
    }
    out += ']';
  } else {
    out += dump(value);
  }
}

}  // namespace

Json fixed(double value, int decimals) {
  if (!std::isfinite(value)) return nullptr;
  return as_printed(absl::StrFormat("%.*f", decimals, value));
}

Json whole(double value) {
  if (!std::isfinite(value)) return nullptr;
  return static_cast<long long>(std::llround(value));
}

Json significant(double value) {
  if (!std::isfinite(value)) return nullptr;
  const std::string digits = absl::StrFormat("%.6g", value);
  // "%.6g" wrote whole figures without a point ("1632"): keep them integers.
  long long integer = 0;
  if (digits.find_first_of(".eE") == std::string::npos && absl::SimpleAtoi(digits, &integer)) return integer;
  return as_printed(digits);
}

std::string json_line(const Json& value) {
  std::string out;
  append_json(value, out);
  return out;
}

std::string json_line_with(const Json& head, std::string_view key, const std::string& raw_json) {
  std::string out = json_line(head);
  out.pop_back();  // the closing '}'
  if (!head.empty()) out += ", ";
  out += dump(Json(std::string(key)));
  out += ": ";
  out += raw_json;
  out += '}';
  return out;
}

void print_json_line(const Json& value, std::FILE* out) { std::fprintf(out, "%s\n", json_line(value).c_str()); }

}  // namespace baton::cli
