#include "edge_decode/http/openai_api.h"

#include <cmath>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/kv_stream/cache_salt.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/engine/sampler.h"  // kMaxTopLogprobs
#include "common/tokenizer/unicode.h"  // IsValidUtf8
#include "common/util/check.h"
#include "edge_decode/plan/split_policy.h"
#include "common/engine/sampling_proto.h"             // kMaxEarlyTokens
#include "common/engine/speculative.h"                // kMaxSpeculativeTokens
#include "edge_decode/generate/context_overflow.h"  // kMaxKeepTokens
#include "edge_decode/generate/stop_matcher.h"  // kMaxStopStrings, check_stop_strings

namespace baton {
namespace {

using Json = nlohmann::json;

// What a field held, short enough for an error message.
std::string shown(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

absl::Status field_error(std::string_view field, std::string_view expected, const Json& got) {
  return absl::InvalidArgumentError(
      absl::StrFormat("'%s' must be %s; got %s", std::string(field), std::string(expected), shown(got)));
}

// Optional fields: absent and null both mean "not given".
const Json* find_field(const Json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::optional<std::string>> get_string(const Json& object, const char* name,
                                                      const std::string& path = "") {
  const Json* value = find_field(object, name);
  if (value == nullptr) return std::optional<std::string>();
  if (!value->is_string()) return field_error(absl::StrCat(path, name), "a string", *value);
  return std::optional<std::string>(value->get<std::string>());
}

absl::StatusOr<std::optional<double>> get_number(const Json& object, const char* name, const std::string& path = "") {
  const Json* value = find_field(object, name);
  if (value == nullptr) return std::optional<double>();
  if (!value->is_number()) return field_error(absl::StrCat(path, name), "a number", *value);
  const double number = value->get<double>();
  if (!std::isfinite(number)) return field_error(absl::StrCat(path, name), "a finite number", *value);
  return std::optional<double>(number);
}

absl::StatusOr<std::optional<int64_t>> get_integer(const Json& object, const char* name, int64_t min, int64_t max,
                                                   const std::string& path = "") {
  const Json* value = find_field(object, name);
  if (value == nullptr) return std::optional<int64_t>();
  const std::string field = absl::StrCat(path, name);
  const std::string range = absl::StrFormat("an integer in [%d, %d]", min, max);
  if (value->is_number_unsigned()) {
    const uint64_t number = value->get<uint64_t>();
    if (number > static_cast<uint64_t>(max) || (min > 0 && number < static_cast<uint64_t>(min))) {
      return field_error(field, range, *value);
    }
    return std::optional<int64_t>(static_cast<int64_t>(number));
  }
  if (!value->is_number_integer()) return field_error(field, range, *value);
  const int64_t number = value->get<int64_t>();
  if (number < min || number > max) return field_error(field, range, *value);
  return std::optional<int64_t>(number);
}

absl::StatusOr<bool> get_bool(const Json& object, const char* name, const std::string& path = "") {
  const Json* value = find_field(object, name);
  if (value == nullptr) return false;
  if (!value->is_boolean()) return field_error(absl::StrCat(path, name), "true or false", *value);
  return value->get<bool>();
}

// Status payloads that carry an unsupported field's name to the HTTP error.
constexpr char kParamPayload[] = "baton.openai/param";
constexpr char kCodePayload[] = "baton.openai/code";

// A field that is present and asks for something: not null, not false, not
// an empty list, object or string.
bool asks_for_something(const Json* value) {
  if (value == nullptr) return false;
  if (value->is_boolean()) return value->get<bool>();
  if (value->is_array() || value->is_object() || value->is_string()) return !value->empty() && *value != "";
  return true;
}

// Fields Baton cannot honour are refused by name: a client that asked for
// tools or a JSON schema must not get a plain-text 200 it takes as an answer.
absl::Status check_unsupported_fields(const Json& body, OpenAiEndpoint endpoint) {
  for (const char* name : {"tools", "functions"}) {
    if (asks_for_something(find_field(body, name))) {
      return unsupported_field_error(name, "tool and function calling is not supported by this server");
    }
  }
  for (const char* name : {"tool_choice", "function_call"}) {
    const Json* value = find_field(body, name);
    if (value != nullptr && !(value->is_string() && (*value == "none" || *value == "auto"))) {
      return unsupported_field_error(name, "tool and function calling is not supported (only \"none\" or \"auto\")");
    }
  }
  if (const Json* format = find_field(body, "response_format"); format != nullptr) {
    const bool text = format->is_object() && format->contains("type") && format->at("type") == "text";
    if (!text) {
      return unsupported_field_error("response_format", "only {\"type\": \"text\"} is supported");
    }
  }
  if (asks_for_something(find_field(body, "logit_bias"))) {
    return unsupported_field_error("logit_bias", "token biases are not supported");
  }
  if (const Json* modalities = find_field(body, "modalities");
      modalities != nullptr && *modalities != Json::array({"text"})) {
    return unsupported_field_error("modalities", "only [\"text\"] is supported");
  }
  for (const char* name : {"audio", "prediction", "reasoning_effort", "web_search_options"}) {
    if (asks_for_something(find_field(body, name))) {
      return unsupported_field_error(name, "this server does not support it");
    }
  }
  if (const Json* n = find_field(body, "n"); n != nullptr && n->is_number() && n->get<double>() > 1) {
    return unsupported_field_error("n", "one choice per request (n = 1)");
  }
  if (endpoint == OpenAiEndpoint::kCompletions) {
    if (asks_for_something(find_field(body, "echo"))) {
      return unsupported_field_error("echo", "the prompt is not echoed");
    }
    if (asks_for_something(find_field(body, "suffix"))) {
      return unsupported_field_error("suffix", "insertion (fill in the middle) is not supported");
    }
    if (const Json* best_of = find_field(body, "best_of");
        best_of != nullptr && best_of->is_number() && best_of->get<double>() > 1) {
      return unsupported_field_error("best_of", "one candidate per request (best_of = 1)");
    }
  }
  return absl::OkStatus();
}

// frequency_penalty, presence_penalty and logprobs (chat: logprobs +
// top_logprobs; completions: logprobs N).
absl::Status parse_penalties_and_logprobs(const Json& body, OpenAiRequest& out) {
  for (const auto& [name, target] : {std::pair{"frequency_penalty", &out.frequency_penalty},
                                     std::pair{"presence_penalty", &out.presence_penalty}}) {
    BATON_ASSIGN_OR_RETURN(std::optional<double> value, get_number(body, name));
    if (!value.has_value()) continue;
    if (*value < -2.0 || *value > 2.0) return field_error(name, "a number in [-2, 2]", *find_field(body, name));
    *target = static_cast<float>(*value);
  }
  if (out.endpoint == OpenAiEndpoint::kCompletions) {
    BATON_ASSIGN_OR_RETURN(std::optional<int64_t> logprobs, get_integer(body, "logprobs", 0, kMaxTopLogprobs));
    if (logprobs.has_value()) out.logprobs = static_cast<uint32_t>(*logprobs);
    return absl::OkStatus();
  }
  BATON_ASSIGN_OR_RETURN(const bool logprobs, get_bool(body, "logprobs"));
  BATON_ASSIGN_OR_RETURN(std::optional<int64_t> top, get_integer(body, "top_logprobs", 0, kMaxTopLogprobs));
  if (top.has_value() && !logprobs) {
    return absl::InvalidArgumentError("'top_logprobs' needs 'logprobs': true");
  }
  if (logprobs) out.logprobs = static_cast<uint32_t>(top.value_or(0));
  return absl::OkStatus();
}

absl::Status parse_prompt(const Json& body, OpenAiRequest& out) {
  const Json* prompt = find_field(body, "prompt");
  if (prompt == nullptr) return absl::InvalidArgumentError("'prompt' is required");
  if (prompt->is_string()) {
    out.prompt = prompt->get<std::string>();
  } else if (prompt->is_array()) {
    const bool strings = !prompt->empty() && (*prompt)[0].is_string();
    const bool nested = !prompt->empty() && (*prompt)[0].is_array();
    if (strings || nested) {
      if (prompt->size() != 1) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "'prompt' has %d prompts; this server answers one prompt per request", prompt->size()));
      }
      if (strings) {
        out.prompt = (*prompt)[0].get<std::string>();
      } else {
        Json single = Json::object();
        single["prompt"] = (*prompt)[0];
        return parse_prompt(single, out);
      }
    } else {
      for (size_t i = 0; i < prompt->size(); ++i) {
        const Json& id = (*prompt)[i];
        if (!id.is_number_unsigned() || id.get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
          return field_error(absl::StrFormat("prompt[%d]", i), "a token id (an integer >= 0)", id);
        }
        out.prompt_tokens.push_back(static_cast<uint32_t>(id.get<uint64_t>()));
      }
    }
  } else {
    return field_error("prompt", "a string, a list of one string or a list of token ids", *prompt);
  }
  if (out.prompt.empty() && out.prompt_tokens.empty()) return absl::InvalidArgumentError("'prompt' is empty");
  return absl::OkStatus();
}

absl::Status parse_messages(const Json& body, OpenAiRequest& out) {
  const Json* messages = find_field(body, "messages");
  if (messages == nullptr) return absl::InvalidArgumentError("'messages' is required");
  if (!messages->is_array()) return field_error("messages", "a list of messages", *messages);
  if (messages->empty()) return absl::InvalidArgumentError("'messages' is empty");
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& message = (*messages)[i];
    const std::string path = absl::StrFormat("messages[%d].", i);
    if (!message.is_object()) {
      return field_error(absl::StrFormat("messages[%d]", i), "an object {role, content}", message);
    }
    BATON_ASSIGN_OR_RETURN(std::optional<std::string> role, get_string(message, "role", path));
    if (!role.has_value() || role->empty()) return absl::InvalidArgumentError(absl::StrCat("'", path, "role' is required"));
    ChatMessage parsed;
    parsed.role = *role == "developer" ? "system" : *role;
    const Json* content = find_field(message, "content");
    if (content == nullptr) {
      // An assistant turn that only called tools: no text.
    } else if (content->is_string()) {
      parsed.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t j = 0; j < content->size(); ++j) {
        const Json& part = (*content)[j];
        const std::string part_path = absl::StrFormat("%scontent[%d].", path, j);
        if (!part.is_object()) return field_error(part_path + "type", "an object {type, text}", part);
        BATON_ASSIGN_OR_RETURN(std::optional<std::string> type, get_string(part, "type", part_path));
        if (type.value_or("") != "text") {
          return absl::InvalidArgumentError(absl::StrFormat(
              "'%stype' is '%s'; only \"text\" parts are supported", part_path, type.value_or("")));
        }
        BATON_ASSIGN_OR_RETURN(std::optional<std::string> text, get_string(part, "text", part_path));
        parsed.content += text.value_or("");
      }
    } else {
      return field_error(path + "content", "a string or a list of text parts", *content);
    }
    out.messages.push_back(std::move(parsed));
  }
  return absl::OkStatus();
}

