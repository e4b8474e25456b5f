#include "edge_decode/generate/context_overflow.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/cpu/ops.h"
#include "common/kv_codec/kv_codec.h"
#include "common/model/layer_window.h"
#include "common/util/check.h"

namespace baton {
namespace {

// "turn 3" or "turns 1-12".
std::string turn_range(uint32_t first, uint32_t last) {
  if (first == last) return absl::StrCat("turn ", first);
  return absl::StrCat("turns ", first, "-", last);
}

std::string describe(const TruncationInputs& in, int64_t kept_prefix, const TruncationPlan& plan,
                     uint32_t first_dropped, uint32_t last_dropped) {
  // "turns 1-12 (1530 tokens)", or "40 tokens" when they were in no turn.
  const std::string dropped =
      plan.dropped_turns > 0
          ? absl::StrFormat("%s (%d tokens)", turn_range(first_dropped, last_dropped), plan.dropped_tokens)
          : absl::StrFormat("%d tokens", plan.dropped_tokens);
  std::vector<std::string> kept;
  if (kept_prefix > 0) {
    kept.push_back(in.prefix_is_pack ? absl::StrFormat("the pack (%d tokens)", kept_prefix)
                                     : absl::StrFormat("the first %d tokens", kept_prefix));
  }
  if (!plan.kept_turns.empty()) kept.push_back(turn_range(plan.kept_turns.front().number, plan.kept_turns.back().number));
  return absl::StrFormat("context overflow: dropped %s, kept %s", dropped,
                         kept.empty() ? std::string("no earlier token") : absl::StrJoin(kept, " and "));
}

}  // namespace

absl::StatusOr<ContextOverflowMode> parse_context_overflow(const std::string& name) {
  if (name == "refuse") return ContextOverflowMode::kRefuse;
  if (name == "truncate") return ContextOverflowMode::kTruncate;
  if (name == "shift") return ContextOverflowMode::kShift;
  return absl::InvalidArgumentError(
      absl::StrCat("context overflow '", name, "' is not one of refuse, truncate, shift"));
}

const char* context_overflow_name(ContextOverflowMode mode) {
  switch (mode) {
    case ContextOverflowMode::kRefuse:
      return "refuse";
    case ContextOverflowMode::kTruncate:
      return "truncate";
    case ContextOverflowMode::kShift:
      return "shift";
  }
  return "unknown";
}

absl::StatusOr<ContextOverflowMode> context_overflow_from_proto(v1::ContextOverflow value,
                                                                ContextOverflowMode fallback) {
  switch (value) {
    case v1::CONTEXT_OVERFLOW_UNSPECIFIED:
      return fallback;
    case v1::CONTEXT_OVERFLOW_REFUSE:
      return ContextOverflowMode::kRefuse;
    case v1::CONTEXT_OVERFLOW_TRUNCATE:
      return ContextOverflowMode::kTruncate;
    case v1::CONTEXT_OVERFLOW_SHIFT:
      return ContextOverflowMode::kShift;
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "context_overflow = %d is not one of REFUSE (1), TRUNCATE (2), SHIFT (3)", static_cast<int>(value)));
  }
}

v1::ContextOverflow context_overflow_to_proto(ContextOverflowMode mode) {
  switch (mode) {
    case ContextOverflowMode::kRefuse:
      return v1::CONTEXT_OVERFLOW_REFUSE;
    case ContextOverflowMode::kTruncate:
      return v1::CONTEXT_OVERFLOW_TRUNCATE;
    case ContextOverflowMode::kShift:
      return v1::CONTEXT_OVERFLOW_SHIFT;
  }
  return v1::CONTEXT_OVERFLOW_UNSPECIFIED;
}

TruncationPlan plan_truncation(const TruncationInputs& in) {
  TruncationPlan plan;
  const int64_t held = in.held_tokens;
  const int64_t prefix = std::clamp<int64_t>(in.kept_prefix, 0, held);
  const int64_t rest = in.prompt_tokens + in.reply_tokens;
  if (held + rest <= in.limit_tokens || prefix >= held) return plan;
  // The oldest turn start (past the prefix) whose tail fits; else nothing of
  // the earlier turns stays.
  int64_t tail = held;
  for (const SessionTurn& turn : in.turns) {
    const int64_t first = turn.first_token;
    if (first <= prefix || first >= held) continue;
    if (prefix + (held - first) + rest <= in.limit_tokens) {
      tail = first;
      break;
    }
  }
  plan.needed = true;
  plan.tail_begin = tail;
  plan.dropped_tokens = tail - prefix;
  uint32_t first_dropped = 0;
  uint32_t last_dropped = 0;
  for (size_t i = 0; i < in.turns.size(); ++i) {
    const int64_t first = in.turns[i].first_token;
    const int64_t end = i + 1 < in.turns.size() ? static_cast<int64_t>(in.turns[i + 1].first_token) : held;
    if (first >= tail) {
      plan.kept_turns.push_back({in.turns[i].number, static_cast<uint32_t>(first - tail + prefix)});
    } else if (end > prefix) {
      if (plan.dropped_turns == 0) first_dropped = in.turns[i].number;
      last_dropped = in.turns[i].number;
      ++plan.dropped_turns;
    }
    // else: wholly inside the kept prefix, which it now is a part of.
  }
  plan.description = describe(in, prefix, plan, first_dropped, last_dropped);
  return plan;
}

