#include "absl/strings/str_format.h"
#include "bench_kv_codec.h"
#include "report.h"

namespace baton::cli {

Json kv_codec_json(const KvCodecRun& run) {
  Json variants = Json::array();
  for (const VariantResult& r : run.variants) {
    if (!r.error.empty()) {
      variants.push_back({{"codec", r.codec}, {"error", r.error}});
      continue;
    }
    variants.push_back({{"codec", r.codec},
                        {"raw_bytes_per_token", fixed(r.raw_bytes_per_token, 1)},
                        {"encoded_bytes_per_token", fixed(r.encoded_bytes_per_token, 1)},
                        {"ratio_to_f16", fixed(r.ratio_to_f16, 4)},
                        {"encode_mb_per_s", fixed(r.encode_mb_per_s, 1)},
                        {"decode_mb_per_s", fixed(r.decode_mb_per_s, 1)},
                        {"rmse", significant(r.rmse)},
                        {"relative_rmse", significant(r.relative_rmse)},
                        {"key_relative_rmse", significant(r.key_relative_rmse)},
                        {"value_relative_rmse", significant(r.value_relative_rmse)}});
  }
  return {{"model", run.model},
          {"tokens", run.tokens},
          {"block_tokens", run.block_tokens},
          {"simd", run.simd},
          {"f16_bytes_per_token", fixed(run.f16_bytes_per_token, 1)},
          {"variants", std::move(variants)}};
}

void print_kv_codec_table(const KvCodecRun& run) {
  print_line("kv-codec: %s, %d tokens, blocks of %d, %s kernels, one thread (CPU time)\n", run.model, run.tokens,
             run.block_tokens, run.simd);
  print_line("F16 K/V: %.0f bytes per token\n", run.f16_bytes_per_token);
  print_line("  %-24s %10s %10s %8s %10s %10s %10s %9s %9s %9s\n", "codec", "raw B/tok", "enc B/tok", "vs f16",
             "enc MB/s", "dec MB/s", "rmse", "rel rmse", "K rel", "V rel");
  for (const VariantResult& r : run.variants) {
    if (!r.error.empty()) {
      print_line("  %-24s skipped: %s\n", r.codec, r.error);
      continue;
    }
    print_line("  %-24s %10.1f %10.1f %8.4f %10.1f %10.1f %10.3g %9.4f %9.4f %9.4f\n", r.codec,
               r.raw_bytes_per_token, r.encoded_bytes_per_token, r.ratio_to_f16, r.encode_mb_per_s,
               r.decode_mb_per_s, r.rmse, r.relative_rmse, r.key_relative_rmse, r.value_relative_rmse);
  }
}

}  // namespace baton::cli
