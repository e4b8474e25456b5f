#include "common/kv_codec/kv_codec_config.h"

#include <algorithm>
#include <zstd.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace baton {
namespace {

constexpr int kMaxGroupSize = 1024;

bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

// Parses the decimal digits after a prefix ("g32" -> 32); false on junk.
bool parse_suffix_int(const std::string& token, size_t prefix_len, int* value) {
  const std::string digits = token.substr(prefix_len);
  if (digits.empty() || digits.size() > 7) return false;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
  }
  return absl::SimpleAtoi(digits, value);
}

}  // namespace

const char* kv_bits_name(KvCodecConfig::Bits bits) {
  switch (bits) {
    case KvCodecConfig::Bits::kF16:
      return "f16";
    case KvCodecConfig::Bits::kInt8:
      return "int8";
    case KvCodecConfig::Bits::kInt4:
      return "int4";
  }
  return "?";
}

bool KvTransformParams::bound() const {
  for (uint8_t b : calibration) {
    if (b != 0) return true;
  }
  return false;
}

KvCodecConfig transform_kv_codec_config(const KvTransformParams& params, int zstd_level) {
  KvCodecConfig config;
  config.bits = KvCodecConfig::Bits::kInt8;
  config.pre_rope_keys = true;
  config.zstd_level = zstd_level;
  config.transform = params;
  return config;
}

namespace {

std::string transform_name(const KvCodecConfig& c) {
  const KvTransformParams& t = *c.transform;
  std::string name = t.budget_tenths % 10 == 0 ? absl::StrFormat("tc-b%d", t.budget_tenths / 10)
                                               : absl::StrFormat("tc-b%d.%d", t.budget_tenths / 10, t.budget_tenths % 10);
  if (t.sink_tokens != KvTransformParams::kDefaultSinkTokens) absl::StrAppend(&name, "-s", t.sink_tokens);
  if (t.recent_tokens != KvTransformParams::kDefaultRecentTokens) absl::StrAppend(&name, "-w", t.recent_tokens);
  if (c.zstd_level > 0) absl::StrAppend(&name, "-z", c.zstd_level);
  if (c.zstd_level < 0) absl::StrAppend(&name, "-zf", -c.zstd_level);
  return name;
}

// The transform codec's own checks.
absl::Status validate_transform(const KvCodecConfig& c) {
  const KvTransformParams& t = *c.transform;
  const std::string name = transform_name(c);
  if (t.budget_tenths < 1 || t.budget_tenths > 80) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV codec %s: budget %d tenths of a bit is outside [1, 80]", name, t.budget_tenths));
  }
  if (t.sink_tokens < 0 || t.sink_tokens > 4096 || t.recent_tokens < 0 || t.recent_tokens > 4096) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV codec %s: sink %d and recent %d tokens must be in [0, 4096]", name, t.sink_tokens, t.recent_tokens));
  }
  if (c.bits != KvCodecConfig::Bits::kInt8 || c.key_bits || c.key_group_size != 0 ||
      c.key_axis != KvCodecConfig::KeyAxis::kPerToken || !c.pre_rope_keys || c.hadamard_keys ||
      c.hadamard_values || c.layout != KvCodecConfig::Layout::kPlanes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV codec %s: the transform codec takes no bits, group, key, rotation or layout options", name));
  }
  return absl::OkStatus();
}

}  // namespace

std::string KvCodecConfig::to_string() const {
  if (transform) return transform_name(*this);
  std::string name = kv_bits_name(bits);
  // A key_bits or key_group_size equal to the default prints nothing; a
  // non-quantized config prints them only when set (so an invalid one names
  // itself in validate()'s errors).
  if (key_bits && *key_bits != bits) {
    name += *key_bits == Bits::kInt8 ? "-k8" : *key_bits == Bits::kInt4 ? "-k4" : "-k16";
  }
  if (quantized() && key_axis == KeyAxis::kPerChannel) name += "-pc";
  if (key_group_size != 0 && key_group_size != group_size) absl::StrAppend(&name, "-kg", key_group_size);
  if (quantized()) absl::StrAppend(&name, "-g", group_size);
  if (pre_rope_keys) name += "-pre";
  if (hadamard_keys && hadamard_values) {
    name += "-had";
  } else if (hadamard_keys) {
    name += "-hk";
  } else if (hadamard_values) {
    name += "-hv";
  }
  if (layout == Layout::kRows) name += "-rows";
  if (zstd_level > 0) absl::StrAppend(&name, "-z", zstd_level);
  if (zstd_level < 0) absl::StrAppend(&name, "-zf", -zstd_level);
  return name;
}

