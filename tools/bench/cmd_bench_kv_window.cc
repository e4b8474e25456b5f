// baton bench kv-window: what sliding-window layers save on the wire and in
// the edge store. For a KV geometry given by flags (default: the Gemma 3 1B
// shape: 26 layers, 4 heads, 1 KV head, head_dim 256, window 512 on five
// layers of every six, the sixth global) and the same geometry with full
// attention, per context and codec: writes the segment [0, N) through the
// stream writer exactly as the cloud sends it (blocks, quantization, zstd;
// a windowed layer sends only the positions the next query sees), reads it
// back into an edge store (QuantizedKvCache) through the reader, and reports
// the payload bytes per token on the wire and the store's bytes per token.
// K/V values are seeded Gaussian rows (no model is needed; zstd gains on real
// K/V differ a little, the window ratio does not).
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench_harness.h"
#include "bench_report.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/model/layer_window.h"
#include "common/util/check.h"
#include "common/util/sha256.h"

namespace baton::cli {
namespace {

constexpr int kVocab = 262144;  // Gemma 3's vocabulary (only token ids need it)

struct WindowBenchShape {
  int64_t n_layer = 26, n_head = 4, n_head_kv = 1, head_dim = 256, window = 512, global_every = 6;
};

KvGeometry geometry_of(const WindowBenchShape& shape, bool windowed) {
  KvGeometry g{static_cast<int>(shape.n_layer), static_cast<int>(shape.n_head), static_cast<int>(shape.n_head_kv),
               static_cast<int>(shape.head_dim), {}};
  if (windowed) {
    // Gemma 3: layer il is global when (il + 1) % global_every == 0.
    for (int il = 0; il < g.n_layer; ++il) {
      g.layer_window.push_back((il + 1) % shape.global_every == 0 ? 0 : static_cast<int32_t>(shape.window));
    }
  }
  return g;
}

ModelFingerprint fingerprint_of(const KvGeometry& g) {
  ModelFingerprint fp;
  fp.fields = {{"arch", "bench-kv-window"},
               {"n_layer", std::to_string(g.n_layer)},
               {"n_head", std::to_string(g.n_head)},
               {"n_head_kv", std::to_string(g.n_head_kv)},
               {"head_dim", std::to_string(g.head_dim)},
               {"n_vocab", std::to_string(kVocab)}};
  if (has_sliding_window(g.layer_window)) fp.fields.emplace_back("layer_window", layer_window_text(g.layer_window));
  fp.digest = to_hex(sha256(fp.canonical()));
  return fp;
}

// Seeded Gaussian rows, the same for a (layer, kind, position) in every run.
KvRowsFn synthetic_rows(const KvGeometry& g) {
  return [g](int layer, bool is_key, int64_t token_begin, int64_t n_tokens, float* out) {
    for (int64_t t = 0; t < n_tokens; ++t) {
      std::mt19937 rng(static_cast<uint32_t>((token_begin + t) * 2654435761u) ^
                       static_cast<uint32_t>(layer * 2 + (is_key ? 0 : 1)));
      std::normal_distribution<float> dist(0.0f, 1.0f);
      for (int64_t i = 0; i < g.kv_dim(); ++i) out[t * g.kv_dim() + i] = dist(rng);
    }
    return absl::OkStatus();
  };
}

struct WindowBenchRow {
  double wire_bytes_per_token = 0;   // encoded payload bytes / N
  double store_bytes_per_token = 0;  // edge store memory_bytes() / N (capacity N; rollback rows included)
  double ring_bytes_per_token = 0;   // the rows the store keeps between turns / N (no rollback rows)
};

// Bytes of the rows a store of capacity n keeps, without rollback rows.
double ring_bytes(const KvCodecConfig& store, const KvGeometry& g, int64_t n) {
  KvGeometry one = g;
  one.n_layer = 1;
  one.layer_window.clear();
  const int64_t row = QuantizedKvCache::bytes_per_token(store, one);
  int64_t rows = 0;
  for (int layer = 0; layer < g.n_layer; ++layer) rows += QuantizedKvCache::layer_rows(g.window(layer), n);
  return static_cast<double>(rows * row);
}

// Streams [0, n) and reads it into a fresh store of capacity n.
absl::StatusOr<WindowBenchRow> measure(const KvGeometry& g, const KvCodecConfig& codec, int64_t n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % kVocab);
  KvStreamHeaderInfo info;
  info.model = fingerprint_of(g);
  info.codec = codec;
  info.token_ids = ids;
  info.prefix_digest = prefix_digest(ids);
  std::vector<v1::KvStreamMessage> messages;
  KvStreamWriter writer([&](const v1::KvStreamMessage& m) {
    messages.push_back(m);
    return absl::OkStatus();
  });
  BATON_RETURN_IF_ERROR(write_kv_segment(synthetic_rows(g), g, info, nullptr, writer));
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<QuantizedKvCache> store,
                         QuantizedKvCache::Create(g, n, QuantizedKvCache::store_config_for(codec)));
  KvStreamExpectation expected;
  expected.model = info.model;
  BATON_RETURN_IF_ERROR(read_kv_segment(messages, expected, nullptr, *store).status());
  WindowBenchRow row;
  row.wire_bytes_per_token = static_cast<double>(writer.encoded_bytes()) / static_cast<double>(n);
  row.store_bytes_per_token = static_cast<double>(store->memory_bytes()) / static_cast<double>(n);
  row.ring_bytes_per_token = ring_bytes(store->config(), g, n) / static_cast<double>(n);
  return row;
}

}  // namespace

