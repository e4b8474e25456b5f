// baton bench load --edge ADDR: a bounded load test of one edge agent (and the
// cloud behind it). N clients, each on its own gRPC channel (its own TCP
// connection, as N separate programs would have), run M sessions of T turns
// each: turn t of every session before turn t + 1 of any (the client's
// sessions interleave), one call in flight per client. Every turn is a real
// Edge.Generate with a prompt built deterministically from --seed.
//
// Measured: requests sent / completed / failed (by gRPC status code, one
// sample message each), time to first token (from sending the request to the
// first text/token message, so queueing in the agent counts) and total latency
// (p50/p90/p99/max), tokens generated, where prefill ran, and the memory
// high-water of the edge and cloud processes (/proc/PID/status, sampled every
// 100 ms). After the run, the "nothing lost" check: for every session that
// completed all its turns, the agent's ListSessions must show the KV token
// count the turns imply (and, with token prompts, the same prefix digest), so
// sessions evicted to disk under memory pressure still hold every completed
// turn. A mismatch or a missing session exits 1.
//
// --clients LIST (e.g. 1,2,4,8) runs one such load per client count (fresh
// sessions each) and prints one table: aggregate tok/s, its ratio to the
// first count, per-client tok/s, inter-token latency p50/p99 and TTFT. At
// --temperature 0 it then runs every client's requests once more, one call
// at a time, and checks that each level's replies are identical (greedy
// output must not depend on the other sessions batched with it); a
// difference exits 1.
//
// Bounded: no turn starts after --duration-s, and every call has the
// --deadline-ms deadline. A session stops at its first failed turn (its later
// turns are reported as skipped), so completed + failed == sent.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench_harness.h"
#include "bench_load.h"
#include "cli_defaults.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/rpc/grpc_status.h"
#include "common/util/check.h"
#include "common/util/clock.h"
#include "edge_client.h"
#include "edge_client_rpc.h"
#include "edge_decode/plan/split_policy.h"
#include "progress_line.h"
#include "proto/baton.grpc.pb.h"