absl::StatusOr<int64_t> copy_kv_prefix(const QuantizedKvCache& from, int64_t n, QuantizedKvCache& to) {
  n = std::min(n, from.size());
  if (n <= 0) return 0;
  const KvGeometry& geometry = from.geometry();
  for (int layer = 0; layer < geometry.n_layer; ++layer) {
    const int64_t first = window_first_kept_position(geometry.window(layer), n);
    const auto [held_first, held_end] = from.held_positions(layer);
    if (first < held_first || n > held_end) return 0;  // a window already slid past n
  }
  for (int layer = 0; layer < geometry.n_layer; ++layer) {
    const int64_t first = window_first_kept_position(geometry.window(layer), n);
    for (const bool is_key : {true, false}) {
      BATON_ASSIGN_OR_RETURN(QuantizedKvBlock block, from.export_block(layer, is_key, first, n - first));
      BATON_RETURN_IF_ERROR(to.ingest_block(layer, is_key, first, block));
    }
  }
  to.set_size(n);
  if (!to.holds_window_for(n)) {
    to.set_size(0);
    return 0;
  }
  return n;
}

absl::StatusOr<int64_t> shift_kv_tail(const QuantizedKvCache& from, int64_t tail_begin, int64_t end,
                                      const KvRope& rope, QuantizedKvCache& to) {
  const KvGeometry& geometry = from.geometry();
  const int64_t first = to.size();
  end = std::min(end, from.size());
  const int64_t count = end - tail_begin;
  if (count <= 0) return first;
  for (int layer = 0; layer < geometry.n_layer; ++layer) {
    if (geometry.window(layer) > 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "context shift: layer %d has a sliding window of %d tokens (its cells past the window are gone)", layer,
          geometry.window(layer)));
    }
  }
  if (first + count > to.capacity()) {
    return absl::InvalidArgumentError(absl::StrFormat("context shift: %d + %d positions in a store of %d", first,
                                                      count, to.capacity()));
  }
  if (!(from.config() == to.config())) {
    return absl::InvalidArgumentError(absl::StrFormat("context shift from %s into %s", from.config().to_string(),
                                                      to.config().to_string()));
  }
  const int64_t delta = first - tail_begin;  // < 0: the cells move down
  const size_t elements = static_cast<size_t>(count * geometry.kv_dim());
  std::vector<float> k(elements);  // f32 [count, n_head_kv, head_dim], post-RoPE at the old positions
  std::vector<float> v(elements);
  for (int layer = 0; layer < geometry.n_layer; ++layer) {
    BATON_ASSIGN_OR_RETURN(QuantizedKvBlock k_block, from.export_block(layer, /*is_key=*/true, tail_begin, count));
    BATON_ASSIGN_OR_RETURN(QuantizedKvBlock v_block, from.export_block(layer, /*is_key=*/false, tail_begin, count));
    // Through the codec's own decoder: dequantized and Hadamard rotated back.
    BATON_ASSIGN_OR_RETURN(EncodedKvBlock k_encoded,
                           encode_quantized_kv_block(from.config(), geometry, /*is_key=*/true, k_block));
    BATON_RETURN_IF_ERROR(decode_kv_block(from.config(), geometry, /*is_key=*/true, k_encoded.payload,
                                          k_encoded.raw_size, count, k.data()));
    BATON_ASSIGN_OR_RETURN(EncodedKvBlock v_encoded,
                           encode_quantized_kv_block(from.config(), geometry, /*is_key=*/false, v_block));
    BATON_RETURN_IF_ERROR(decode_kv_block(from.config(), geometry, /*is_key=*/false, v_encoded.payload,
                                          v_encoded.raw_size, count, v.data()));
    // R(p + delta) = R(delta) R(p) pair by pair: every row turns by delta.
    for (int64_t row = 0; row < count; ++row) {
      rope_rows(k.data() + row * geometry.kv_dim(), 1, geometry.n_head_kv, geometry.head_dim, rope.n_rot,
                rope.neox, delta, rope.inv_freq.data());
    }
    BATON_RETURN_IF_ERROR(to.store(layer, first, count, k.data(), v.data()));
    // The values did not change: their codes go in exactly as they were.
    BATON_RETURN_IF_ERROR(to.ingest_block(layer, /*is_key=*/false, first, v_block));
  }
  to.set_size(first + count);
  return first + count;
}

}  // namespace baton