absl::Status parse_stop(const Json& body, OpenAiRequest& out) {
  const Json* stop = find_field(body, "stop");
  if (stop == nullptr) return absl::OkStatus();
  if (stop->is_string()) {
    if (!stop->get<std::string>().empty()) out.stop.push_back(stop->get<std::string>());
    return check_stop_strings(out.stop, "stop");
  }
  if (!stop->is_array()) return field_error("stop", "a string or a list of strings", *stop);
  if (stop->size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'stop' has %d strings; at most %d", stop->size(), kMaxStopStrings));
  }
  for (size_t i = 0; i < stop->size(); ++i) {
    if (!(*stop)[i].is_string()) return field_error(absl::StrFormat("stop[%d]", i), "a string", (*stop)[i]);
    if (!(*stop)[i].get<std::string>().empty()) out.stop.push_back((*stop)[i].get<std::string>());
  }
  return check_stop_strings(out.stop, "stop");
}

absl::Status parse_baton_options(const Json& body, OpenAiRequest& out) {
  const Json* baton = find_field(body, "baton");
  if (baton == nullptr) return absl::OkStatus();
  if (!baton->is_object()) return field_error("baton", "an object", *baton);
  const std::string kPath = "baton.";
  BATON_ASSIGN_OR_RETURN(std::optional<std::string> policy, get_string(*baton, "policy", kPath));
  if (policy.has_value()) {
    if (*policy == "auto" || policy->empty()) {
      out.policy = v1::SPLIT_POLICY_AUTO;
    } else if (*policy == "local") {
      out.policy = v1::SPLIT_POLICY_LOCAL;
    } else if (*policy == "cloud") {
      out.policy = v1::SPLIT_POLICY_CLOUD;
    } else {
      return absl::InvalidArgumentError(
          absl::StrFormat("'baton.policy' is '%s'; one of auto, local, cloud", *policy));
    }
  }
  BATON_ASSIGN_OR_RETURN(std::optional<std::string> pack, get_string(*baton, "pack", kPath));
  out.pack_id = pack.value_or("");
  BATON_ASSIGN_OR_RETURN(std::optional<std::string> session, get_string(*baton, "session", kPath));
  out.session_id = session.value_or("");
  BATON_ASSIGN_OR_RETURN(std::optional<std::string> codec, get_string(*baton, "codec", kPath));
  out.codec = codec.value_or("");
  BATON_ASSIGN_OR_RETURN(std::optional<int64_t> top_k,
                         get_integer(*baton, "top_k", 0, std::numeric_limits<int32_t>::max(), kPath));
  if (top_k.has_value()) out.top_k = static_cast<uint32_t>(*top_k);
  BATON_ASSIGN_OR_RETURN(std::optional<double> min_p, get_number(*baton, "min_p", kPath));
  if (min_p.has_value()) out.min_p = static_cast<float>(*min_p);
  BATON_ASSIGN_OR_RETURN(std::optional<double> penalty, get_number(*baton, "repetition_penalty", kPath));
  if (penalty.has_value()) out.repetition_penalty = static_cast<float>(*penalty);
  BATON_ASSIGN_OR_RETURN(std::optional<std::string> overflow, get_string(*baton, "context_overflow", kPath));
  if (overflow.has_value()) {
    if (*overflow == "refuse") {
      out.context_overflow = v1::CONTEXT_OVERFLOW_REFUSE;
    } else if (*overflow == "truncate") {
      out.context_overflow = v1::CONTEXT_OVERFLOW_TRUNCATE;
    } else if (*overflow == "shift") {
      out.context_overflow = v1::CONTEXT_OVERFLOW_SHIFT;
    } else if (!overflow->empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("'baton.context_overflow' is '%s'; one of refuse, truncate, shift", *overflow));
    }
  }
  BATON_ASSIGN_OR_RETURN(std::optional<int64_t> keep, get_integer(*baton, "keep_tokens", 0, kMaxKeepTokens, kPath));
  if (keep.has_value()) out.keep_tokens = static_cast<uint32_t>(*keep);
  BATON_ASSIGN_OR_RETURN(std::optional<int64_t> early, get_integer(*baton, "early_tokens", 0, kMaxEarlyTokens, kPath));
  if (early.has_value()) out.early_tokens = static_cast<uint32_t>(*early);
  BATON_ASSIGN_OR_RETURN(std::optional<int64_t> speculative,
                         get_integer(*baton, "speculative", 0, kMaxSpeculativeTokens, kPath));
  if (speculative.has_value()) out.speculative = static_cast<uint32_t>(*speculative);
  return absl::OkStatus();
}

