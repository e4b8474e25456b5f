#include "report.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "common/util/format_bytes.h"

namespace baton::cli {

void Report::add(std::string key, std::string label, double value, std::string unit, int precision) {
  rows_.push_back({std::move(key), std::move(label), std::move(unit), value, precision, ""});
}
void Report::add_int(std::string key, std::string label, long long value, std::string unit) {
  rows_.push_back({std::move(key), std::move(label), std::move(unit), value, 0, ""});
}
void Report::add_text(std::string key, std::string label, std::string value) {
  rows_.push_back({std::move(key), std::move(label), "", std::move(value), 0, ""});
}

void Report::add_bytes(std::string key, std::string label, uint64_t bytes) {
  rows_.push_back({std::move(key), std::move(label), "", static_cast<long long>(bytes), 0,
                   bytes < 1024 ? format_bytes(bytes) : absl::StrFormat("%s (%d B)", format_bytes(bytes), bytes)});
}

void Report::add_measured(std::string key, std::string label, double value, std::string unit, int precision) {
  if (value > 0) {
    add(std::move(key), std::move(label), value, std::move(unit), precision);
  } else {
    rows_.push_back({std::move(key), std::move(label), "", std::monostate{}, 0, ""});
  }
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out;
}

void Report::print_table(std::FILE* out) const {
  size_t width = 0;
  for (const Row& r : rows_) width = std::max(width, r.label.size());
  std::fprintf(out, "%s\n", title_.c_str());
  for (const Row& r : rows_) {
    std::string value;
    if (!r.table_text.empty()) {
      value = r.table_text;
    } else if (const double* d = std::get_if<double>(&r.value)) {
      value = absl::StrFormat("%.*f", r.precision, *d);
    } else if (const long long* i = std::get_if<long long>(&r.value)) {
      value = absl::StrFormat("%d", *i);
    } else if (const std::string* text = std::get_if<std::string>(&r.value)) {
      value = *text;
    } else {
      value = kNotMeasuredYet;
    }
    std::fprintf(out, "  %-*s  %s%s%s\n", static_cast<int>(width), r.label.c_str(), value.c_str(),
                 r.unit.empty() ? "" : " ", r.unit.c_str());
  }
}

void Report::print_json(std::FILE* out) const {
  std::string json = "{";
  for (size_t i = 0; i < rows_.size(); ++i) {
    const Row& r = rows_[i];
    if (i > 0) json += ", ";
    json += "\"" + r.key + "\": ";
    if (const double* d = std::get_if<double>(&r.value)) {
      json += std::isfinite(*d) ? absl::StrFormat("%.6g", *d) : "null";
    } else if (const long long* v = std::get_if<long long>(&r.value)) {
      json += absl::StrFormat("%d", *v);
    } else if (const std::string* text = std::get_if<std::string>(&r.value)) {
      json += "\"" + json_escape(*text) + "\"";
    } else {
      json += "null";
    }
  }
  json += "}";
  std::fprintf(out, "%s\n", json.c_str());
}

}  // namespace baton::cli