absl::Status KvCodecConfig::validate() const {
  if (zstd_level != 0 && (zstd_level < ZSTD_minCLevel() || zstd_level > ZSTD_maxCLevel())) {
    return absl::InvalidArgumentError(absl::StrFormat("KV codec: zstd level %d is outside [%d, %d]",
                                                      zstd_level, ZSTD_minCLevel(), ZSTD_maxCLevel()));
  }
  if (transform) return validate_transform(*this);
  if (quantized() && (group_size < 1 || group_size > kMaxGroupSize)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV codec %s: group size %d is outside [1, %d]", to_string(), group_size, kMaxGroupSize));
  }
  if (bits == Bits::kInt4 && group_size % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV codec %s: int4 packs two codes per byte and needs an even group size, not %d", to_string(),
        group_size));
  }
  if (!quantized() && key_axis != KeyAxis::kPerToken) {
    return absl::InvalidArgumentError("KV codec f16: per-channel key groups apply to int8/int4 only");
  }
  const Bits kbits = bits_for(/*is_key=*/true);
  if ((bits == Bits::kF16) != (kbits == Bits::kF16)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV codec %s: f16 does not mix with quantized keys or values (mixed precision is int4 values with "
        "int8 keys: int4-k8)",
        to_string()));
  }
  if (bits == Bits::kInt8 && kbits == Bits::kInt4) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV codec %s: keys may not be narrower than values (int4 keys with int8 values)", to_string()));
  }
  if (key_group_size != 0) {
    if (!quantized()) {
      return absl::InvalidArgumentError(absl::StrFormat("KV codec %s: f16 takes no key group size", to_string()));
    }
    if (key_group_size < 1 || key_group_size > kMaxGroupSize) {
      return absl::InvalidArgumentError(absl::StrFormat("KV codec %s: key group size %d is outside [1, %d]",
                                                        to_string(), key_group_size, kMaxGroupSize));
    }
    if (kbits == Bits::kInt4 && key_group_size % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "KV codec %s: int4 keys need an even key group size, not %d", to_string(), key_group_size));
    }
  }
  return absl::OkStatus();
}

absl::Status KvCodecConfig::validate(const KvGeometry& g) const {
  if (absl::Status st = validate(); !st.ok()) return st;
  if (g.n_head_kv < 1 || g.head_dim < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV codec %s: bad KV geometry (n_head_kv %d, head_dim %d)", to_string(), g.n_head_kv, g.head_dim));
  }
  if (transform) return absl::OkStatus();  // its INT8 rows group by min(32, head_dim) (kv_transform_codec.h)
  const bool keys_per_token = key_axis == KeyAxis::kPerToken;
  if (quantized() && g.head_dim % group_size != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV codec %s: group size %d does not divide head_dim %d (values%s group along head_dim)",
        to_string(), group_size, g.head_dim, keys_per_token && key_group_size == 0 ? " and keys" : ""));
  }
  if (quantized() && keys_per_token && g.head_dim % group_size_for(/*is_key=*/true) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV codec %s: key group size %d does not divide head_dim %d (per-token keys group along head_dim; "
        "with pc a key group spans tokens)",
        to_string(), group_size_for(/*is_key=*/true), g.head_dim));
  }
  if ((hadamard_keys || hadamard_values) && !is_power_of_two(g.head_dim)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV codec %s: the Hadamard rotation needs a power-of-two head_dim, not %d", to_string(), g.head_dim));
  }
  return absl::OkStatus();
}

namespace {

// "tc-b2.5-s4-w16-z3" (see the grammar in the header).
absl::StatusOr<KvCodecConfig> parse_transform_config(const std::string& text,
                                                     const std::vector<std::string>& tokens) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "bad KV codec name '%s': %s (expected e.g. tc-b2.5; options bB.B sN wN zN zfN)", text, why));
  };
  KvTransformParams params;
  int zstd_level = 0;
  bool budget_given = false;
  for (size_t i = 1; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    int value = 0;
    if (t.size() > 1 && t[0] == 'b') {
      // B or B.D: one decimal place at most.
      const std::vector<std::string> parts = absl::StrSplit(t.substr(1), '.');
      int whole = 0, tenth = 0;
      if (parts.size() > 2 || !parse_suffix_int(parts[0], 0, &whole) ||
          (parts.size() == 2 && (parts[1].size() != 1 || !parse_suffix_int(parts[1], 0, &tenth)))) {
        return bad(absl::StrCat("budget '", t, "' is not B or B.D bits"));
      }
      params.budget_tenths = whole * 10 + tenth;
      budget_given = true;
    } else if (t.size() > 1 && t[0] == 's' && parse_suffix_int(t, 1, &value)) {
      params.sink_tokens = value;
    } else if (t.size() > 1 && t[0] == 'w' && parse_suffix_int(t, 1, &value)) {
      params.recent_tokens = value;
    } else if (t.size() > 2 && t.rfind("zf", 0) == 0 && parse_suffix_int(t, 2, &value)) {
      zstd_level = -value;
    } else if (t.size() > 1 && t[0] == 'z' && parse_suffix_int(t, 1, &value)) {
      zstd_level = value;
    } else {
      return bad(absl::StrCat("unknown option '", t, "'"));
    }
  }
  if (!budget_given) return bad("the budget bB.B is missing");
  KvCodecConfig config = transform_kv_codec_config(params, zstd_level);
  if (absl::Status st = config.validate(); !st.ok()) return bad(std::string(st.message()));
  return config;
}

}  // namespace