absl::StatusOr<v1::CodecParams> codec_params_from_name(const std::string& name) {
  v1::CodecParams params;
  // The bare bit widths leave the rest to the agent's defaults for its model.
  if (name == "f16") {
    params.set_codec(v1::KV_CODEC_F16);
  } else if (name == "int8") {
    params.set_codec(v1::KV_CODEC_INT8);
  } else if (name == "int4") {
    params.set_codec(v1::KV_CODEC_INT4);
  } else if (name == "auto") {
    params.set_codec(v1::KV_CODEC_AUTO);  // the agent picks per request (--codec auto)
  } else {
    absl::StatusOr<KvCodecConfig> config = parse_kv_codec_config(name);
    if (!config.ok()) return absl::InvalidArgumentError(absl::StrCat("'baton.codec': ", config.status().message()));
    absl::StatusOr<v1::CodecParams> full = kv_codec_request_params(*config);  // tc: the agent binds it
    if (!full.ok()) return absl::InvalidArgumentError(absl::StrCat("'baton.codec': ", full.status().message()));
    params = *full;
  }
  return params;
}

Json usage_json(const v1::Stats& stats) {
  return Json{{"prompt_tokens", stats.prompt_tokens()},
              {"completion_tokens", stats.generated_tokens()},
              {"total_tokens", uint64_t{stats.prompt_tokens()} + stats.generated_tokens()}};
}

