#include "common/util/flags.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <set>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "common/util/check.h"

namespace baton {
namespace {

// Debian's Abseil is built with its own absl::string_view (not std::string_view),
// so this file keeps to std::string_view and these small helpers.
// Numbers print as decimals ("%g" for floating point), everything else as text.
template <typename Part>
void append_part(std::string& out, const Part& part) {
  if constexpr (std::is_floating_point_v<Part>) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%g", static_cast<double>(part));
    out.append(buffer);
  } else if constexpr (std::is_arithmetic_v<Part>) {
    out.append(std::to_string(part));
  } else if constexpr (std::is_same_v<Part, absl::string_view>) {
    out.append(part.data(), part.size());
  } else {
    out.append(std::string_view(part));
  }
}
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::string out;
  (append_part(out, parts), ...);
  return out;
}

std::string_view trim(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size() && absl::ascii_isspace(static_cast<unsigned char>(text[begin]))) {
    ++begin;
  }
  size_t end = text.size();
  while (end > begin && absl::ascii_isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return text.substr(begin, end - begin);
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = absl::ascii_tolower(static_cast<unsigned char>(c));
  return out;
}

// Whole-string integer parse; false on junk or overflow.
template <typename Integer>
bool parse_integer(std::string_view text, Integer* value) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return error == std::errc() && end == text.data() + text.size() && !text.empty();
}

constexpr std::string_view kSizeExamples = "(examples: 512MiB, 8GiB)";
constexpr std::string_view kDurationExamples = "(examples: 500ms, 30s, 5m)";

// Splits "1.5GiB" into the number "1.5" and the unit "GiB" (spaces between
// them allowed). Returns false when there is no leading number.
bool split_number_unit(std::string_view text, std::string_view* number,
                       std::string_view* unit) {
  size_t end = 0;
  bool seen_digit = false;
  bool seen_dot = false;
  while (end < text.size()) {
    char c = text[end];
    if (absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      seen_digit = true;
    } else if (c == '.' && !seen_dot) {
      seen_dot = true;
    } else {
      break;
    }
    ++end;
  }
  if (!seen_digit) return false;
  *number = text.substr(0, end);
  *unit = trim(text.substr(end));
  return true;
}

// "12.75" -> whole 12 and fraction 0.75; false on overflow of the whole part.
bool parse_decimal(std::string_view number, uint64_t* whole, long double* fraction) {
  size_t dot = number.find('.');
  std::string_view whole_digits = number.substr(0, dot);
  *whole = 0;
  if (!whole_digits.empty() && !parse_integer(whole_digits, whole)) return false;
  *fraction = 0;
  if (dot != std::string_view::npos) {
    long double scale = 0.1L;
    for (char c : number.substr(dot + 1)) {
      *fraction += scale * (c - '0');
      scale /= 10;
    }
  }
  return true;
}

std::string quote_if_empty(std::string_view value) {
  return value.empty() ? std::string("''") : std::string(value);
}

// Edit distance with adjacent transpositions (optimal string alignment:
// insert, delete, substitute, swap two neighbours; each costs 1), so "stast"
// is one edit from "stats". A full table: names are short.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::optional<std::string> closest_name(std::string_view typed, const std::vector<std::string>& names) {
  // A typo is a few edits of a name, or the name cut short ("--temp" for
  // "--temperature"); a third of the typed length (at least 1, at most 3)
  // keeps unrelated short names apart.
  const size_t allowed = std::clamp<size_t>(typed.size() / 3, 1, 3);
  std::optional<std::string> best;
  size_t best_distance = allowed + 1;
  for (const std::string& name : names) {
    size_t distance = edit_distance(typed, name);
    if (typed.size() >= 4 && name.starts_with(typed)) distance = std::min<size_t>(distance, 1);
    if (distance < best_distance) {
      best_distance = distance;
      best = name;
    }
  }
  return best;
}

// ---------------------------------------------------------------------------
// Sizes, durations, addresses
// ---------------------------------------------------------------------------