absl::StatusOr<KvCodecConfig> parse_kv_codec_config(std::string_view name) {
  const std::string text(name);
  std::vector<std::string> tokens = absl::StrSplit(text, '-');
  if (tokens[0] == "tc") return parse_transform_config(text, tokens);
  KvCodecConfig config;
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "bad KV codec name '%s': %s (expected e.g. int4-pc-g32-had-z3; bits f16|int8|int4, options "
        "gN k8 kgN pt pc pre hk hv had rows planes zN zfN)",
        text, why));
  };
  if (tokens[0] == "f16") {
    config.bits = KvCodecConfig::Bits::kF16;
  } else if (tokens[0] == "int8") {
    config.bits = KvCodecConfig::Bits::kInt8;
  } else if (tokens[0] == "int4") {
    config.bits = KvCodecConfig::Bits::kInt4;
  } else {
    return bad(absl::StrCat("unknown bits '", tokens[0], "'"));
  }
  bool group_given = false;
  bool key_bits_given = false;
  for (size_t i = 1; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    int value = 0;
    if (t == "pt") {
      config.key_axis = KvCodecConfig::KeyAxis::kPerToken;
    } else if (t == "pc") {
      config.key_axis = KvCodecConfig::KeyAxis::kPerChannel;
    } else if (t == "k8") {
      config.key_bits = KvCodecConfig::Bits::kInt8;
      key_bits_given = true;
    } else if (t.size() > 2 && t.rfind("kg", 0) == 0 && parse_suffix_int(t, 2, &value)) {
      if (value == 0) return bad("key group size kg0 is outside [1, 1024]");
      config.key_group_size = value;
    } else if (t == "pre") {
      config.pre_rope_keys = true;
    } else if (t == "hk") {
      config.hadamard_keys = true;
    } else if (t == "hv") {
      config.hadamard_values = true;
    } else if (t == "had") {
      config.hadamard_keys = config.hadamard_values = true;
    } else if (t == "rows") {
      config.layout = KvCodecConfig::Layout::kRows;
    } else if (t == "planes") {
      config.layout = KvCodecConfig::Layout::kPlanes;
    } else if (t.size() > 2 && t.rfind("zf", 0) == 0 && parse_suffix_int(t, 2, &value)) {
      config.zstd_level = -value;
    } else if (t.size() > 1 && t[0] == 'z' && parse_suffix_int(t, 1, &value)) {
      config.zstd_level = value;
    } else if (t.size() > 1 && t[0] == 'g' && parse_suffix_int(t, 1, &value)) {
      config.group_size = value;
      group_given = true;
    } else {
      return bad(absl::StrCat("unknown option '", t, "'"));
    }
  }
  if (!config.quantized() && group_given) return bad("f16 takes no group size");
  if (!config.quantized() && key_bits_given) return bad("f16 does not mix with int8 keys (k8 needs int4 values)");
  if (!config.quantized() && config.key_group_size != 0) return bad("f16 takes no key group size");
  // Canonical form: defaults are unset, so equal configs compare equal.
  if (config.key_bits == config.bits) config.key_bits.reset();
  if (config.key_group_size == config.group_size) config.key_group_size = 0;
  if (!config.quantized() && config.key_axis == KvCodecConfig::KeyAxis::kPerChannel) {
    return bad("per-channel key groups apply to int8/int4 only");
  }
  if (absl::Status st = config.validate(); !st.ok()) return bad(std::string(st.message()));
  return config;
}

int key_group_tokens(const KvCodecConfig& config) {
  if (config.transform) return 1;
  if (!config.quantized() || config.key_axis != KvCodecConfig::KeyAxis::kPerChannel) return 1;
  return config.group_size_for(/*is_key=*/true);
}

}  // namespace baton

namespace baton {

KvCodecConfig default_kv_codec_config(KvCodecConfig::Bits bits, const KvGeometry& geometry) {
  KvCodecConfig config;
  config.bits = bits;
  config.zstd_level = 3;
  if (bits == KvCodecConfig::Bits::kF16) return config;
  config.group_size = geometry.head_dim > 0 ? std::min(32, geometry.head_dim) : 32;
  if (bits == KvCodecConfig::Bits::kInt4) {
    // Per-channel keys over 128 tokens: KIVI's axis, and fewer scales than
    // per-token groups (the size target), at equal measured quality.
    config.key_axis = KvCodecConfig::KeyAxis::kPerChannel;
    config.key_group_size = 128;
  }
  return config;
}

}  // namespace baton