// Baton's own figures of one answer (clients ignore unknown fields).
Json baton_json(const v1::Stats& stats) {
  Json out{{"ttft_ms", stats.ttft_ms()},
           {"total_ms", stats.total_ms()},
           {"decode_tokens_per_s", stats.decode_tokens_per_s()},
           {"prefill", prefill_place_name(stats.plan().place())},
           {"plan_reason", stats.plan().reason()},
           {"reused_tokens", stats.plan().reused_tokens()},
           {"cloud_reused_tokens", stats.cloud_reused_tokens()},
           {"context_tokens", stats.context_tokens()},
           {"cloud_prefill_ms", stats.cloud_prefill_ms()},
           {"transfer_ms", stats.transfer_ms()},
           {"ingest_ms", stats.ingest_ms()},
           {"local_ms", stats.local_ms()},
           {"kv_raw_bytes", stats.kv_raw_bytes()},
           {"kv_quantized_bytes", stats.kv_quantized_bytes()},
           {"kv_wire_bytes", stats.kv_wire_bytes()}};
  if (!stats.fallback_reason().empty()) out["fallback_reason"] = stats.fallback_reason();
  if (!stats.session_id().empty()) out["session"] = stats.session_id();
  if (!stats.save_error().empty()) out["save_error"] = stats.save_error();
  if (stats.early_tokens() > 0) {
    out["early_tokens"] = stats.early_tokens();
    out["cloud_first_token_ms"] = stats.cloud_first_token_ms();
  }
  if (stats.local_first_token_ms() > 0) out["local_first_token_ms"] = stats.local_first_token_ms();
  if (!stats.early_tokens_note().empty()) out["early_tokens_note"] = stats.early_tokens_note();
  if (stats.speculative_drafted() > 0) {
    out["speculative_drafted"] = stats.speculative_drafted();
    out["speculative_accepted"] = stats.speculative_accepted();
  }
  if (!stats.context_overflow().empty()) {
    out["context_overflow"] = stats.context_overflow();
    out["dropped_turns"] = stats.dropped_turns();
    out["dropped_tokens"] = stats.dropped_tokens();
  }
  return out;
}

