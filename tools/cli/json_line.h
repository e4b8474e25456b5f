// The --json output of the CLI and the benches: one JSON value on one line,
// through nlohmann-json (escaping, nulls for figures that are not finite).
// The helpers keep each figure's precision and the line's layout
// ({"key": value, ...}) that scripts and tests read.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

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
// The object `head` on one line with one more member, `key`, last, whose
// value is JSON text kept as it is (proto_to_json's output, for example).
std::string json_line_with(const Json& head, std::string_view key, const std::string& raw_json);
// json_line(value) and a newline on `out`.
void print_json_line(const Json& value, std::FILE* out = stdout);

}  // namespace baton::cli
