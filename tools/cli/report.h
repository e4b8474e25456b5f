// Output of `baton bench`, `baton health`, `baton model info` and the like: a
// readable table, or with --json one JSON object on one line holding the same
// figures under snake_case keys (through json_line.h).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "json_line.h"

namespace baton::cli {

// One formatted line of a printed table on stdout (absl's format checks
// every argument's type).
template <typename... Args>
void print_line(const absl::FormatSpec<Args...>& format, const Args&... args) {
  std::fputs(absl::StrFormat(format, args...).c_str(), stdout);
}

class Report {
 public:
  explicit Report(std::string title) : title_(std::move(title)) {}

  // `key` is snake_case and names the figure; `label` is the table text.
  void add(std::string key, std::string label, double value, std::string unit = "", int precision = 2);
  void add_int(std::string key, std::string label, long long value, std::string unit = "");
  void add_text(std::string key, std::string label, std::string value);
  // A size: "3.6 MiB (3812352 B)" ("480 B" below 1 KiB) in the table, the
  // integer in JSON.
  void add_bytes(std::string key, std::string label, uint64_t bytes);
  // A figure that is 0 until measured (a speed, a round trip): the value, or
  // "not measured yet" in the table and null in JSON when `value` <= 0.
  void add_measured(std::string key, std::string label, double value, std::string unit, int precision = 1);

  // The JSON object: doubles to 6 significant digits (significant()).
  const Json& to_json() const { return json_; }
  void print_table(std::FILE* out) const;
  void print_json(std::FILE* out) const { print_json_line(json_, out); }
  void print(bool json, std::FILE* out = stdout) const { json ? print_json(out) : print_table(out); }

 private:
  struct Row {
    std::string label, value, unit;  // the table's text
  };
  void add_row(std::string key, std::string label, std::string table_value, std::string unit, Json json_value);

  std::string title_;
  std::vector<Row> rows_;
  Json json_ = Json::object();
};

}  // namespace baton::cli