std::string dump(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

const char* object_name(OpenAiEndpoint endpoint, bool chunk) {
  if (endpoint == OpenAiEndpoint::kCompletions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

Json answer_head(const OpenAiAnswerInfo& info, bool chunk) {
  return Json{{"id", info.id}, {"object", object_name(info.endpoint, chunk)}, {"created", info.created},
              {"model", info.model}};
}

std::string piece_of(const OpenAiLogprobs& logprobs, uint32_t id) {
  return logprobs.piece ? logprobs.piece(id) : absl::StrCat("<token ", id, ">");
}

// A token as text: its bytes when they are valid UTF-8, else "bytes:\\xNN..."
// as OpenAI writes a cut character (distinct tokens stay distinct keys).
std::string token_text(std::string_view piece) {
  if (IsValidUtf8(piece)) return std::string(piece);
  std::string out = "bytes:";
  for (const char c : piece) out += absl::StrFormat("\\x%02x", static_cast<unsigned char>(c));
  return out;
}

Json bytes_json(std::string_view piece) {
  Json out = Json::array();
  for (const char c : piece) out.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return out;
}

// Chat: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}], "refusal": null}.
Json chat_logprobs_json(const OpenAiLogprobs& logprobs) {
  Json content = Json::array();
  for (const v1::TokenLogprob& token : logprobs.tokens) {
    Json top = Json::array();
    for (const v1::TopLogprob& alternative : token.top()) {
      const std::string piece = piece_of(logprobs, alternative.token_id());
      top.push_back(
          Json{{"token", token_text(piece)}, {"logprob", alternative.logprob()}, {"bytes", bytes_json(piece)}});
    }
    const std::string piece = piece_of(logprobs, token.token_id());
    content.push_back(Json{{"token", token_text(piece)},
                           {"logprob", token.logprob()},
                           {"bytes", bytes_json(piece)},
                           {"top_logprobs", top}});
  }
  return Json{{"content", content}, {"refusal", nullptr}};
}

// Completions: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}.
Json completion_logprobs_json(const OpenAiLogprobs& logprobs) {
  Json tokens = Json::array();
  Json token_logprobs = Json::array();
  Json top_logprobs = Json::array();
  Json text_offset = Json::array();
  size_t offset = logprobs.text_offset;
  for (const v1::TokenLogprob& token : logprobs.tokens) {
    const std::string piece = piece_of(logprobs, token.token_id());
    tokens.push_back(token_text(piece));
    token_logprobs.push_back(token.logprob());
    Json top = Json::object();
    for (const v1::TopLogprob& alternative : token.top()) {
      const std::string alternative_piece = token_text(piece_of(logprobs, alternative.token_id()));
      if (!top.contains(alternative_piece)) top[alternative_piece] = alternative.logprob();
    }
    top_logprobs.push_back(top);
    text_offset.push_back(offset);
    offset += piece.size();
  }
  return Json{{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs},
              {"text_offset", text_offset}};
}

Json logprobs_json(OpenAiEndpoint endpoint, const OpenAiLogprobs* logprobs) {
  if (logprobs == nullptr) return nullptr;
  return endpoint == OpenAiEndpoint::kCompletions ? completion_logprobs_json(*logprobs)
                                                  : chat_logprobs_json(*logprobs);
}

}  // namespace

absl::Status unsupported_field_error(std::string_view field, std::string_view why) {
  absl::Status status = absl::InvalidArgumentError(absl::StrFormat("'%s' is not supported: %s", field, why));
  status.SetPayload(kParamPayload, absl::Cord(std::string(field)));
  status.SetPayload(kCodePayload, absl::Cord("unsupported_parameter"));
  return status;
}

absl::StatusOr<OpenAiRequest> parse_openai_request(OpenAiEndpoint endpoint, std::string_view body_text) {
  Json body = Json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return absl::InvalidArgumentError("the request body is not valid JSON");
  if (!body.is_object()) return absl::InvalidArgumentError("the request body must be a JSON object");
  OpenAiRequest out;
  out.endpoint = endpoint;
  BATON_ASSIGN_OR_RETURN(std::optional<std::string> model, get_string(body, "model"));
  out.model = model.value_or("");
  if (endpoint == OpenAiEndpoint::kCompletions) {
    BATON_RETURN_IF_ERROR(parse_prompt(body, out));
  } else {
    BATON_RETURN_IF_ERROR(parse_messages(body, out));
  }
  constexpr int64_t kMaxTokensLimit = std::numeric_limits<int32_t>::max();
  BATON_ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens, get_integer(body, "max_tokens", 1, kMaxTokensLimit));
  if (!max_tokens.has_value()) {
    BATON_ASSIGN_OR_RETURN(max_tokens, get_integer(body, "max_completion_tokens", 1, kMaxTokensLimit));
  }
  out.max_tokens = static_cast<uint32_t>(max_tokens.value_or(0));
  BATON_ASSIGN_OR_RETURN(std::optional<double> temperature, get_number(body, "temperature"));
  if (temperature.has_value()) out.temperature = static_cast<float>(*temperature);
  BATON_ASSIGN_OR_RETURN(std::optional<double> top_p, get_number(body, "top_p"));
  if (top_p.has_value()) out.top_p = static_cast<float>(*top_p);
  if (const Json* seed = find_field(body, "seed"); seed != nullptr) {
    // Any 64-bit integer; -1 is "random" to llama.cpp clients, other negative
    // seeds are their two's complement bits.
    if (seed->is_number_unsigned()) {
      out.seed = seed->get<uint64_t>();
    } else if (seed->is_number_integer()) {
      if (seed->get<int64_t>() != -1) out.seed = static_cast<uint64_t>(seed->get<int64_t>());
    } else {
      return field_error("seed", "an integer", *seed);
    }
  }
  BATON_RETURN_IF_ERROR(check_unsupported_fields(body, endpoint));
  BATON_ASSIGN_OR_RETURN(std::optional<int64_t> n, get_integer(body, "n", 1, 1));
  (void)n;
  BATON_RETURN_IF_ERROR(parse_penalties_and_logprobs(body, out));
  BATON_RETURN_IF_ERROR(parse_stop(body, out));
  BATON_ASSIGN_OR_RETURN(out.stream, get_bool(body, "stream"));
  if (const Json* options = find_field(body, "stream_options"); options != nullptr) {
    if (!options->is_object()) return field_error("stream_options", "an object", *options);
    BATON_ASSIGN_OR_RETURN(out.include_usage, get_bool(*options, "include_usage", "stream_options."));
  }
  BATON_ASSIGN_OR_RETURN(std::optional<std::string> cache_salt, get_string(body, "cache_salt"));
  if (cache_salt.has_value() && cache_salt->size() > kMaxCacheSaltBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("'cache_salt' has %d bytes; at most %d are allowed",
                                                      cache_salt->size(), kMaxCacheSaltBytes));
  }
  out.cache_salt = cache_salt.value_or("");
  BATON_RETURN_IF_ERROR(parse_baton_options(body, out));
  return out;
}

