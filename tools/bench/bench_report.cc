#include "bench_report.h"

#include <algorithm>
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

namespace {

void append_json(const Json& value, std::string& out) {
  if (value.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [key, member] : value.items()) {
      if (!first) out += ", ";
      first = false;
      out += Json(key).dump(-1, ' ', false, Json::error_handler_t::replace);
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
    out += value.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
}

}  // namespace

std::string json_line(const Json& value) {
  std::string out;
  append_json(value, out);
  return out;
}

void print_json_line(const Json& value, std::FILE* out) { std::fprintf(out, "%s\n", json_line(value).c_str()); }

void BenchReport::add(std::string key, std::string label, double value, std::string unit, int precision) {
  rows_.push_back({std::move(label), absl::StrFormat("%.*f", precision, value), std::move(unit)});
  json_[std::move(key)] = significant(value);
}

void BenchReport::add_int(std::string key, std::string label, long long value, std::string unit) {
  rows_.push_back({std::move(label), absl::StrFormat("%d", value), std::move(unit)});
  json_[std::move(key)] = value;
}

void BenchReport::add_text(std::string key, std::string label, std::string value) {
  rows_.push_back({std::move(label), value, ""});
  json_[std::move(key)] = std::move(value);
}

void BenchReport::print_table(std::FILE* out) const {
  size_t width = 0;
  for (const Row& r : rows_) width = std::max(width, r.label.size());
  std::fprintf(out, "%s\n", title_.c_str());
  for (const Row& r : rows_) {
    std::fprintf(out, "  %-*s  %s%s%s\n", static_cast<int>(width), r.label.c_str(), r.value.c_str(),
                 r.unit.empty() ? "" : " ", r.unit.c_str());
  }
}

void BenchReport::print(bool json, std::FILE* out) const {
  if (json) {
    print_json_line(json_, out);
  } else {
    print_table(out);
  }
}

}  // namespace baton::cli