absl::StatusOr<uint64_t> parse_size_bytes(std::string_view text) {
  std::string_view trimmed = trim(text);
  auto bad = [&] {
    return absl::InvalidArgumentError(
        cat("cannot parse '", text, "' as a size ", kSizeExamples));
  };
  std::string_view number;
  std::string_view unit;
  if (!split_number_unit(trimmed, &number, &unit)) return bad();

  struct Unit {
    std::string_view name;
    uint64_t multiplier;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},           {"b", 1},
      {"k", 1ull << 10}, {"kib", 1ull << 10}, {"kb", 1000ull},
      {"m", 1ull << 20}, {"mib", 1ull << 20}, {"mb", 1000ull * 1000},
      {"g", 1ull << 30}, {"gib", 1ull << 30}, {"gb", 1000ull * 1000 * 1000},
      {"t", 1ull << 40}, {"tib", 1ull << 40}, {"tb", 1000ull * 1000 * 1000 * 1000},
  };
  std::string lower_unit = lower(unit);
  const Unit* match = nullptr;
  for (const Unit& candidate : kUnits) {
    if (candidate.name == lower_unit) match = &candidate;
  }
  if (match == nullptr) return bad();

  uint64_t whole = 0;
  long double fraction = 0;
  uint64_t bytes = 0;
  if (!parse_decimal(number, &whole, &fraction) ||
      __builtin_mul_overflow(whole, match->multiplier, &bytes) ||
      __builtin_add_overflow(
          bytes, static_cast<uint64_t>(std::floor(fraction * match->multiplier)), &bytes)) {
    return absl::InvalidArgumentError(
        cat("size '", text, "' is too large (at most 16EiB)"));
  }
  return bytes;
}