namespace baton::cli {
namespace {

// Words of the text prompts (--prompt-words): KJV-flavoured, so the bundled
// model's tokenizer sees ordinary words.
constexpr const char* kWords[] = {
    "and",   "the",    "of",     "unto",  "LORD",  "God",   "said",   "him",   "them",   "that",  "he",
    "shall", "in",     "his",    "land",  "came",  "to",    "people", "house", "king",   "day",   "for",
    "earth", "heaven", "light",  "water", "went",  "upon",  "before", "all",   "children", "Israel", "son",
    "made",  "great",  "spake",  "saying", "hand", "city",  "servant", "behold", "thou",  "thy",   "word",
    "brought", "forth", "night", "hath",  "into",  "also",  "men",    "out",   "from",   "were",  "which"};
constexpr size_t kWordCount = sizeof(kWords) / sizeof(kWords[0]);

struct LoadConfig {
  std::string edge;
  ChannelSecurityOptions security;  // --ca, --api-key-file (also --token-file)
  int64_t clients = 4;
  std::vector<int64_t> client_counts;  // --clients LIST: one level each (more than one: a sweep)
  int64_t sessions_per_client = 3;
  int64_t turns = 2;
  std::string prompt_tokens = "";  // comma-separated lengths in tokens; token-id prompts
  std::string prompt_words = "";   // comma-separated lengths in words; text prompts
  std::string policy = "auto";
  int64_t max_tokens = 16;
  double temperature = 0.8;
  double duration_s = 120;
  int64_t deadline_ms = 60'000;
  int64_t edge_pid = 0;
  int64_t cloud_pid = 0;
  int64_t seed = 1;
  std::string session_prefix = "load";
  bool json = false;
};

// One Generate as the client saw it.
struct TurnResult {
  int client = 0, session = 0, turn = 0;
  // "" when completed; else a gRPC code name, BAD_STREAM (a stream against
  // the proto) or CONTEXT_MISMATCH (the session did not hold its earlier turns).
  std::string error_kind;
  std::string message;          // the error, one line
  double ttft_ms = -1;          // -1: no token arrived
  double total_ms = 0;          // request sent -> stream finished
  uint32_t generated = 0;       // token ids received
  std::vector<int32_t> generated_ids;
  std::vector<double> gaps_ms;  // between consecutive tokens received (0 within one message)
  double stream_ms = 0;         // first token -> last token
  double decode_batch_mean = 0; // Stats.decode_batch_mean: turns per decode step (0: not reported)
  v1::PrefillPlace place = v1::PREFILL_PLACE_UNSPECIFIED;
  bool fell_back = false;
  int retries = 0;
};

// The session's tokens after a turn: the KV its Stats report plus the last
// sampled token, which runs into the KV with the next turn; none after an
// end-of-sequence (the EOS token is not kept, the last kept one is in the KV).
uint64_t conversation_tokens(const v1::Stats& stats) {
  return uint64_t{stats.context_tokens()} + (stats.finish_reason() == v1::FINISH_REASON_EOS ? 0 : 1);
}

// A session as the client tracks it: what the agent must hold afterwards.
struct SessionTrack {
  std::string id;
  int turns_done = 0;
  bool failed = false;
  int skipped_turns = 0;
  std::string lost;                  // set: a turn showed the agent had lost earlier turns
  uint64_t conversation_tokens = 0;  // prompt + generated tokens of the completed turns
  std::vector<int32_t> tokens;       // the same tokens, when the prompts are token ids
  bool last_turn_ended_at_eos = false;
  // KV positions the agent holds after the completed turns: the last
  // sampled token gets its KV only when the next turn feeds it, unless the
  // turn ended at end-of-sequence (that token is not kept).
  uint64_t expected_kv_tokens() const {
    return conversation_tokens == 0 ? 0 : conversation_tokens - (last_turn_ended_at_eos ? 0 : 1);
  }
};

struct ClientResult {
  std::vector<TurnResult> turns;
  std::vector<SessionTrack> sessions;
};

std::optional<MemorySample> read_memory(int64_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  if (!in) return std::nullopt;
  MemorySample sample;
  bool seen = false;
  for (std::string line; std::getline(in, line);) {
    uint64_t kib = 0;
    if (std::sscanf(line.c_str(), "VmHWM: %" SCNu64 " kB", &kib) == 1) sample.hwm_bytes = kib * 1024, seen = true;
    if (std::sscanf(line.c_str(), "VmRSS: %" SCNu64 " kB", &kib) == 1) sample.rss_bytes = kib * 1024;
  }
  if (!seen) return std::nullopt;
  return sample;
}

// Polls the agent's Health while the load runs.
void sample_agent(AgentWatch& watch, EdgeClient& client) {
  v1::EdgeHealthResponse health;
  if (!client.health(&health).ok()) {
    ++watch.failures;
    return;
  }
  watch.max_kv_used_bytes = std::max<uint64_t>(watch.max_kv_used_bytes, health.memory().kv_used_bytes());
  watch.max_running = std::max(watch.max_running, health.running());
  watch.max_queued = std::max(watch.max_queued, health.queued());
  ++watch.samples;
}

absl::StatusOr<std::vector<int64_t>> parse_lengths(const std::string& flag, const std::string& text) {
  std::vector<int64_t> lengths;
  for (const std::string& part : std::vector<std::string>(absl::StrSplit(text, ',', absl::SkipEmpty()))) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(part, &value) || value < 1 || value > 100'000) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--%s: '%s' is not a length in 1..100000", flag, part));
    }
    lengths.push_back(value);
  }
  if (lengths.empty()) return absl::InvalidArgumentError(absl::StrFormat("--%s: no length given", flag));
  return lengths;
}

// A seed per (client, session, turn): prompts and sampling are the same on
// every run with the same --seed.
uint64_t turn_seed(int64_t seed, int client, int session, int turn) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(client),
                    static_cast<uint32_t>(session), static_cast<uint32_t>(turn)};
  std::array<uint32_t, 2> out{};
  seq.generate(out.begin(), out.end());
  return (uint64_t{out[0]} << 32) | out[1];
}

}  // namespace

