#include "common/kv_codec/kv_transform_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/kv_codec/kv_kernels.h"
#include "common/kv_codec/kv_zstd.h"
#include "common/util/check.h"

namespace baton {
namespace {

constexpr int kHalfBins = 2 * kKvShapeBins;  // the shape in half-bins of 1/32
constexpr int kMaxHalf = 127;                // symbols 0..254

// What one ladder step costs on one layer's shape (unit variance).
struct LadderEntry {
  int half = 0;                 // K
  std::vector<double> weights;  // [2K + 1] cell masses
  double rate = 0.0;            // bits: entropy of the cells
  double distortion = 0.0;      // E[(z - zhat)^2]
};

int half_for(int m) {
  // Cells [(2k - 1) m, (2k + 1) m) in half-bins must reach +-kKvShapeBins.
  const int k = (kKvShapeBins / m + 1) / 2 + 1;
  return std::min(kMaxHalf, k);
}

LadderEntry ladder_entry(const std::vector<float>& shape, int m) {
  LadderEntry e;
  e.half = half_for(m);
  e.weights.assign(static_cast<size_t>(2 * e.half + 1), 0.0);
  for (int h = 0; h < kHalfBins; ++h) {
    const int r = h - kKvShapeBins;  // half-bin [r, r + 1) in units of 1/32
    const double mass = 0.5 * static_cast<double>(shape[static_cast<size_t>(h / 2)]);
    // floor((r + m) / (2m)) for negative numerators too.
    const int num = r + m;
    int k = num >= 0 ? num / (2 * m) : -((-num + 2 * m - 1) / (2 * m));
    k = std::clamp(k, -e.half, e.half);
    e.weights[static_cast<size_t>(k + e.half)] += mass;
    const double err = (r + 0.5) / 32.0 - static_cast<double>(k) * m / 16.0;
    e.distortion += mass * err * err;
  }
  double total = 0.0;
  for (double w : e.weights) total += w;
  for (double w : e.weights) {
    if (w > 0.0) e.rate -= (w / total) * std::log2(w / total);
  }
  e.distortion /= total;
  return e;
}

double second_moment(const std::vector<float>& shape) {
  double total = 0.0, sum = 0.0;
  for (int h = 0; h < kHalfBins; ++h) {
    const double mass = 0.5 * static_cast<double>(shape[static_cast<size_t>(h / 2)]);
    const double z = (h - kKvShapeBins + 0.5) / 32.0;
    total += mass;
    sum += mass * z * z;
  }
  return total > 0.0 ? sum / total : 1.0;
}

// Per component, the option of least d + lambda * r (-1: 0 bits).
int choose(const std::vector<LadderEntry>& ladder, double variance, double off_distortion, double lambda) {
  int best = -1;
  double best_cost = variance * off_distortion;
  for (size_t j = 0; j < ladder.size(); ++j) {
    const double cost = variance * ladder[j].distortion + lambda * ladder[j].rate;
    if (cost < best_cost) {
      best_cost = cost;
      best = static_cast<int>(j);
    }
  }
  return best;
}

struct Allocation {
  std::vector<int> choice;  // per (head, index): ladder index or -1
  double bits = 0.0, mse = 0.0;
};

Allocation allocate(const KvCalibration& cal, int layer, bool is_key, const std::vector<LadderEntry>& ladder,
                    double off_distortion, double budget_bits) {
  const int n = cal.n_head_kv * cal.head_dim;
  auto evaluate = [&](double lambda) {
    Allocation a;
    a.choice.resize(static_cast<size_t>(n));
    for (int h = 0; h < cal.n_head_kv; ++h) {
      const KvCalibrationHead& head = cal.head(layer, is_key, h);
      for (int i = 0; i < cal.head_dim; ++i) {
        const double var = head.variance[static_cast<size_t>(i)];
        const int c = var > 0.0 ? choose(ladder, var, off_distortion, lambda) : -1;
        a.choice[static_cast<size_t>(h * cal.head_dim + i)] = c;
        a.bits += c >= 0 ? ladder[static_cast<size_t>(c)].rate : 0.0;
        a.mse += c >= 0 ? var * ladder[static_cast<size_t>(c)].distortion : var * off_distortion;
      }
    }
    return a;
  };
  double max_var = 0.0;
  for (int h = 0; h < cal.n_head_kv; ++h) max_var = std::max(max_var, static_cast<double>(cal.head(layer, is_key, h).variance[0]));
  if (max_var <= 0.0) return evaluate(1.0);
  // Rate falls as lambda grows: find the smallest lambda within budget.
  double lo = std::log(max_var * 1e-12), hi = std::log(max_var * 1e3);
  Allocation best = evaluate(std::exp(hi));
  for (int it = 0; it < 64; ++it) {
    const double mid = 0.5 * (lo + hi);
    Allocation a = evaluate(std::exp(mid));
    if (a.bits <= budget_bits) {
      hi = mid;
      best = std::move(a);
    } else {
      lo = mid;
    }
  }
  return best;
}

// The INT8 reconstruction of one head (KvTransformHeadPlan::reconstruct_i8)
// from `reconstruct` [k, D] (step * basis rows), its mean and h.half.
void pack_reconstruction(const std::vector<float>& reconstruct, const std::vector<float>& mean,
                         KvTransformHeadPlan& h) {
  const int k = h.count;
  const int d = static_cast<int>(mean.size());
  h.reconstruct_i8.assign(static_cast<size_t>((k + 3) / 4) * d * 4, 0);
  h.reconstruct_scale.assign(static_cast<size_t>(d), 0.0f);
  h.reconstruct_bias.assign(static_cast<size_t>(d), 0.0f);
  for (int j = 0; j < d; ++j) {
    float peak = 0.0f;
    for (int i = 0; i < k; ++i) peak = std::max(peak, std::fabs(reconstruct[static_cast<size_t>(i) * d + j]));
    const float scale = peak / 127.0f;
    int64_t offset = 0;  // sum_i half_i * w_i: the symbols are q + half
    for (int i = 0; i < k && scale > 0.0f; ++i) {
      const int w =
          std::clamp(static_cast<int>(std::nearbyint(reconstruct[static_cast<size_t>(i) * d + j] / scale)), -127, 127);
      h.reconstruct_i8[(static_cast<size_t>(i / 4) * d + j) * 4 + i % 4] = static_cast<int8_t>(w);
      offset += static_cast<int64_t>(h.half[static_cast<size_t>(i)]) * w;
    }
    h.reconstruct_scale[static_cast<size_t>(j)] = scale;
    h.reconstruct_bias[static_cast<size_t>(j)] =
        static_cast<float>(double{mean[static_cast<size_t>(j)]} - double{scale} * static_cast<double>(offset));
  }
}

// Per head: the matrices the kernels multiply by (kv_kernels.h affine_rows,
// affine_u8_rows).
void build_head_plans(const KvCalibration& cal, int layer, bool is_key, KvTransformPlan& plan) {
  const int d = cal.head_dim;
  plan.heads.assign(static_cast<size_t>(cal.n_head_kv), KvTransformHeadPlan{});
  for (size_t c = 0; c < plan.active.size(); ++c) {
    KvTransformHeadPlan& h = plan.heads[static_cast<size_t>(plan.active[c].head)];
    if (h.count == 0) h.first = static_cast<int>(c);
    ++h.count;
  }
  for (int hi = 0; hi < cal.n_head_kv; ++hi) {
    KvTransformHeadPlan& h = plan.heads[static_cast<size_t>(hi)];
    const KvCalibrationHead& head = cal.head(layer, is_key, hi);
    const size_t k = static_cast<size_t>(h.count);
    h.project.assign(static_cast<size_t>(d) * k, 0.0f);
    h.project_bias.assign(k, 0.0f);
    std::vector<float> reconstruct(k * static_cast<size_t>(d), 0.0f);  // [k, D]: step * basis row
    for (size_t i = 0; i < k; ++i) {
      const KvTransformComponent& comp = plan.active[static_cast<size_t>(h.first) + i];
      const float* row = head.basis.data() + static_cast<size_t>(comp.index) * d;
      double bias = 0.0;
      for (int j = 0; j < d; ++j) {
        h.project[static_cast<size_t>(j) * k + i] = row[j];
        reconstruct[i * d + static_cast<size_t>(j)] = comp.step * row[j];
        bias -= static_cast<double>(head.mean[static_cast<size_t>(j)]) * row[j];
      }
      h.project_bias[i] = static_cast<float>(bias);
      h.inv_step.push_back(comp.inv_step);
      h.half.push_back(static_cast<float>(comp.half));
    }
    pack_reconstruction(reconstruct, head.mean, h);
  }
}

// The INT8 rows' group: 32 where it divides head_dim.
int int8_group(int head_dim) { return head_dim % 32 == 0 ? 32 : head_dim; }

}  // namespace

absl::StatusOr<std::unique_ptr<KvTransformCodec>> KvTransformCodec::Create(
    std::shared_ptr<const KvCalibration> calibration, const KvCodecConfig& config) {
  if (!config.transform) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV codec %s is not a transform codec", config.to_string()));
  }
  if (calibration == nullptr) return absl::InvalidArgumentError("transform codec: no calibration");
  BATON_RETURN_IF_ERROR(config.validate());
  const Digest256 digest = kv_calibration_digest(*calibration);
  if (config.transform->bound() && config.transform->calibration != digest) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "KV codec %s: calibration mismatch: the codec names calibration %s, this calibration is %s",
        config.to_string(), to_hex(config.transform->calibration), to_hex(digest)));
  }
  if (!calibration->pre_rope_keys) {
    return absl::InvalidArgumentError("transform codec: the calibration's keys are post-RoPE; it codes pre-RoPE keys");
  }
  if (calibration->head_dim > kv_kernels_impl::kAffineU8MaxK) {
    return absl::InvalidArgumentError(absl::StrFormat("transform codec: head_dim %d exceeds the decoder's %d",
                                                      calibration->head_dim, kv_kernels_impl::kAffineU8MaxK));
  }
  std::unique_ptr<KvTransformCodec> codec(new KvTransformCodec());
  codec->calibration_ = std::move(calibration);
  const KvCalibration& cal = *codec->calibration_;
  codec->config_ = config;
  codec->config_.transform->calibration = digest;
  codec->geometry_ = KvGeometry{cal.n_layer, cal.n_head_kv, cal.n_head_kv, cal.head_dim, {}};
  codec->int8_.bits = KvCodecConfig::Bits::kInt8;
  codec->int8_.group_size = int8_group(cal.head_dim);
  const double budget = config.transform->budget_tenths / 10.0 * cal.n_head_kv * cal.head_dim;
  codec->plans_.resize(static_cast<size_t>(2 * cal.n_layer));
  for (int layer = 0; layer < cal.n_layer; ++layer) {
    for (const bool is_key : {true, false}) {
      const std::vector<float>& shape = cal.shape_of(layer, is_key);
      std::vector<LadderEntry> ladder;
      for (int m : kKvTransformLadder) ladder.push_back(ladder_entry(shape, m));
      const Allocation a = allocate(cal, layer, is_key, ladder, second_moment(shape), budget);
      KvTransformPlan& plan = codec->plans_[static_cast<size_t>(layer * 2 + (is_key ? 0 : 1))];
      plan.owned.resize(ladder.size());
      plan.predicted_bits = a.bits;
      plan.predicted_mse = a.mse;
      for (int h = 0; h < cal.n_head_kv; ++h) {
        const KvCalibrationHead& head = cal.head(layer, is_key, h);
        for (int i = 0; i < cal.head_dim; ++i) {
          const int j = a.choice[static_cast<size_t>(h * cal.head_dim + i)];
          if (j < 0) continue;
          if (!plan.owned[static_cast<size_t>(j)]) {
            BATON_ASSIGN_OR_RETURN(RansModel model, make_rans_model(ladder[static_cast<size_t>(j)].weights));
            plan.owned[static_cast<size_t>(j)] = std::make_unique<RansModel>(std::move(model));
          }
          KvTransformComponent c;
          c.head = h;
          c.index = i;
          c.ladder = j;
          c.half = ladder[static_cast<size_t>(j)].half;
          c.step = static_cast<float>(std::sqrt(static_cast<double>(head.variance[static_cast<size_t>(i)])) *
                                      kKvTransformLadder[static_cast<size_t>(j)] / 16.0);
          c.inv_step = 1.0f / c.step;
          plan.active.push_back(c);
          plan.models.push_back(plan.owned[static_cast<size_t>(j)].get());
        }
      }
      build_head_plans(cal, layer, is_key, plan);
    }
  }
  return codec;
}

