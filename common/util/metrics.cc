#include "common/util/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "common/util/check.h"

namespace baton {
namespace {

bool valid_metric_name(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    const bool digit = c >= '0' && c <= '9';
    if (!letter && !(digit && i > 0)) return false;
  }
  return true;
}

bool valid_label_name(std::string_view name) {
  if (name.empty() || name.substr(0, 2) == "__") return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!letter && !(digit && i > 0)) return false;
  }
  return true;
}

// Label values escape backslash, double quote and newline; help text
// backslash and newline.
std::string escape(std::string_view text, bool quote) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

// {a="x",b="y"} plus an optional extra label (histogram "le"); "" when empty.
std::string label_text(const MetricLabels& labels, std::string_view extra_name = {},
                       std::string_view extra_value = {}) {
  if (labels.empty() && extra_name.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [name, value] : labels) {
    if (!first) out += ',';
    first = false;
    out += name;
    out += "=\"";
    out += escape(value, true);
    out += '"';
  }
  if (!extra_name.empty()) {
    if (!first) out += ',';
    out += extra_name;
    out += "=\"";
    out += extra_value;
    out += '"';
  }
  out += '}';
  return out;
}

}  // namespace

std::string format_metric_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  const std::to_chars_result result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  BATON_CHECK(result.ec == std::errc(), "to_chars of a finite double cannot overflow 64 bytes");
  return std::string(buffer, result.ptr);
}

void Counter::inc(double delta) {
  BATON_CHECK(delta >= 0, "a counter only goes up");
  value_.fetch_add(delta, std::memory_order_relaxed);
}

void Counter::advance_to(double total) {
  double current = value_.load(std::memory_order_relaxed);
  while (total > current && !value_.compare_exchange_weak(current, total, std::memory_order_relaxed)) {
  }
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), bucket_counts_(upper_bounds_.size() + 1, 0) {
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    BATON_CHECK(std::isfinite(upper_bounds_[i]), "histogram bounds are finite (+Inf is implicit)");
    BATON_CHECK(i == 0 || upper_bounds_[i - 1] < upper_bounds_[i], "histogram bounds must ascend strictly");
  }
}

void Histogram::observe(double value) {
  // The first bucket whose upper bound is >= value (buckets are "le").
  // NaN lands in +Inf only.
  const size_t bucket =
      std::isnan(value) ? upper_bounds_.size()
                        : static_cast<size_t>(std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) -
                                              upper_bounds_.begin());
  std::lock_guard<std::mutex> lock(mu_);
  ++bucket_counts_[bucket];
  sum_ += value;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot out;
  std::lock_guard<std::mutex> lock(mu_);
  out.cumulative_counts.resize(bucket_counts_.size());
  uint64_t running = 0;
  for (size_t i = 0; i < bucket_counts_.size(); ++i) {
    running += bucket_counts_[i];
    out.cumulative_counts[i] = running;
  }
  out.sum = sum_;
  out.count = count_;
  return out;
}

std::vector<double> exponential_buckets(double start, double factor, int count) {
  BATON_CHECK(start > 0 && factor > 1 && count >= 1, "exponential_buckets(start > 0, factor > 1, count >= 1)");
  std::vector<double> out;
  double bound = start;
  for (int i = 0; i < count; ++i, bound *= factor) out.push_back(bound);
  return out;
}

std::vector<double> linear_buckets(double start, double width, int count) {
  BATON_CHECK(width > 0 && count >= 1, "linear_buckets(width > 0, count >= 1)");
  std::vector<double> out;
  for (int i = 0; i < count; ++i) out.push_back(start + width * i);
  return out;
}