std::string format_size_bytes(uint64_t bytes) {
  static constexpr std::pair<std::string_view, int> kUnits[] = {
      {"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}};
  if (bytes == 0) return "0";
  for (const auto& [name, shift] : kUnits) {
    uint64_t unit = 1ull << shift;
    if (bytes % unit == 0) return cat(bytes / unit, name);
  }
  return cat(bytes);
}

absl::StatusOr<std::chrono::milliseconds> parse_duration(std::string_view text) {
  std::string_view trimmed = trim(text);
  auto bad = [&] {
    return absl::InvalidArgumentError(
        cat("cannot parse '", text, "' as a duration ", kDurationExamples));
  };
  std::string_view number;
  std::string_view unit;
  if (!split_number_unit(trimmed, &number, &unit)) return bad();

  long double ms_per_unit = 0;
  if (unit == "ms") {
    ms_per_unit = 1;
  } else if (unit == "s") {
    ms_per_unit = 1000;
  } else if (unit == "m" || unit == "min") {
    ms_per_unit = 60 * 1000;
  } else if (unit == "h") {
    ms_per_unit = 3600 * 1000;
  } else if (unit.empty() && number.find_first_not_of("0.") == std::string_view::npos) {
    ms_per_unit = 0;  // a bare zero needs no unit
  } else {
    return bad();
  }
  uint64_t whole = 0;
  long double fraction = 0;
  // 1e15 ms is ~31,700 years: far beyond any timeout, far below int64 overflow.
  constexpr long double kMaxMs = 1e15L;
  long double total_ms = 0;
  if (parse_decimal(number, &whole, &fraction)) {
    total_ms = (static_cast<long double>(whole) + fraction) * ms_per_unit;
  } else {
    total_ms = kMaxMs + 1;  // the whole part overflowed uint64
  }
  if (total_ms > kMaxMs) {
    return absl::InvalidArgumentError(cat("duration '", text, "' is too long"));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(total_ms)));
}

std::string format_duration(std::chrono::milliseconds duration) {
  int64_t ms = duration.count();
  if (ms == 0) return "0";
  if (ms % (3600 * 1000) == 0) return cat(ms / (3600 * 1000), "h");
  if (ms % (60 * 1000) == 0) return cat(ms / (60 * 1000), "m");
  if (ms % 1000 == 0) return cat(ms / 1000, "s");
  return cat(ms, "ms");
}

absl::StatusOr<std::pair<std::string, int>> parse_host_port(std::string_view address) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(cat("address '", address, "': ", why));
  };
  if (address.empty()) {
    return absl::InvalidArgumentError("address is empty; expected host:port");
  }
  if (address.find("://") != std::string_view::npos) {
    return bad("drop the scheme; expected host:port (e.g. localhost:50051)");
  }
  std::string_view host;
  std::string_view port_text;
  if (address.front() == '[') {
    size_t close = address.find(']');
    if (close == std::string_view::npos) return bad("missing ']' after the IPv6 address");
    host = address.substr(1, close - 1);
    std::string_view rest = address.substr(close + 1);
    if (rest.empty() || rest.front() != ':') {
      return bad("expected ':PORT' after ']' (e.g. [::1]:50051)");
    }
    port_text = rest.substr(1);
    if (host.find(':') == std::string_view::npos) {
      return bad("brackets are for IPv6 addresses only");
    }
    // Hex groups, ':' and embedded IPv4 dots, then an optional %zone.
    size_t zone = host.find('%');
    std::string_view ip = host.substr(0, zone);
    for (char c : ip) {
      if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') {
        return bad(cat("'", host, "' is not an IPv6 address"));
      }
    }
    if (zone != std::string_view::npos && zone + 1 == host.size()) {
      return bad("empty IPv6 zone after '%'");
    }
  } else {
    size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) {
      return bad("no port; expected host:port (e.g. localhost:50051)");
    }
    host = address.substr(0, colon);
    port_text = address.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return bad("IPv6 addresses go in brackets, e.g. [::1]:50051");
    }
    if (host.empty()) return bad("no host; expected host:port (e.g. 0.0.0.0:50051)");
    for (char c : host) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' &&
          c != '_') {
        return bad(cat("'", host, "' is not a valid host name"));
      }
    }
  }
  if (port_text.empty()) return bad("no port after ':'");
  if (port_text.size() > 5 ||
      !std::all_of(port_text.begin(), port_text.end(),
                   [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); })) {
    return bad(cat("port '", port_text, "' is not a number in 0-65535"));
  }
  int port = 0;
  BATON_CHECK(parse_integer(port_text, &port));
  if (port > 65535) return bad(cat("port ", port, " is out of range (0-65535)"));
  return std::make_pair(std::string(host), port);
}

// ---------------------------------------------------------------------------
// FlagSet
// ---------------------------------------------------------------------------

FlagSet::FlagSet(std::string program, std::string synopsis, std::string description)
    : program_(std::move(program)),
      synopsis_(std::move(synopsis)),
      description_(std::move(description)) {}

void FlagSet::add(std::string_view name, Kind kind, Target target, std::string_view help,
                  std::string_view metavar) {
  BATON_CHECK(!name.empty() && name.substr(0, 1) != "-", "flag names are given without --");
  BATON_CHECK(find(name) == nullptr, "flag registered twice");
  BATON_CHECK(name != "help", "--help is built in");
  Flag flag{std::string(name), kind, target, std::string(help), std::string(metavar), "", false,
            false};
  switch (kind) {
    case Kind::kString:
      flag.default_text = *std::get<std::string*>(target);
      break;
    case Kind::kInt64:
      flag.default_text = cat(*std::get<int64_t*>(target));
      break;
    case Kind::kDouble:
      flag.default_text = cat(*std::get<double*>(target));
      break;
    case Kind::kBool:
      // Off is the usual default and goes unsaid; on is shown.
      flag.default_text = *std::get<bool*>(target) ? "on" : "";
      break;
    case Kind::kSize:
      flag.default_text = format_size_bytes(*std::get<uint64_t*>(target));
      break;
    case Kind::kDuration:
      flag.default_text = format_duration(*std::get<std::chrono::milliseconds*>(target));
      break;
  }
  flags_.push_back(std::move(flag));
}