KvTransformCodec::Split KvTransformCodec::split(int64_t token_begin, int64_t stream_end, int64_t n_tokens) const {
  const KvTransformParams& t = *config_.transform;
  Split s;
  s.a = std::clamp<int64_t>(t.sink_tokens - token_begin, 0, n_tokens);
  s.b = std::clamp<int64_t>(stream_end - t.recent_tokens - token_begin, s.a, n_tokens);
  return s;
}

absl::Status KvTransformCodec::check_block(int layer, int64_t token_begin, int64_t stream_end,
                                           int64_t n_tokens) const {
  if (layer < 0 || layer >= geometry_.n_layer) {
    return absl::InvalidArgumentError(
        absl::StrFormat("transform KV block: layer %d outside the calibration's %d layers", layer, geometry_.n_layer));
  }
  if (n_tokens < 1 || n_tokens > kMaxKvBlockTokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV block of %d tokens; a block holds 1..%d tokens", n_tokens, kMaxKvBlockTokens));
  }
  if (token_begin < 0 || token_begin + n_tokens > stream_end) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "transform KV block [%d, %d) is outside its stream, which ends at %d", token_begin, token_begin + n_tokens,
        stream_end));
  }
  return absl::OkStatus();
}

absl::StatusOr<EncodedKvBlock> KvTransformCodec::encode(int layer, bool is_key, int64_t token_begin,
                                                        int64_t stream_end, const float* rows,
                                                        int64_t n_tokens) const {
  BATON_RETURN_IF_ERROR(check_block(layer, token_begin, stream_end, n_tokens));
  const int64_t kv_dim = geometry_.kv_dim();
  const int d = geometry_.head_dim;
  const Split s = split(token_begin, stream_end, n_tokens);
  EncodedKvBlock out;
  out.raw_size = kv_block_raw_size(config_, geometry_, is_key, n_tokens);
  for (const auto& [from, count] : {std::pair{int64_t{0}, s.a}, std::pair{s.b, n_tokens - s.b}}) {
    if (count == 0) continue;
    BATON_ASSIGN_OR_RETURN(EncodedKvBlock part, encode_kv_block(int8_, geometry_, is_key, rows + from * kv_dim, count));
    out.payload += part.payload;
  }
  const int64_t n_rows = s.b - s.a;
  if (n_rows == 0) return out;
  for (int64_t e = s.a * kv_dim; e < s.b * kv_dim; ++e) {
    if (!std::isfinite(rows[e]) || std::fabs(rows[e]) > 65504.0f) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "transform KV block: value %g at token %d, element %d is not finite or beyond f16", rows[e], e / kv_dim,
          e % kv_dim));
    }
  }
  const KvTransformPlan& p = plan(layer, is_key);
  const int64_t n_cols = static_cast<int64_t>(p.active.size());
  if (n_cols == 0) return out;  // nothing coded (e.g. every variance 0): no symbol section
  std::vector<uint8_t> symbols(static_cast<size_t>(n_rows * n_cols));
  thread_local std::vector<float> coefficients;
  const kv_kernels_impl::KvKernels& kernels = kv_kernels_impl::kv_kernels();
  for (int h = 0; h < geometry_.n_head_kv; ++h) {
    const KvTransformHeadPlan& hp = p.heads[static_cast<size_t>(h)];
    if (hp.count == 0) continue;
    coefficients.resize(static_cast<size_t>(n_rows * hp.count));
    kernels.affine_rows(rows + s.a * kv_dim + h * d, kv_dim, n_rows, d, hp.project.data(), hp.count,
                        hp.project_bias.data(), coefficients.data(), hp.count);
    for (int64_t t = 0; t < n_rows; ++t) {
      const float* y = coefficients.data() + t * hp.count;
      uint8_t* sym = symbols.data() + t * n_cols + hp.first;
      for (int i = 0; i < hp.count; ++i) {
        const float half = hp.half[static_cast<size_t>(i)];
        const float q = std::clamp(std::nearbyint(y[i] * hp.inv_step[static_cast<size_t>(i)]), -half, half);
        sym[i] = static_cast<uint8_t>(static_cast<int>(q + half));
      }
    }
  }
  if (config_.zstd_level != 0) {
    BATON_ASSIGN_OR_RETURN(std::string frame,
                           zstd_compress(std::string_view(reinterpret_cast<const char*>(symbols.data()), symbols.size()),
                                         config_.zstd_level));
    out.payload += frame;
  } else {
    BATON_ASSIGN_OR_RETURN(std::string coded, rans_encode(symbols.data(), n_rows, static_cast<int>(n_cols), p.models));
    out.payload += coded;
  }
  return out;
}

