#include "report.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "common/util/format_bytes.h"

namespace baton::cli {

void Report::add_row(std::string key, std::string label, std::string table_value, std::string unit,
                     Json json_value) {
  rows_.push_back({std::move(label), std::move(table_value), std::move(unit)});
  json_[std::move(key)] = std::move(json_value);
}

void Report::add(std::string key, std::string label, double value, std::string unit, int precision) {
  add_row(std::move(key), std::move(label), absl::StrFormat("%.*f", precision, value), std::move(unit),
          significant(value));
}
void Report::add_int(std::string key, std::string label, long long value, std::string unit) {
  add_row(std::move(key), std::move(label), absl::StrFormat("%d", value), std::move(unit), value);
}
void Report::add_text(std::string key, std::string label, std::string value) {
  add_row(std::move(key), std::move(label), value, "", value);
}

void Report::add_bytes(std::string key, std::string label, uint64_t bytes) {
  add_row(std::move(key), std::move(label),
          bytes < 1024 ? format_bytes(bytes) : absl::StrFormat("%s (%d B)", format_bytes(bytes), bytes), "",
          static_cast<long long>(bytes));
}

void Report::add_measured(std::string key, std::string label, double value, std::string unit, int precision) {
  if (value > 0) {
    add(std::move(key), std::move(label), value, std::move(unit), precision);
  } else {
    add_row(std::move(key), std::move(label), kNotMeasuredYet, "", nullptr);
  }
}

void Report::print_table(std::FILE* out) const {
  size_t width = 0;
  for (const Row& r : rows_) width = std::max(width, r.label.size());
  std::fprintf(out, "%s\n", title_.c_str());
  for (const Row& r : rows_) {
    std::fprintf(out, "  %-*s  %s%s%s\n", static_cast<int>(width), r.label.c_str(), r.value.c_str(),
                 r.unit.empty() ? "" : " ", r.unit.c_str());
  }
}

}  // namespace baton::cli