Distribution distribution(std::vector<double> values) {
  Distribution d;
  d.count = values.size();
  if (values.empty()) return d;
  d.p50 = percentile(values, 0.50);
  d.p90 = percentile(values, 0.90);
  d.p99 = percentile(values, 0.99);
  d.max = *std::max_element(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  d.mean = sum / static_cast<double>(values.size());
  return d;
}

void MemoryWatch::sample() {
  if (pid <= 0 || gone) return;
  std::optional<MemorySample> s = read_memory(pid);
  if (!s) {
    gone = true;
    return;
  }
  max_rss_bytes = std::max(max_rss_bytes, s->rss_bytes);
  hwm_bytes = std::max(hwm_bytes, s->hwm_bytes);
  ++samples;
}

namespace {

// Everything a client thread needs; shared read-only.
struct LoadPlan {
  LoadConfig config;
  RpcTarget target;
  v1::SplitPolicy policy = v1::SPLIT_POLICY_AUTO;
  bool token_prompts = true;
  std::vector<int64_t> lengths;  // tokens or words per prompt, used round robin
  uint32_t n_vocab = 0;
  Clock::time_point start;
  Clock::time_point stop_starting;  // no turn starts after this (--duration-s)
};

// The prompt of one turn: token ids (uniform over the vocabulary) or words.
void fill_prompt(const LoadPlan& plan, int client, int session, int turn, v1::GenerateRequest* request,
                 std::vector<int32_t>* ids) {
  const size_t pick = static_cast<size_t>(client * plan.config.sessions_per_client + session + turn);
  const int64_t length = plan.lengths[pick % plan.lengths.size()];
  std::mt19937_64 rng(turn_seed(plan.config.seed, client, session, turn));
  if (plan.token_prompts) {
    std::uniform_int_distribution<uint32_t> id(0, plan.n_vocab - 1);
    for (int64_t i = 0; i < length; ++i) {
      const uint32_t token = id(rng);
      request->mutable_tokens()->add_ids(token);
      ids->push_back(static_cast<int32_t>(token));
    }
    return;
  }
  std::uniform_int_distribution<size_t> word(0, kWordCount - 1);
  std::string text = turn == 0 ? "" : " ";
  for (int64_t i = 0; i < length; ++i) {
    if (i > 0) text += (i % 12 == 0) ? ". " : " ";
    text += kWords[word(rng)];
  }
  text += ".";
  request->set_text(text);
}

// What one Generate stream delivered.
struct TurnStream {
  std::vector<int32_t> prompt_ids;     // sent, with token prompts
  std::vector<int32_t> generated_ids;  // received
  std::optional<v1::Stats> stats;
  bool bad_order = false;  // a message after Stats
  grpc::Status status;
};

// Sets turn.error_kind and message when the stream failed or disagrees with
// what the session held; else records the turn in `track`.
void judge_turn(const LoadPlan& plan, const TurnStream& st, int t, SessionTrack& track, TurnResult& turn) {
  const std::optional<v1::Stats>& stats = st.stats;
  if (!st.status.ok()) {
    turn.error_kind = absl::StatusCodeToString(from_grpc_status(st.status).code());
    turn.message = describe_rpc_error(plan.target, "Generate", st.status);
  } else if (!stats.has_value() || st.bad_order) {
    turn.error_kind = "BAD_STREAM";
    turn.message = stats.has_value() ? "a message followed Stats" : "the stream ended OK without Stats";
  } else if (stats->generated_tokens() != st.generated_ids.size() ||
             (plan.token_prompts && stats->prompt_tokens() != st.prompt_ids.size())) {
    turn.error_kind = "BAD_STREAM";
    turn.message = absl::StrFormat("Stats disagree with the stream: generated %d (received %d ids), prompt %d (sent %d)",
                                   stats->generated_tokens(), st.generated_ids.size(), stats->prompt_tokens(),
                                   st.prompt_ids.size());
  } else if (const uint64_t held_before = conversation_tokens(*stats) - stats->prompt_tokens() - st.generated_ids.size();
             conversation_tokens(*stats) < stats->prompt_tokens() + st.generated_ids.size() ||
             held_before != track.conversation_tokens) {
    // The agent continued the session from another length: it forgot
    // (or invented) earlier turns.
    turn.error_kind = "CONTEXT_MISMATCH";
    turn.message = absl::StrFormat(
        "session %s: turn %d continued from %d tokens; the %d completed turns hold %d (context %d = that + "
        "prompt %d + generated %d)",
        track.id, t, static_cast<int64_t>(held_before), track.turns_done, track.conversation_tokens,
        conversation_tokens(*stats), stats->prompt_tokens(), st.generated_ids.size());
    track.lost = turn.message;
  }
  if (!turn.error_kind.empty()) {
    track.failed = true;
    return;
  }
  turn.place = stats->plan().place();
  turn.decode_batch_mean = stats->decode_batch_mean();
  turn.fell_back = !stats->fallback_reason().empty();
  track.conversation_tokens = conversation_tokens(*stats);
  track.tokens.insert(track.tokens.end(), st.prompt_ids.begin(), st.prompt_ids.end());
  track.tokens.insert(track.tokens.end(), st.generated_ids.begin(), st.generated_ids.end());
  track.last_turn_ended_at_eos = stats->finish_reason() == v1::FINISH_REASON_EOS;
  ++track.turns_done;
}

// Turn `t` of session `s` of `client`: one Generate, timed and judged.
TurnResult run_turn(const LoadPlan& plan, v1::Edge::Stub& stub, int client, int s, int t, SessionTrack& track) {
  const LoadConfig& c = plan.config;
  TurnStream st;
  v1::GenerateRequest request;
  fill_prompt(plan, client, s, t, &request, &st.prompt_ids);
  request.set_session_id(track.id);
  request.set_policy(plan.policy);
  request.set_max_tokens(static_cast<uint32_t>(c.max_tokens));
  request.mutable_sampling()->set_temperature(static_cast<float>(c.temperature));
  request.mutable_sampling()->set_seed(turn_seed(c.seed ^ 0x5eed, client, s, t));

  TurnResult turn;
  turn.client = client;
  turn.session = s;
  turn.turn = t;
  const Clock::time_point sent = Clock::now();
  std::optional<Clock::time_point> first_token;
  std::optional<Clock::time_point> last_token;
  st.status = call_with_retry(
      plan.target, RpcClock::now() + std::chrono::milliseconds(c.deadline_ms),
      [&](grpc::ClientContext& context, bool* started) {
        turn.gaps_ms.clear();
        last_token.reset();
        std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub.Generate(&context, request);
        v1::GenerateResponse message;
        while (reader->Read(&message)) {
          *started = true;
          if (st.stats.has_value()) st.bad_order = true;
          if (message.has_text()) {
            const Clock::time_point now = Clock::now();
            if (!first_token && (message.text().token_ids_size() > 0 || !message.text().text().empty())) {
              first_token = now;
            }
            for (int i = 0; i < message.text().token_ids_size(); ++i) {
              if (last_token) turn.gaps_ms.push_back(i == 0 ? ms_between(*last_token, now) : 0.0);
              last_token = now;
              st.generated_ids.push_back(static_cast<int32_t>(message.text().token_ids(i)));
            }
          } else if (message.has_stats()) {
            st.stats = message.stats();
          }
        }
        return reader->Finish();
      },
      &turn.retries);
  turn.total_ms = ms_between(sent, Clock::now());
  if (first_token) turn.ttft_ms = ms_between(sent, *first_token);
  turn.generated = static_cast<uint32_t>(st.generated_ids.size());
  if (first_token && last_token) turn.stream_ms = ms_between(*first_token, *last_token);
  turn.generated_ids = st.generated_ids;
  judge_turn(plan, st, t, track, turn);
  return turn;
}

// One client: its own channel and stub; its sessions' turns interleaved.
ClientResult run_client(const LoadPlan& plan, int client) {
  ClientResult result;
  // A channel of its own (a local subchannel pool), so each client has its
  // own TCP connection instead of sharing the process's. Receive limit as
  // cli::open_channel(): Generate messages are small, but stay consistent.
  std::shared_ptr<grpc::Channel> channel = baton::open_channel(
      plan.target.address, plan.target.credentials, {.max_receive_bytes = 64 << 20, .own_connection = true});
  std::unique_ptr<v1::Edge::Stub> stub = v1::Edge::NewStub(channel);
  const LoadConfig& c = plan.config;
  for (int s = 0; s < c.sessions_per_client; ++s) {
    SessionTrack track;
    track.id = absl::StrFormat("%s-c%d-s%d", c.session_prefix, client, s);
    result.sessions.push_back(std::move(track));
  }
  for (int t = 0; t < c.turns; ++t) {
    for (int s = 0; s < c.sessions_per_client; ++s) {
      SessionTrack& track = result.sessions[static_cast<size_t>(s)];
      if (track.failed || Clock::now() >= plan.stop_starting) {
        ++track.skipped_turns;
        continue;
      }
      result.turns.push_back(run_turn(plan, *stub, client, s, t, track));
    }
  }
  return result;
}

// Parses and checks the flags; false after --help. A bad value is a usage
// error (exit 2).
absl::StatusOr<bool> parse_load_flags(const Args& args, LoadConfig& c) {
  std::string clients_text = std::to_string(c.clients);
  FlagSet flags(
      "baton bench load",
      "--edge ADDR [--clients N|LIST] [--sessions-per-client M] [--turns T] [--prompt-tokens LIST | --prompt-words "
      "LIST] [--policy auto|local|cloud] [--edge-pid PID] [--cloud-pid PID] [--json]",
      "A bounded load test of one edge agent: N clients (one gRPC channel each, one call in flight each) run M "
      "sessions of T turns (a session's turns are follow-ups; a client interleaves its sessions). Prompts are "
      "built from --seed: random token ids (--prompt-tokens) or words (--prompt-words), lengths taken round "
      "robin from the list so long and short turns mix. Reports requests sent/completed, errors by gRPC status "
      "(one sample message each), time to first token and total latency (p50/p90/p99/max), tokens generated, "
      "prefill places, and the peak resident memory of the edge and cloud processes (--edge-pid/--cloud-pid, "
      "sampled every 100 ms). Then checks that nothing was lost: every session that completed all its turns is "
      "listed by the agent with the KV token count those turns imply (exit 1 otherwise). A session stops at its "
      "first failed turn.");
  add_edge_address_flag(flags, &c.edge);
  add_edge_channel_flags(flags, &c.security);
  flags.add_string("token-file", &c.security.token_path, "the same as --api-key-file", "FILE");
  flags.add_string("clients", &clients_text,
                   "concurrent clients, or a comma-separated list of counts (1,2,4,8): one load per count, one "
                   "table with the ratio of each aggregate tok/s to the first (and, at --temperature 0, the greedy "
                   "identity check against one call at a time)",
                   "N|LIST");
  flags.add_int64("sessions-per-client", &c.sessions_per_client, "sessions each client runs");
  flags.add_int64("turns", &c.turns, "turns per session (each after the first a follow-up)");
  flags.add_string("prompt-tokens", &c.prompt_tokens,
                   "prompt lengths in tokens, comma-separated, used round robin (token-id prompts); default 32,256",
                   "LIST");
  flags.add_string("prompt-words", &c.prompt_words, "prompt lengths in words (text prompts), instead", "LIST");
  flags.add_string("policy", &c.policy, "where the agent prefills: auto, local or cloud", "NAME");
  flags.add_int64("max-tokens", &c.max_tokens, "tokens generated per turn");
  flags.add_double("temperature", &c.temperature, "sampling temperature (seeded per turn)");
  flags.add_double("duration-s", &c.duration_s, "no turn starts after this many seconds");
  flags.add_int64("deadline-ms", &c.deadline_ms, "deadline of each Generate call, retries included");
  flags.add_int64("edge-pid", &c.edge_pid, "edge process to watch (VmHWM/VmRSS); 0: none");
  flags.add_int64("cloud-pid", &c.cloud_pid, "cloud process to watch; 0: none");
  flags.add_int64("seed", &c.seed, "seed of the prompts and of sampling");
  flags.add_string("session-prefix", &c.session_prefix, "session ids are PREFIX-cC-sS; none may exist yet", "STR");
  flags.add_bool("json", &c.json, "print one JSON object");
  BATON_ASSIGN_OR_RETURN(const bool run, parse_bench_flags(flags, args));
  if (!run) return false;
  auto usage = [](const std::string& message) { return usage_error("bench load", message); };
  if (!flags.positional().empty()) return usage("unexpected argument '" + flags.positional().front() + "'");
  c.client_counts.clear();
  for (const std::string& part : std::vector<std::string>(absl::StrSplit(clients_text, ',', absl::SkipEmpty()))) {
    int64_t count = 0;
    if (!absl::SimpleAtoi(part, &count) || count < 1 || count > 1024) {
      return usage(absl::StrFormat("--clients %s: must be 1..1024", part));
    }
    c.client_counts.push_back(count);
  }
  if (c.client_counts.empty() || c.client_counts.size() > 16) {
    return usage(absl::StrFormat("--clients '%s': give 1 to 16 counts", clients_text));
  }
  c.clients = c.client_counts.front();
  if (c.sessions_per_client < 1 || c.sessions_per_client > 10'000 || c.turns < 1 || c.turns > 10'000) {
    return usage("--sessions-per-client and --turns must be 1..10000");
  }
  if (c.max_tokens < 1 || c.max_tokens > 100'000) return usage("--max-tokens must be 1..100000");
  if (c.deadline_ms < 1) return usage("--deadline-ms must be >= 1");
  if (!(c.duration_s > 0)) return usage("--duration-s must be > 0");
  if (!(c.temperature >= 0)) return usage("--temperature must be >= 0");
  if (!c.prompt_tokens.empty() && !c.prompt_words.empty()) {
    return usage("give one of --prompt-tokens and --prompt-words");
  }
  // Session ids are [A-Za-z0-9._-], at most 128 characters (proto).
  if (c.session_prefix.empty() || c.session_prefix.size() > 64 ||
      c.session_prefix.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") !=
          std::string::npos) {
    return usage("--session-prefix '" + c.session_prefix + "': 1..64 characters of [A-Za-z0-9._-]");
  }
  return true;
}

// The plan from the flags: prompt lengths, policy and the agent's address
// (usage errors when they do not parse).
absl::StatusOr<LoadPlan> make_plan(const LoadConfig& c) {
  LoadPlan plan;
  plan.config = c;
  plan.token_prompts = c.prompt_words.empty();
  absl::StatusOr<std::vector<int64_t>> lengths =
      plan.token_prompts ? parse_lengths("prompt-tokens", c.prompt_tokens.empty() ? "32,256" : c.prompt_tokens)
                         : parse_lengths("prompt-words", c.prompt_words);
  if (!lengths.ok()) return usage_error("bench load", std::string(lengths.status().message()));
  plan.lengths = *lengths;
  if (c.policy == "auto") {
    plan.policy = v1::SPLIT_POLICY_AUTO;
  } else if (c.policy == "local") {
    plan.policy = v1::SPLIT_POLICY_LOCAL;
  } else if (c.policy == "cloud") {
    plan.policy = v1::SPLIT_POLICY_CLOUD;
  } else {
    return usage_error("bench load", "--policy: '" + c.policy + "' is not one of auto, local, cloud");
  }
  absl::StatusOr<RpcTarget> target = make_rpc_target("edge", c.edge, "edge agent",
                                                     std::chrono::milliseconds(c.deadline_ms), c.security);
  if (!target.ok()) return usage_error("bench load", std::string(target.status().message()));
  plan.target = *target;
  return plan;
}

// A watch of process `pid` (0: none) with its memory at the start.
absl::Status start_watch(MemoryWatch& w, int64_t pid, const std::string& name) {
  w.pid = pid;
  w.name = name;
  if (w.pid == 0) return absl::OkStatus();
  std::optional<MemorySample> s = w.pid > 0 ? read_memory(w.pid) : std::nullopt;
  if (!s) {
    return usage_error("bench load", absl::StrFormat("--%s-pid %d: cannot read /proc/%d/status", w.name, w.pid, w.pid));
  }
  w.at_start = *s;
  return absl::OkStatus();
}

// The agent must be READY, and hold no session the run would continue; its
// vocabulary sizes token prompts, its memory plan goes into the report.
absl::StatusOr<v1::MemoryPlan> check_agent(EdgeClient& admin, LoadPlan& plan) {
  const LoadConfig& c = plan.config;
  v1::EdgeHealthResponse health;
  grpc::Status health_status = admin.health(&health);
  if (!health_status.ok()) return absl::UnavailableError(admin.describe("Health", health_status));
  if (health.state() != v1::SERVING_STATE_READY) {
    return absl::UnavailableError(
        absl::StrFormat("the edge agent at %s is %s, not READY (wait with 'baton health --edge %s --wait 60s')",
                        c.edge, v1::ServingState_Name(health.state()), c.edge));
  }
  plan.n_vocab = health.model().n_vocab();
  if (plan.token_prompts && plan.n_vocab == 0) {
    return absl::FailedPreconditionError("the edge agent's Health reports no vocabulary size");
  }
  v1::ListSessionsResponse before;
  grpc::Status listed = admin.list_sessions(&before);
  if (!listed.ok()) return absl::UnavailableError(admin.describe("ListSessions", listed));
  for (const v1::SessionInfo& s : before.sessions()) {
    if (s.session_id().rfind(c.session_prefix + "-", 0) == 0) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "session %s already exists on the agent: its turns would continue it; choose another "
          "--session-prefix or delete the sessions (baton sessions rm)",
          s.session_id()));
    }
  }
  return health.memory();
}