absl::StatusOr<v1::GenerateRequest> to_generate_request(const OpenAiRequest& request) {
  v1::GenerateRequest out;
  if (request.endpoint == OpenAiEndpoint::kCompletions) {
    if (!request.prompt_tokens.empty()) {
      for (const uint32_t id : request.prompt_tokens) out.mutable_tokens()->add_ids(id);
    } else {
      out.set_text(request.prompt);
    }
  }
  out.set_session_id(request.session_id);
  out.set_pack_id(request.pack_id);
  out.set_cache_salt(request.cache_salt);
  v1::SamplingParams* sampling = out.mutable_sampling();
  if (request.temperature.has_value()) sampling->set_temperature(*request.temperature);
  if (request.top_p.has_value()) sampling->set_top_p(*request.top_p);
  if (request.seed.has_value()) sampling->set_seed(*request.seed);
  if (request.top_k.has_value()) sampling->set_top_k(*request.top_k);
  if (request.min_p.has_value()) sampling->set_min_p(*request.min_p);
  if (request.repetition_penalty.has_value()) sampling->set_repetition_penalty(*request.repetition_penalty);
  sampling->set_frequency_penalty(request.frequency_penalty);
  sampling->set_presence_penalty(request.presence_penalty);
  if (request.logprobs.has_value()) out.set_logprobs(*request.logprobs);
  out.set_policy(request.policy);
  out.set_context_overflow(request.context_overflow);
  if (request.keep_tokens.has_value()) out.set_keep_tokens(*request.keep_tokens);
  if (request.early_tokens.has_value()) out.set_early_tokens(*request.early_tokens);
  if (request.speculative.has_value()) out.set_speculative(*request.speculative);
  out.set_max_tokens(request.max_tokens);
  for (const std::string& stop : request.stop) out.add_stop(stop);
  if (!request.codec.empty()) {
    BATON_ASSIGN_OR_RETURN(*out.mutable_codec(), codec_params_from_name(request.codec));
  }
  return out;
}