absl::Status KvTransformCodec::decode(int layer, bool is_key, int64_t token_begin, int64_t stream_end,
                                      std::string_view payload, uint64_t raw_size, int64_t n_tokens,
                                      float* out) const {
  BATON_RETURN_IF_ERROR(check_block(layer, token_begin, stream_end, n_tokens));
  const uint64_t expected = kv_block_raw_size(config_, geometry_, is_key, n_tokens);
  if (raw_size != expected) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "transform KV block: raw_size %d; %d tokens of %d elements take %d", raw_size, n_tokens, geometry_.kv_dim(),
        expected));
  }
  const int64_t kv_dim = geometry_.kv_dim();
  const int d = geometry_.head_dim;
  const Split s = split(token_begin, stream_end, n_tokens);
  size_t at = 0;
  for (const auto& [from, count] : {std::pair{int64_t{0}, s.a}, std::pair{s.b, n_tokens - s.b}}) {
    if (count == 0) continue;
    const uint64_t bytes = kv_block_raw_size(int8_, geometry_, is_key, count);
    if (payload.size() - at < bytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "transform KV block: payload of %d bytes is shorter than its INT8 rows (%d bytes from %d)", payload.size(),
          bytes, at));
    }
    BATON_RETURN_IF_ERROR(decode_kv_block(int8_, geometry_, is_key, payload.substr(at, bytes), bytes, count,
                                          out + from * kv_dim));
    at += bytes;
  }
  const std::string_view coded = payload.substr(at);
  const int64_t n_rows = s.b - s.a;
  const KvTransformPlan& p = plan(layer, is_key);
  const int64_t n_cols = static_cast<int64_t>(p.active.size());
  if (n_rows == 0 || n_cols == 0) {  // no symbol section (encode)
    if (!coded.empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("transform KV block: %d bytes after its INT8 rows, none expected", coded.size()));
    }
    if (n_rows == 0) return absl::OkStatus();
  }
  thread_local std::vector<uint8_t> symbols;
  // <= raw_size / 2 (the caller holds 8x that in `out`); + 4: affine_u8_rows
  // reads up to 3 bytes past a row's components.
  symbols.resize(static_cast<size_t>(n_rows * n_cols) + 4);
  if (n_cols == 0) {
    // Every head reconstructs at its mean below.
  } else if (config_.zstd_level != 0) {
    BATON_RETURN_IF_ERROR(zstd_decompress_exact(coded, static_cast<size_t>(n_rows * n_cols), symbols.data()));
  } else {
    BATON_RETURN_IF_ERROR(rans_decode(coded, n_rows, static_cast<int>(n_cols), p.models, symbols.data()));
  }
  const kv_kernels_impl::KvKernels& kernels = kv_kernels_impl::kv_kernels();
  for (int h = 0; h < geometry_.n_head_kv; ++h) {
    const KvTransformHeadPlan& hp = p.heads[static_cast<size_t>(h)];
    float* x = out + s.a * kv_dim + h * d;
    const std::vector<float>& mean = calibration_->head(layer, is_key, h).mean;
    if (hp.count == 0) {
      for (int64_t t = 0; t < n_rows; ++t) std::memcpy(x + t * kv_dim, mean.data(), sizeof(float) * static_cast<size_t>(d));
      continue;
    }
    kernels.affine_u8_rows(symbols.data() + hp.first, n_cols, n_rows, hp.count, hp.reconstruct_i8.data(), d,
                           hp.reconstruct_scale.data(), hp.reconstruct_bias.data(), x, kv_dim);
  }
  return absl::OkStatus();
}

}  // namespace baton
