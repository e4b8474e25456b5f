// Distribution figures over logit rows, shared by the quality measurements
// (bench fidelity, kv_quality.h: bench kv-quality and model calibrate).
#pragma once

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

namespace baton::cli {

// log softmax of a logit row, in double: out [n_vocab].
inline void log_softmax(std::span<const float> logits, std::vector<double>& out) {
  out.resize(logits.size());
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(double{l} - max_logit);
  const double log_sum = std::log(sum) + max_logit;
  for (size_t i = 0; i < logits.size(); ++i) out[i] = double{logits[i]} - log_sum;
}

// KL(p || q) from log-probabilities.
inline double kl_divergence(const std::vector<double>& log_p, const std::vector<double>& log_q) {
  double kl = 0.0;
  for (size_t i = 0; i < log_p.size(); ++i) kl += std::exp(log_p[i]) * (log_p[i] - log_q[i]);
  return std::max(kl, 0.0);
}

}  // namespace baton::cli