std::vector<ChatMessage> new_chat_messages(const std::vector<ChatMessage>& messages, bool session_exists) {
  if (!session_exists) return messages;
  size_t first_new = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role == "assistant") first_new = i + 1;
  }
  return std::vector<ChatMessage>(messages.begin() + static_cast<std::ptrdiff_t>(first_new), messages.end());
}

const char* openai_finish_reason(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_LENGTH:
    case v1::FINISH_REASON_CONTEXT_FULL: return "length";
    default: return "stop";
  }
}

std::string new_openai_id(OpenAiEndpoint endpoint) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrFormat("%s%016x%08x", endpoint == OpenAiEndpoint::kCompletions ? "cmpl-" : "chatcmpl-", rng(),
                         static_cast<uint32_t>(rng()));
}

std::string openai_answer_json(const OpenAiAnswerInfo& info, std::string_view text, const v1::Stats& stats,
                               const OpenAiLogprobs* logprobs) {
  Json out = answer_head(info, false);
  Json choice{{"index", 0},
              {"logprobs", logprobs_json(info.endpoint, logprobs)},
              {"finish_reason", openai_finish_reason(stats.finish_reason())}};
  if (info.endpoint == OpenAiEndpoint::kCompletions) {
    choice["text"] = std::string(text);
  } else {
    choice["message"] = Json{{"role", "assistant"}, {"content", std::string(text)}};
  }
  out["choices"] = Json::array({choice});
  out["usage"] = usage_json(stats);
  out["baton"] = baton_json(stats);
  return dump(out);
}

