// Output of `baton bench ...`: a readable table, or with --json one JSON
// object on one line. The JSON goes through nlohmann-json (escaping, nulls
// for figures that are not finite); the helpers below keep each figure's
// precision and the line's layout ({"key": value, ...}) that scripts and
// tests read.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace baton::cli {

// Keys stay in the order they were set.
using Json = nlohmann::ordered_json;

// A figure rounded to `decimals` places (what "%.Nf" printed); null when
// not finite.
Json fixed(double value, int decimals);
// A figure as an integer (what "%.0f" printed); null when not finite.
Json whole(double value);
// A figure to 6 significant digits (what "%.6g" printed, a whole one as an
// integer); null when not finite.
Json significant(double value);

// `value` on one line: ", " between members, ": " after keys; strings as
// nlohmann escapes them (bytes that are not UTF-8 become U+FFFD).
std::string json_line(const Json& value);
// json_line(value) and a newline on `out`.
void print_json_line(const Json& value, std::FILE* out = stdout);

// A bench's figures as a titled two-column table or one flat JSON object.
class BenchReport {
 public:
  explicit BenchReport(std::string title) : title_(std::move(title)) {}

  // `key` is snake_case and names the figure; `label` is the table text.
  // The table shows `precision` decimals, the JSON 6 significant digits.
  void add(std::string key, std::string label, double value, std::string unit = "", int precision = 2);
  void add_int(std::string key, std::string label, long long value, std::string unit = "");
  void add_text(std::string key, std::string label, std::string value);

  Json to_json() const { return json_; }
  void print_table(std::FILE* out) const;
  void print(bool json, std::FILE* out = stdout) const;

 private:
  struct Row {
    std::string label, value, unit;
  };
  std::string title_;
  std::vector<Row> rows_;
  Json json_ = Json::object();
};

}  // namespace baton::cli