void FlagSet::add_string(std::string_view name, std::string* target, std::string_view help,
                         std::string_view metavar) {
  add(name, Kind::kString, target, help, metavar);
}
void FlagSet::add_int64(std::string_view name, int64_t* target, std::string_view help) {
  add(name, Kind::kInt64, target, help, "INT");
}
void FlagSet::add_double(std::string_view name, double* target, std::string_view help) {
  add(name, Kind::kDouble, target, help, "NUM");
}
void FlagSet::add_bool(std::string_view name, bool* target, std::string_view help) {
  add(name, Kind::kBool, target, help, "");
}
void FlagSet::add_size(std::string_view name, uint64_t* target_bytes, std::string_view help) {
  add(name, Kind::kSize, target_bytes, help, "SIZE");
}
void FlagSet::add_duration(std::string_view name, std::chrono::milliseconds* target,
                           std::string_view help) {
  add(name, Kind::kDuration, target, help, "DURATION");
}

void FlagSet::set_default_text(std::string_view name, std::string_view text) {
  Flag* flag = find(name);
  BATON_CHECK(flag != nullptr, "set_default_text() of an unregistered flag");
  flag->default_text = std::string(text);
}

void FlagSet::add_section(std::string_view title) { sections_.emplace_back(flags_.size(), std::string(title)); }

void FlagSet::require(std::string_view name) {
  Flag* flag = find(name);
  BATON_CHECK(flag != nullptr, "require() of an unregistered flag");
  flag->required = true;
}

void FlagSet::enable_config_file() {
  if (config_enabled_) return;
  config_enabled_ = true;
  add_string("config", &config_path_,
             "read flags from FILE: 'name = value' lines, '#' comments; "
             "command-line flags win",
             "FILE");
}

FlagSet::Flag* FlagSet::find(std::string_view name) {
  for (Flag& flag : flags_) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

const FlagSet::Flag* FlagSet::find(std::string_view name) const {
  return const_cast<FlagSet*>(this)->find(name);
}

std::vector<std::string> FlagSet::spellings() const {
  std::vector<std::string> names;
  for (const Flag& flag : flags_) {
    names.push_back(flag.name);
    if (flag.kind == Kind::kBool && !flag.name.starts_with("no-")) names.push_back(cat("no-", flag.name));
  }
  names.push_back("help");
  return names;
}

absl::Status FlagSet::unknown_flag_error(std::string message, std::string_view typed) const {
  if (std::optional<std::string> near = closest_name(typed, spellings())) {
    message += cat("; did you mean --", *near, "?");
  }
  return absl::InvalidArgumentError(message);
}

bool FlagSet::is_set(std::string_view name) const {
  const Flag* flag = find(name);
  return flag != nullptr && flag->set;
}

absl::Status FlagSet::assign(Flag& flag, std::string_view value) {
  auto bad = [&](std::string_view what) {
    return absl::InvalidArgumentError(
        cat("--", flag.name, ": cannot parse '", value, "' as ", what));
  };
  switch (flag.kind) {
    case Kind::kString:
      *std::get<std::string*>(flag.target) = std::string(value);
      break;
    case Kind::kInt64: {
      int64_t parsed = 0;
      if (!parse_integer(value, &parsed)) return bad("an integer");
      *std::get<int64_t*>(flag.target) = parsed;
      break;
    }
    case Kind::kDouble: {
      double parsed = 0;
      std::string_view text = trim(value);
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), parsed);
      if (text.empty() || error != std::errc() || end != text.data() + text.size() ||
          !std::isfinite(parsed)) {
        return bad("a number");
      }
      *std::get<double*>(flag.target) = parsed;
      break;
    }
    case Kind::kBool: {
      std::string word = lower(trim(value));
      bool parsed = false;
      if (word == "true" || word == "1" || word == "yes" || word == "on") {
        parsed = true;
      } else if (word == "false" || word == "0" || word == "no" || word == "off") {
        parsed = false;
      } else {
        return bad("a bool (true or false)");
      }
      *std::get<bool*>(flag.target) = parsed;
      break;
    }
    case Kind::kSize: {
      absl::StatusOr<uint64_t> parsed = parse_size_bytes(value);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(
            cat("--", flag.name, ": ", parsed.status().message()));
      }
      *std::get<uint64_t*>(flag.target) = *parsed;
      break;
    }
    case Kind::kDuration: {
      absl::StatusOr<std::chrono::milliseconds> parsed = parse_duration(value);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(
            cat("--", flag.name, ": ", parsed.status().message()));
      }
      *std::get<std::chrono::milliseconds*>(flag.target) = *parsed;
      break;
    }
  }
  flag.set = true;
  return absl::OkStatus();
}