std::string openai_chunk_json(const OpenAiAnswerInfo& info, std::string_view text,
                              std::optional<v1::FinishReason> finish_reason, bool role,
                              const OpenAiLogprobs* logprobs) {
  Json out = answer_head(info, true);
  Json choice{{"index", 0}, {"logprobs", logprobs_json(info.endpoint, logprobs)}};
  choice["finish_reason"] = finish_reason.has_value() ? Json(openai_finish_reason(*finish_reason)) : Json(nullptr);
  if (info.endpoint == OpenAiEndpoint::kCompletions) {
    choice["text"] = std::string(text);
  } else {
    Json delta = Json::object();
    if (role) delta["role"] = "assistant";
    if (!finish_reason.has_value()) delta["content"] = std::string(text);
    choice["delta"] = delta;
  }
  out["choices"] = Json::array({choice});
  return dump(out);
}

std::string openai_final_chunk_json(const OpenAiAnswerInfo& info, const v1::Stats& stats) {
  Json out = Json::parse(openai_chunk_json(info, "", stats.finish_reason()));
  out["baton"] = baton_json(stats);
  return dump(out);
}

std::string openai_usage_chunk_json(const OpenAiAnswerInfo& info, const v1::Stats& stats) {
  Json out = answer_head(info, true);
  out["choices"] = Json::array();
  out["usage"] = usage_json(stats);
  out["baton"] = baton_json(stats);
  return dump(out);
}

std::string sse_event(std::string_view json) {
  std::string out = "data: ";
  out.append(json);
  out += "\n\n";
  return out;
}

std::string openai_model_json(std::string_view model, int64_t created) {
  return dump(Json{{"id", std::string(model)}, {"object", "model"}, {"created", created}, {"owned_by", "baton"}});
}

std::string openai_models_json(std::string_view model, int64_t created, const std::vector<std::string>& aliases) {
  Json out{{"object", "list"}};
  out["data"] = Json::array({Json::parse(openai_model_json(model, created))});
  for (const std::string& alias : aliases) out["data"].push_back(Json::parse(openai_model_json(alias, created)));
  return dump(out);
}

std::string openai_error_json(std::string_view message, std::string_view type, std::string_view code,
                              std::string_view param) {
  Json error{{"message", std::string(message)}, {"type", std::string(type)}};
  error["param"] = param.empty() ? Json(nullptr) : Json(std::string(param));
  error["code"] = code.empty() ? Json(nullptr) : Json(std::string(code));
  return dump(Json{{"error", error}});
}

HttpError http_error_from_status(const absl::Status& status, uint32_t retry_after_ms) {
  BATON_CHECK(!status.ok(), "an error answer needs an error status");
  HttpError out;
  const char* type = "server_error";
  const char* code = "";
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      out.http_status = 400;
      type = "invalid_request_error";
      break;
    case absl::StatusCode::kUnauthenticated:
      out.http_status = 401;
      type = "invalid_request_error";  // what OpenAI answers for a bad key
      code = "invalid_api_key";
      break;
    case absl::StatusCode::kPermissionDenied:
      out.http_status = 403;
      type = "permission_error";
      break;
    case absl::StatusCode::kNotFound:
      out.http_status = 404;
      type = "not_found_error";
      break;
    case absl::StatusCode::kResourceExhausted:
      // The agent attaches a retry hint to transient refusals (queue full);
      // a prompt that does not fit the device names its tokens and has none.
      if (retry_after_ms == 0 && absl::StrContains(status.message(), "token")) {
        out.http_status = 413;
        type = "invalid_request_error";
        code = "context_length_exceeded";
      } else {
        out.http_status = 429;
        type = "rate_limit_error";
      }
      break;
    case absl::StatusCode::kUnavailable:
      out.http_status = 503;
      type = "service_unavailable";
      break;
    default:
      out.http_status = 500;
      break;
  }
  if ((out.http_status == 429 || out.http_status == 503) && retry_after_ms > 0) {
    out.retry_after_s = static_cast<int>((uint64_t{retry_after_ms} + 999) / 1000);
  }
  std::string param;
  std::string unsupported_code;
  if (auto payload = status.GetPayload(kParamPayload); payload.has_value()) {
    param = std::string(*payload);
  }
  if (auto payload = status.GetPayload(kCodePayload); payload.has_value()) {
    unsupported_code = std::string(*payload);
    code = unsupported_code.c_str();
  }
  out.body = openai_error_json(std::string(status.message()), type, code, param);
  return out;
}

}  // namespace baton