// The run: the clients' threads, and a sampler of memory and the agent's
// Health every 100 ms until they are done.
std::vector<ClientResult> run_load(LoadPlan& plan, LoadRun& run) {
  const LoadConfig& c = plan.config;
  plan.start = Clock::now();
  plan.stop_starting = plan.start + std::chrono::milliseconds(static_cast<int64_t>(c.duration_s * 1000));
  std::atomic<bool> running{true};
  // The agent's own view, polled with the memory: KV held by sessions
  // (admission control keeps it under the KV budget) and its queue.
  RpcTarget poll_target = plan.target;
  poll_target.timeout = std::chrono::milliseconds(2'000);
  EdgeClient poller(poll_target);
  std::thread sampler([&] {
    while (running.load()) {
      run.edge_memory.sample();
      run.cloud_memory.sample();
      sample_agent(run.agent, poller);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::vector<ClientResult> results(static_cast<size_t>(c.clients));
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < c.clients; ++i) {
      threads.emplace_back([&, i] { results[static_cast<size_t>(i)] = run_client(plan, i); });
    }
    for (std::thread& t : threads) t.join();
  }
  run.wall_s = ms_between(plan.start, Clock::now()) / 1000.0;
  running = false;
  sampler.join();
  run.edge_memory.sample();
  run.cloud_memory.sample();
  sample_agent(run.agent, poller);
  return results;
}

LoadTally tally(const std::vector<ClientResult>& results) {
  LoadTally t;
  std::vector<double> ttft, total, gaps;
  double stream_sum = 0, batch_sum = 0;
  int64_t streams = 0, batched = 0;
  for (const ClientResult& r : results) {
    for (const TurnResult& turn : r.turns) {
      ++t.sent;
      t.retries += turn.retries;
      if (turn.error_kind.empty()) {
        ++t.completed;
        t.tokens += turn.generated;
        total.push_back(turn.total_ms);
        if (turn.ttft_ms >= 0) ttft.push_back(turn.ttft_ms);
        gaps.insert(gaps.end(), turn.gaps_ms.begin(), turn.gaps_ms.end());
        if (turn.decode_batch_mean > 0) {
          batch_sum += turn.decode_batch_mean;
          ++batched;
        }
        if (turn.generated > 1 && turn.stream_ms > 0) {
          stream_sum += (turn.generated - 1) / (turn.stream_ms / 1000.0);
          ++streams;
        }
        ++t.places[prefill_place_name(turn.place)];
        t.fallbacks += turn.fell_back;
      } else {
        ++t.failed;
        auto& entry = t.errors[turn.error_kind];
        if (entry.first++ == 0) entry.second = turn.message;
      }
    }
    for (const SessionTrack& s : r.sessions) t.skipped += s.skipped_turns;
  }
  BATON_CHECK(t.completed + t.failed == t.sent, "every request is counted once");
  t.ttft = distribution(ttft);
  t.total = distribution(total);
  t.inter_token = distribution(std::move(gaps));
  t.stream_tokens_per_s = streams > 0 ? stream_sum / static_cast<double>(streams) : 0;
  t.decode_batch_mean = batched > 0 ? batch_sum / static_cast<double>(batched) : 0;
  return t;
}

// The check of one complete session against the agent's listing.
SessionCheck check_session(const SessionTrack& s, const v1::SessionInfo* info, bool token_prompts) {
  SessionCheck check;
  check.id = s.id;
  check.expected_tokens = s.expected_kv_tokens();
  if (info == nullptr) {
    check.problem = "not listed by the agent";
    return check;
  }
  check.listed_tokens = info->token_count();
  check.persisted = info->persisted();
  check.in_memory = info->kv_bytes() > 0;
  if (info->token_count() != check.expected_tokens) {
    check.problem = absl::StrFormat("holds %d tokens, the completed turns imply %d", info->token_count(),
                                    check.expected_tokens);
  } else if (token_prompts) {
    BATON_CHECK(s.tokens.size() >= check.expected_tokens, "tracked tokens cover the KV");
    const Digest256 digest =
        prefix_digest(std::span<const int32_t>(s.tokens.data(), static_cast<size_t>(check.expected_tokens)));
    if (info->prefix_digest() != std::string(reinterpret_cast<const char*>(digest.data()), digest.size())) {
      check.problem = "its prefix digest differs from the digest of the tokens sent and received";
    }
  }
  return check;
}

// Nothing lost: every completed session is listed with its KV tokens.
absl::Status check_sessions(EdgeClient& admin, const LoadPlan& plan, const std::vector<ClientResult>& results,
                            LoadRun& run) {
  v1::ListSessionsResponse listing;
  grpc::Status listed = admin.list_sessions(&listing);
  if (!listed.ok()) return absl::UnavailableError(admin.describe("ListSessions", listed));
  std::map<std::string, const v1::SessionInfo*> by_id;
  for (const v1::SessionInfo& s : listing.sessions()) by_id[s.session_id()] = &s;
  for (const ClientResult& r : results) {
    for (const SessionTrack& s : r.sessions) {
      const bool complete = s.turns_done == plan.config.turns;
      ++(complete ? run.sessions_complete : run.sessions_incomplete);
      if (!s.lost.empty()) {
        // Lost turns seen during the run count as lost, complete or not.
        SessionCheck check;
        check.id = s.id;
        check.expected_tokens = s.expected_kv_tokens();
        check.problem = s.lost;
        ++run.lost;
        run.checks.push_back(std::move(check));
        continue;
      }
      if (!complete) continue;
      auto it = by_id.find(s.id);
      SessionCheck check = check_session(s, it == by_id.end() ? nullptr : it->second, plan.token_prompts);
      if (!check.problem.empty()) ++run.lost;
      run.checks.push_back(std::move(check));
    }
  }
  return absl::OkStatus();
}

// The greedy identity check: every client's requests once more, one call at
// a time (fresh sessions), against each level's replies to the same requests.
IdentityCheck check_identity(LoadPlan plan, const std::vector<std::vector<ClientResult>>& levels) {
  IdentityCheck check;
  check.ran = true;
  int64_t most_clients = 0;
  for (const auto& results : levels) most_clients = std::max<int64_t>(most_clients, static_cast<int64_t>(results.size()));
  plan.config.session_prefix += "-one";
  plan.start = Clock::now();
  plan.stop_starting = Clock::time_point::max();
  for (int client = 0; client < most_clients; ++client) {
    const ClientResult alone = run_client(plan, client);
    for (size_t level = 0; level < levels.size(); ++level) {
      if (static_cast<size_t>(client) >= levels[level].size()) continue;
      const ClientResult& together = levels[level][static_cast<size_t>(client)];
      for (const TurnResult& a : alone.turns) {
        for (const TurnResult& b : together.turns) {
          if (a.session != b.session || a.turn != b.turn || !a.error_kind.empty() || !b.error_kind.empty()) continue;
          ++check.compared;
          if (a.generated_ids == b.generated_ids) continue;
          ++check.differing;
          if (check.first_difference.empty()) {
            check.first_difference = absl::StrFormat(
                "client %d session %d turn %d with %d clients: %d tokens, one at a time %d tokens", client, a.session,
                a.turn, static_cast<int64_t>(levels[level].size()), b.generated_ids.size(), a.generated_ids.size());
          }
        }
      }
    }
  }
  return check;
}

absl::Status bench_load_sweep(const LoadConfig& c, LoadPlan& plan, EdgeClient& admin) {
  LoadSweep sweep;
  std::vector<std::vector<ClientResult>> all_results;
  for (int64_t clients : c.client_counts) {
    LoadPlan level_plan = plan;
    level_plan.config.clients = clients;
    level_plan.config.session_prefix = absl::StrFormat("%s-n%d", c.session_prefix, clients);
    LoadRun run;
    std::vector<ClientResult> results = run_load(level_plan, run);
    run.tally = tally(results);
    BATON_RETURN_IF_ERROR(check_sessions(admin, level_plan, results, run));
    SweepLevel level;
    level.clients = clients;
    level.wall_s = run.wall_s;
    level.tally = run.tally;
    level.max_running = run.agent.max_running;
    level.lost = run.lost;
    sweep.levels.push_back(std::move(level));
    all_results.push_back(std::move(results));
  }
  if (c.temperature == 0) sweep.identity = check_identity(plan, all_results);
  sweep.edge = c.edge;
  sweep.policy = c.policy;
  sweep.prompts = absl::StrCat(absl::StrJoin(plan.lengths, ","), plan.token_prompts ? " tokens" : " words");
  sweep.sessions_per_client = c.sessions_per_client;
  sweep.turns = c.turns;
  sweep.max_tokens = c.max_tokens;
  sweep.temperature = c.temperature;
  sweep.seed = c.seed;
  if (c.json) {
    print_json_line(sweep_json(sweep));
  } else {
    print_sweep_table(sweep);
  }
  int64_t lost = 0;
  for (const SweepLevel& level : sweep.levels) lost += level.lost;
  if (lost > 0) {
    return exit_status(1, absl::StrFormat("baton bench load: %d sessions lost turns on the agent\n", lost));
  }
  if (sweep.identity.differing > 0) {
    return exit_status(1, absl::StrFormat("baton bench load: %d greedy turns differ from one at a time (%s)\n",
                                          sweep.identity.differing, sweep.identity.first_difference));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status bench_load(const Args& args) {
  LoadConfig c;
  BATON_ASSIGN_OR_RETURN(const bool run_it, parse_load_flags(args, c));
  if (!run_it) return absl::OkStatus();
  BATON_ASSIGN_OR_RETURN(LoadPlan plan, make_plan(c));
  LoadRun run;
  BATON_RETURN_IF_ERROR(start_watch(run.edge_memory, c.edge_pid, "edge"));
  BATON_RETURN_IF_ERROR(start_watch(run.cloud_memory, c.cloud_pid, "cloud"));
  EdgeClient admin(plan.target);
  BATON_ASSIGN_OR_RETURN(run.memory, check_agent(admin, plan));
  if (c.client_counts.size() > 1) return bench_load_sweep(c, plan, admin);
  const std::vector<ClientResult> results = run_load(plan, run);
  run.tally = tally(results);
  BATON_RETURN_IF_ERROR(check_sessions(admin, plan, results, run));

  run.edge = c.edge;
  run.policy = c.policy;
  run.prompts = absl::StrCat(absl::StrJoin(plan.lengths, ","), plan.token_prompts ? " tokens" : " words");
  run.clients = c.clients;
  run.sessions_per_client = c.sessions_per_client;
  run.turns = c.turns;
  run.max_tokens = c.max_tokens;
  run.seed = c.seed;
  if (c.json) {
    print_json_line(load_json(run));
  } else {
    print_load_table(run);
  }
  if (run.lost > 0) {
    return exit_status(1, absl::StrFormat("baton bench load: %d sessions lost turns on the agent (see the sessions "
                                          "above)\n",
                                          run.lost));
  }
  return absl::OkStatus();
}

}  // namespace baton::cli