MetricsRegistry::Series& MetricsRegistry::series(std::string_view name, std::string_view help, Type type,
                                                 const MetricLabels& labels,
                                                 const std::vector<double>* upper_bounds) {
  BATON_CHECK(valid_metric_name(name), "metric names match [a-zA-Z_:][a-zA-Z0-9_:]*");
  for (const auto& label : labels) {
    BATON_CHECK(valid_label_name(label.first), "label names match [a-zA-Z_][a-zA-Z0-9_]* without a leading __");
    BATON_CHECK(type != Type::kHistogram || label.first != "le", "\"le\" is the histogram bucket label");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) {
    Family family{type, std::string(help), {}, {}, {}};
    if (upper_bounds != nullptr) family.upper_bounds = *upper_bounds;
    it = families_.emplace(std::string(name), std::move(family)).first;
  }
  Family& family = it->second;
  BATON_CHECK(family.type == type, "one metric name, one type");
  BATON_CHECK(family.help == help, "one metric name, one help text");
  BATON_CHECK(upper_bounds == nullptr || family.upper_bounds == *upper_bounds,
              "one histogram name, one bucket layout");
  const std::string key = label_text(labels);
  auto found = family.by_labels.find(key);
  if (found != family.by_labels.end()) return *found->second;
  auto created = std::make_unique<Series>();
  created->labels = labels;
  switch (type) {
    case Type::kCounter: created->counter = std::make_unique<Counter>(); break;
    case Type::kGauge: created->gauge = std::make_unique<Gauge>(); break;
    case Type::kHistogram: created->histogram = std::make_unique<Histogram>(family.upper_bounds); break;
  }
  Series& out = *created;
  family.by_labels.emplace(key, created.get());
  family.series.push_back(std::move(created));
  return out;
}

Counter& MetricsRegistry::counter(std::string_view name, std::string_view help, const MetricLabels& labels) {
  return *series(name, help, Type::kCounter, labels, nullptr).counter;
}

Gauge& MetricsRegistry::gauge(std::string_view name, std::string_view help, const MetricLabels& labels) {
  return *series(name, help, Type::kGauge, labels, nullptr).gauge;
}

Histogram& MetricsRegistry::histogram(std::string_view name, std::string_view help,
                                      const std::vector<double>& upper_bounds, const MetricLabels& labels) {
  return *series(name, help, Type::kHistogram, labels, &upper_bounds).histogram;
}

void MetricsRegistry::add_collector(std::function<void()> collect) {
  std::lock_guard<std::mutex> lock(collect_mu_);
  collectors_.push_back(std::move(collect));
}

std::string MetricsRegistry::render() {
  {
    std::lock_guard<std::mutex> lock(collect_mu_);
    for (const auto& collect : collectors_) collect();
  }
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, family] : families_) {
    out += "# HELP " + name + " " + escape(family.help, false) + "\n";
    const char* type_name = family.type == Type::kCounter ? "counter"
                            : family.type == Type::kGauge ? "gauge"
                                                          : "histogram";
    out += "# TYPE " + name + " " + type_name + "\n";
    for (const auto& series : family.series) {
      switch (family.type) {
        case Type::kCounter:
          out += name + label_text(series->labels) + " " + format_metric_value(series->counter->value()) + "\n";
          break;
        case Type::kGauge:
          out += name + label_text(series->labels) + " " + format_metric_value(series->gauge->value()) + "\n";
          break;
        case Type::kHistogram: {
          const Histogram::Snapshot snap = series->histogram->snapshot();
          const std::vector<double>& bounds = series->histogram->upper_bounds();
          for (size_t i = 0; i <= bounds.size(); ++i) {
            const std::string le = i < bounds.size() ? format_metric_value(bounds[i]) : "+Inf";
            out += name + "_bucket" + label_text(series->labels, "le", le) + " " +
                   std::to_string(snap.cumulative_counts[i]) + "\n";
          }
          out += name + "_sum" + label_text(series->labels) + " " + format_metric_value(snap.sum) + "\n";
          out += name + "_count" + label_text(series->labels) + " " + std::to_string(snap.count) + "\n";
          break;
        }
      }
    }
  }
  return out;
}

}  // namespace baton
