// The pieces of `baton chat` that hold no connection (unit-tested): what a
// typed line means, the chat's session id, and the names /save gives them.
//
// Lines: text is a message; "/reset", "/stats", "/save NAME", "/help" and
// "/quit" (also "/exit") are commands; "//text" sends "/text"; an empty line
// does nothing.
//
// Names: /save NAME records NAME -> session id in the chat names file
// ($BATON_HOME/chat-names, default ~/.baton/chat-names; lines "NAME ID"), so
// `baton chat --session NAME` resumes the session (a name that is not in the
// file is taken as a session id itself). The agent keeps the session's KV;
// the file only remembers which id a name stands for.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace baton::cli {

enum class ChatInputKind { kMessage, kEmpty, kReset, kStats, kSave, kHelp, kQuit, kError };

struct ChatInput {
  ChatInputKind kind = ChatInputKind::kEmpty;
  std::string text;  // kMessage: the message; kSave: the name; kError: what is wrong
};

ChatInput parse_chat_input(std::string_view line);
// The /help text.
const char* chat_help_text();

// "chat-" + 12 random hex digits.
std::string new_chat_session_id();

// Where the names live: $BATON_HOME/chat-names, else $HOME/.baton/chat-names.
std::string chat_names_path();
// NAME -> session id; an absent file is an empty map.
absl::StatusOr<std::map<std::string, std::string>> load_chat_names(const std::string& path);
// Adds or replaces NAME (written to a temp file, then renamed over the old).
absl::Status save_chat_name(const std::string& path, const std::string& name, const std::string& session_id);
// The session id `name_or_id` stands for: its entry in the file, else itself.
std::string resolve_chat_session(const std::map<std::string, std::string>& names, const std::string& name_or_id);

}  // namespace baton::cli