absl::Status bench_kv_window(const Args& args) {
  WindowBenchShape shape;
  std::string contexts = "2048,8192", codecs = "int8-g32-z3,int4-g32-z3";
  bool json = false;
  FlagSet flags("baton bench kv-window", "[--contexts LIST] [--codecs LIST] [shape flags] [--json]",
                "KV bytes per token on the wire and in the edge store for a geometry with sliding-window "
                "layers vs the same geometry with full attention (default shape: Gemma 3 1B). Streams "
                "seeded K/V of N tokens through the KV stream writer and reader into an edge store.");
  flags.add_string("contexts", &contexts, "comma-separated context lengths N", "LIST");
  flags.add_string("codecs", &codecs, "comma-separated wire codecs", "LIST");
  flags.add_int64("layers", &shape.n_layer, "layers");
  flags.add_int64("heads", &shape.n_head, "query heads");
  flags.add_int64("kv-heads", &shape.n_head_kv, "KV heads");
  flags.add_int64("head-dim", &shape.head_dim, "elements per head");
  flags.add_int64("window", &shape.window, "sliding window of the local layers, tokens");
  flags.add_int64("global-every", &shape.global_every, "every N-th layer is global (full attention)");
  flags.add_bool("json", &json, "print one JSON object instead of the table");
  BATON_ASSIGN_OR_RETURN(const bool run, parse_bench_flags(flags, args));
  if (!run) return absl::OkStatus();
  if (shape.n_layer < 1 || shape.n_layer > 512 || shape.n_head_kv < 1 || shape.n_head % shape.n_head_kv != 0 ||
      shape.head_dim < 2 || shape.head_dim > 1024 || shape.window < 1 || shape.global_every < 1) {
    return absl::InvalidArgumentError(
        "bad shape: need 1..512 layers, heads a multiple of kv-heads, head-dim 2..1024, window >= 1");
  }
  std::vector<int64_t> lengths;
  const std::vector<std::string> context_texts = absl::StrSplit(contexts, ',', absl::SkipEmpty());
  for (const std::string& text : context_texts) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(text, &n) || n < 1 || n > 131072) {
      return absl::InvalidArgumentError("bad context '" + text + "' (1..131072)");
    }
    lengths.push_back(n);
  }
  std::vector<KvCodecConfig> configs;
  const std::vector<std::string> codec_names = absl::StrSplit(codecs, ',', absl::SkipEmpty());
  for (const std::string& name : codec_names) {
    BATON_ASSIGN_OR_RETURN(const KvCodecConfig config, parse_kv_codec_config(name));
    configs.push_back(config);
  }
  BenchReport report(absl::StrFormat(
      "kv-window: %d layers, %d heads, %d KV heads, head_dim %d, window %d (every %d-th layer global) vs full "
      "attention; bytes per token",
      shape.n_layer, shape.n_head, shape.n_head_kv, shape.head_dim, shape.window, shape.global_every));
  for (const KvCodecConfig& codec : configs) {
    for (const int64_t n : lengths) {
      BATON_ASSIGN_OR_RETURN(const WindowBenchRow windowed, measure(geometry_of(shape, true), codec, n));
      BATON_ASSIGN_OR_RETURN(const WindowBenchRow full, measure(geometry_of(shape, false), codec, n));
      const std::string key = absl::StrFormat("%s_%d", codec.to_string(), n);
      const std::string label = absl::StrFormat("%s, %d tokens", codec.to_string(), n);
      report.add(key + "_wire_windowed", label + ": wire, windowed", windowed.wire_bytes_per_token, "B", 1);
      report.add(key + "_wire_full", label + ": wire, full attention", full.wire_bytes_per_token, "B", 1);
      report.add(key + "_wire_ratio", label + ": wire, windowed / full",
                 windowed.wire_bytes_per_token / full.wire_bytes_per_token, "", 3);
      report.add(key + "_store_windowed", label + ": edge store, windowed (with rollback rows)",
                 windowed.store_bytes_per_token, "B", 1);
      report.add(key + "_store_windowed_between_turns", label + ": edge store, windowed (between turns)",
                 windowed.ring_bytes_per_token, "B", 1);
      report.add(key + "_store_full", label + ": edge store, full attention", full.store_bytes_per_token, "B", 1);
      report.add(key + "_store_ratio", label + ": edge store, windowed / full",
                 windowed.store_bytes_per_token / full.store_bytes_per_token, "", 3);
    }
  }
  report.print(json);
  return absl::OkStatus();
}

}  // namespace baton::cli