absl::Status FlagSet::parse(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return parse(args);
}

absl::Status FlagSet::parse(const std::vector<std::string>& args) {
  // --help wins over everything else, even over malformed flags.
  for (const std::string& arg : args) {
    if (arg == "--") break;
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      return absl::OkStatus();
    }
  }

  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (arg == "--") {
      positional_.insert(positional_.end(), args.begin() + static_cast<ptrdiff_t>(i) + 1,
                         args.end());
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      positional_.emplace_back(arg);
      continue;
    }
    if (arg[1] != '-') {
      if (!absl::ascii_isalpha(static_cast<unsigned char>(arg[1]))) {
        positional_.emplace_back(arg);  // "-5", "-": values, not flags
        continue;
      }
      std::string_view name = arg.substr(1, arg.find('=') == std::string_view::npos ? std::string_view::npos
                                                                                     : arg.find('=') - 1);
      return unknown_flag_error(cat("unknown flag '", arg, "' (flags are written --name or --name=value)"), name);
    }

    std::string_view body = arg.substr(2);
    std::optional<std::string_view> inline_value;
    if (size_t eq = body.find('='); eq != std::string_view::npos) {
      inline_value = body.substr(eq + 1);
      body = body.substr(0, eq);
    }
    Flag* flag = find(body);
    if (flag == nullptr && !inline_value) {
      // --no-NAME turns bool NAME off; --NAME turns a bool named no-NAME off
      // (--progress undoes --no-progress).
      // No double negatives: --no-no-progress is an unknown flag.
      Flag* negated = body.starts_with("no-") ? find(body.substr(3)) : find(cat("no-", body));
      if (negated != nullptr && negated->kind == Kind::kBool &&
          negated->name.starts_with("no-") != body.starts_with("no-")) {
        BATON_RETURN_IF_ERROR(assign(*negated, "false"));
        continue;
      }
    }
    if (flag == nullptr) return unknown_flag_error(cat("unknown flag --", body), body);
    if (flag->kind == Kind::kBool && !inline_value) {
      BATON_RETURN_IF_ERROR(assign(*flag, "true"));
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            cat("--", flag->name, ": missing value (expected ", flag->metavar, ")"));
      }
      inline_value = args[++i];
    }
    BATON_RETURN_IF_ERROR(assign(*flag, *inline_value));
  }

  if (config_enabled_ && !config_path_.empty()) {
    BATON_RETURN_IF_ERROR(apply_config_file(config_path_));
  }

  for (const Flag& flag : flags_) {
    if (!flag.required) continue;
    bool empty_string =
        flag.kind == Kind::kString && std::get<std::string*>(flag.target)->empty();
    if (!flag.set) {
      return absl::InvalidArgumentError(
          cat("--", flag.name, " is required: ", flag.help));
    }
    if (empty_string) {
      return absl::InvalidArgumentError(cat("--", flag.name, ": value is empty"));
    }
  }
  return absl::OkStatus();
}

