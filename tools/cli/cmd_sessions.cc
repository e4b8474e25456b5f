// baton sessions ls|rm --edge ADDR [ID]: the sessions an edge agent holds
// (ListSessions) and deleting one (DeleteSession frees its KV in memory and
// on disk).
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli_defaults.h"
#include "commands.h"
#include "common/rpc/proto_json.h"
#include "common/util/clock.h"
#include "common/util/flags.h"
#include "edge_client.h"
#include "edge_client_format.h"
#include "progress_line.h"

namespace baton::cli {
namespace {

constexpr char kSessionsUsage[] =
    "usage: baton sessions ls --edge ADDR [--json]\n"
    "       baton sessions rm --edge ADDR ID\n"
    "\n"
    "Lists the sessions an edge agent holds, or deletes one (its KV in memory and on disk).\n"
    "Run 'baton sessions ls --help' for the flags.\n";

// "12 s ago", "5 min ago", "3 h ago".
std::string age_text(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  const int64_t seconds = std::max<int64_t>(0, (unix_ms_now() - unix_ms) / 1000);
  if (seconds < 120) return absl::StrFormat("%d s ago", seconds);
  if (seconds < 7200) return absl::StrFormat("%d min ago", seconds / 60);
  return absl::StrFormat("%d h ago", seconds / 3600);
}

absl::Status sessions_ls(EdgeClient& client, bool json) {
  v1::ListSessionsResponse response;
  grpc::Status status = client.list_sessions(&response);
  if (!status.ok()) return absl::UnavailableError(client.describe("ListSessions", status));
  if (json) {
    std::printf("%s\n", proto_to_json(response).c_str());
    return absl::OkStatus();
  }
  if (response.sessions().empty()) {
    std::printf("no sessions on the edge agent at %s\n", client.target().address.c_str());
    return absl::OkStatus();
  }
  // KV IN RAM: what the session holds in memory now (its tokens' KV; 0 B
  // when it is on disk only).
  // TURNS: the turns it holds ("all 3", or "14-16" after drops); DROPPED:
  // what context overflow dropped over its life ("13 turns, 1300 tok").
  std::printf("%-24s %8s %10s  %-24s %-16s %-12s %-12s %-20s %s\n", "SESSION", "TOKENS", "KV IN RAM", "CODEC", "PACK",
              "TURNS", "DROPPED", "LAST USED", "FLAGS");
  for (const v1::SessionInfo& s : response.sessions()) {
    std::string flags_text;
    if (s.persisted()) flags_text += "persisted ";
    if (s.busy()) flags_text += "busy";
    std::string turns = "-";
    if (s.turn_count() > 0) {
      if (s.first_held_turn() == 0) {
        turns = absl::StrFormat("none of %u", s.turn_count());
      } else if (s.first_held_turn() == 1) {
        turns = absl::StrFormat("all %u", s.turn_count());
      } else {
        turns = absl::StrFormat("%u-%u", s.first_held_turn(), s.turn_count());
      }
    }
    const std::string dropped =
        s.dropped_turns() == 0 ? "-" : absl::StrFormat("%u turns, %u tok", s.dropped_turns(), s.dropped_tokens());
    std::printf("%-24s %8u %10s  %-24s %-16s %-12s %-12s %-20s %s\n", s.session_id().c_str(), s.token_count(),
                format_bytes(s.kv_bytes()).c_str(), codec_params_name(s.codec()).c_str(),
                s.pack_id().empty() ? "-" : s.pack_id().c_str(), turns.c_str(), dropped.c_str(),
                age_text(s.last_used_unix_ms()).c_str(), flags_text.c_str());
  }
  return absl::OkStatus();
}

absl::Status sessions_rm(EdgeClient& client, const std::string& session_id) {
  v1::DeleteSessionResponse response;
  grpc::Status status = client.delete_session(session_id, &response);
  if (!status.ok()) return absl::UnavailableError(client.describe("DeleteSession", status));
  std::printf("deleted session %s (%s freed)\n", session_id.c_str(), format_bytes(response.freed_bytes()).c_str());
  return absl::OkStatus();
}

}  // namespace

absl::Status sessions_command(const Args& args) {
  if (std::optional<absl::Status> help = subcommand_help(args, kSessionsUsage, /*help_word=*/true)) return *help;
  const std::string action = args[0];
  if (action != "ls" && action != "rm") {
    return exit_status(2, absl::StrCat("baton sessions: unknown action '", action, "'\n\n", kSessionsUsage));
  }
  std::string edge;
  bool json = false;
  std::chrono::milliseconds timeout{30'000};
  FlagSet flags("baton sessions " + action, action == "ls" ? "[--edge ADDR] [--json]" : "[--edge ADDR] ID",
                action == "ls" ? "Lists the sessions the edge agent holds, most recently used first."
                               : "Deletes a session: frees its KV in memory and on disk.");
  add_edge_address_flag(flags, &edge);
  ChannelSecurityOptions security;
  add_edge_channel_flags(flags, &security);
  flags.add_duration("timeout", &timeout, "deadline of the call");
  if (action == "ls") flags.add_bool("json", &json, "print the response as one JSON object");
  if (std::optional<absl::Status> done = parse_flags(flags, Args(args.begin() + 1, args.end()))) return *done;
  const size_t want_positional = action == "rm" ? 1 : 0;
  if (flags.positional().size() != want_positional) {
    return usage_error("sessions " + action, action == "rm" ? "give exactly one session ID" : "takes no arguments");
  }
  absl::StatusOr<RpcTarget> target = make_rpc_target("edge", edge, "edge agent", timeout, security);
  if (!target.ok()) return exit_status(2, absl::StrCat("baton sessions: ", target.status().message(), "\n"));
  EdgeClient client(*target);
  return action == "ls" ? sessions_ls(client, json) : sessions_rm(client, flags.positional()[0]);
}

}  // namespace baton::cli
