#include "chat_session.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/util/atomic_file.h"
#include "common/util/flags.h"
#include "edge_decode/store/session.h"

namespace baton::cli {
namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ' || text.back() == '\t')) {
    text.remove_suffix(1);
  }
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  return text;
}

bool valid_name(const std::string& name) { return is_valid_session_id(name, kMaxClientSessionIdChars); }

}  // namespace

ChatInput parse_chat_input(std::string_view line) {
  const std::string_view text = trim(line);
  if (text.empty()) return {ChatInputKind::kEmpty, ""};
  if (text.front() != '/') return {ChatInputKind::kMessage, std::string(text)};
  if (text.starts_with("//")) return {ChatInputKind::kMessage, std::string(text.substr(1))};
  const size_t space = text.find_first_of(" \t");
  const std::string command(text.substr(1, space == std::string_view::npos ? std::string_view::npos : space - 1));
  const std::string argument(space == std::string_view::npos ? std::string_view() : trim(text.substr(space)));
  auto no_argument = [&](ChatInputKind kind) {
    if (argument.empty()) return ChatInput{kind, ""};
    return ChatInput{ChatInputKind::kError, absl::StrFormat("/%s takes no argument", command)};
  };
  if (command == "reset") return no_argument(ChatInputKind::kReset);
  if (command == "stats") return no_argument(ChatInputKind::kStats);
  if (command == "help" || command == "?") return no_argument(ChatInputKind::kHelp);
  if (command == "quit" || command == "exit") return no_argument(ChatInputKind::kQuit);
  if (command == "save") {
    if (argument.empty()) return {ChatInputKind::kError, "/save needs a NAME: /save NAME"};
    if (!valid_name(argument)) {
      return {ChatInputKind::kError,
              absl::StrFormat("/save: '%s' is not 1..%d characters of [A-Za-z0-9._-]", argument,
                              kMaxClientSessionIdChars)};
    }
    return {ChatInputKind::kSave, argument};
  }
  std::string error = absl::StrFormat("unknown command /%s", command);
  if (std::optional<std::string> near = closest_name(command, {"reset", "stats", "save", "help", "quit", "exit"})) {
    error += absl::StrFormat("; did you mean /%s?", *near);
  }
  return {ChatInputKind::kError, error + " (/help lists them; //text sends a line that starts with /)"};
}

const char* chat_help_text() {
  return "  /reset      start a new conversation (a new session; the old one stays on the agent)\n"
         "  /stats      the stats of the last answer\n"
         "  /save NAME  name this session: 'baton chat --session NAME' resumes it\n"
         "  /help       this list\n"
         "  /quit       leave (also /exit or end of input, Ctrl-D)\n"
         "  Ctrl-C      stop the answer being written (what was shown is kept); twice: leave\n"
         "  //text      send a message that starts with '/'\n";
}

std::string new_chat_session_id() {
  std::random_device device;
  const uint64_t bits = (static_cast<uint64_t>(device()) << 32) ^ device();
  return absl::StrFormat("chat-%012x", bits & 0xffffffffffffULL);
}

std::string chat_names_path() {
  if (const char* home = std::getenv("BATON_HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/chat-names";
  }
  const char* user_home = std::getenv("HOME");
  return std::string(user_home != nullptr && *user_home != '\0' ? user_home : ".") + "/.baton/chat-names";
}

absl::StatusOr<std::map<std::string, std::string>> load_chat_names(const std::string& path) {
  std::map<std::string, std::string> names;
  std::ifstream in(path);
  if (!in) return names;
  std::string line;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    std::istringstream fields(line);
    std::string name, id;
    if (!(fields >> name)) continue;
    if (!(fields >> id) || !valid_name(name)) {
      return absl::DataLossError(absl::StrFormat("%s:%d: expected 'NAME SESSION_ID', got '%s'", path, line_number, line));
    }
    names[name] = id;
  }
  return names;
}

absl::Status save_chat_name(const std::string& path, const std::string& name, const std::string& session_id) {
  if (!valid_name(name)) return absl::InvalidArgumentError("'" + name + "' is not a valid name");
  absl::StatusOr<std::map<std::string, std::string>> names = load_chat_names(path);
  if (!names.ok()) return names.status();
  (*names)[name] = session_id;
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), error);
  std::string text;
  for (const auto& [key, id] : *names) absl::StrAppend(&text, key, " ", id, "\n");
  // A plain file the user may read or edit (kShared), replaced whole so a
  // crash leaves the old list or the new one.
  if (absl::Status written = write_file_atomically(path, text, AtomicFileMode::kShared); !written.ok()) {
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", written.message()));
  }
  return absl::OkStatus();
}

std::string resolve_chat_session(const std::map<std::string, std::string>& names, const std::string& name_or_id) {
  auto it = names.find(name_or_id);
  return it != names.end() ? it->second : name_or_id;
}

}  // namespace baton::cli