absl::Status FlagSet::apply_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(cat("--config: cannot open '", path, "'"));
  }
  // Flags given on the command line win over the file.
  std::set<std::string> from_command_line;
  for (const Flag& flag : flags_) {
    if (flag.set) from_command_line.insert(flag.name);
  }
  std::string line;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    std::string_view text = line;
    if (size_t hash = text.find('#'); hash != std::string_view::npos) {
      text = text.substr(0, hash);
    }
    text = trim(text);
    if (text.empty()) continue;
    std::string where = cat(path, ":", line_number, ": ");
    size_t eq = text.find('=');
    if (eq == std::string_view::npos) {
      return absl::InvalidArgumentError(
          cat(where, "expected 'name = value', got '", text, "'"));
    }
    std::string_view name = trim(text.substr(0, eq));
    std::string_view value = trim(text.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
      value = value.substr(1, value.size() - 2);
    }
    if (name.starts_with("--")) name.remove_prefix(2);
    Flag* flag = find(name);
    if (flag == nullptr || name == "config") {
      return unknown_flag_error(cat(where, "unknown flag '", quote_if_empty(name), "'"), name);
    }
    if (from_command_line.count(flag->name) != 0) continue;
    absl::Status status = assign(*flag, value);
    if (!status.ok()) {
      return absl::InvalidArgumentError(cat(where, status.message()));
    }
  }
  return absl::OkStatus();
}

std::string FlagSet::usage() const {
  std::string out = cat("usage: ", program_, " ", synopsis_, "\n");
  if (!description_.empty()) out += cat("\n", description_, "\n");
  out += cat("\nflags:\n");

  struct Row {
    std::string left;
    std::string right;
    std::string section;  // printed as "\nSECTION:" before the row
  };
  std::vector<Row> rows;
  for (size_t index = 0; index < flags_.size(); ++index) {
    const Flag& flag = flags_[index];
    Row row;
    for (const auto& [first, title] : sections_) {
      if (first == index) row.section = title;
    }
    row.left = flag.kind != Kind::kBool ? cat("--", flag.name, " ", flag.metavar)
               // A negative name is written as is: --no-progress, never --[no-]no-progress.
               : flag.name.starts_with("no-") ? cat("--", flag.name)
                                               : cat("--[no-]", flag.name);
    row.right = flag.help;
    if (flag.required) {
      row.right += cat(" (required)");
    } else if (!flag.default_text.empty()) {
      row.right += cat(" (default: ", flag.default_text, ")");
    }
    rows.push_back(std::move(row));
  }
  // --help goes with the flags before the first section (those apply to all).
  size_t help_at = rows.size();
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!rows[i].section.empty()) {
      help_at = i;
      break;
    }
  }
  rows.insert(rows.begin() + static_cast<ptrdiff_t>(help_at), Row{"--help", "show this help and exit", ""});

  constexpr size_t kMaxLeftWidth = 28;
  size_t left_width = 0;
  for (const Row& row : rows) {
    if (row.left.size() <= kMaxLeftWidth) left_width = std::max(left_width, row.left.size());
  }
  for (const Row& row : rows) {
    if (!row.section.empty()) out += cat("\n", row.section, ":\n");
    if (row.left.size() > left_width) {
      out += cat("  ", row.left, "\n", std::string(left_width + 4, ' '),
                      row.right, "\n");
    } else {
      out += cat("  ", row.left, std::string(left_width - row.left.size() + 2, ' '),
                      row.right, "\n");
    }
  }
  return out;
}

std::optional<int> parse_command_line(FlagSet& flags, int argc, const char* const* argv,
                                      std::FILE* out, std::FILE* err) {
  const std::string& program = flags.program();
  absl::Status status = flags.parse(argc, argv);
  if (!status.ok()) {
    std::fprintf(err, "%s: %s (see %s --help)\n", program.c_str(),
                 std::string(status.message()).c_str(), program.c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.usage().c_str(), out);
    return 0;
  }
  return std::nullopt;
}

}  // namespace baton
