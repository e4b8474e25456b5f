// MetricsRegistry: a small thread-safe Prometheus registry (counters and
// gauges with labels, histograms with fixed buckets) and its text exposition
// format 0.0.4, served as GET /metrics by both programs
// (edge_decode/http/http_front_end.h, common/util/metrics_http.h).
//
// Handles (Counter&, Gauge&, Histogram&) stay valid as long as the registry;
// asking again for the same name and labels returns the same handle, so a
// hot path keeps the reference and updates it lock-free (counters and gauges
// are atomics; a histogram takes a short mutex). Registering one name with
// two types, two help texts or two bucket layouts is a programming error
// (BATON_CHECK), as are invalid metric or label names and negative counter
// increments.
//
// Pull-style figures (a queue length read from a service at scrape time) go
// through add_collector(): each collector runs before every render().
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace baton {

// (label name, label value) pairs in the order they are printed.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// A monotonically increasing total (e.g. requests, bytes).
class Counter {
 public:
  void inc(double delta = 1);       // delta >= 0
  // Pull-style: the total is kept elsewhere (e.g. a cache's hit count); the
  // counter moves up to it and never down.
  void advance_to(double total);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down (e.g. bytes in use, queue length).
class Gauge {
 public:
  void set(double value) { value_.store(value, std::memory_order_relaxed); }
  void add(double delta) { value_.fetch_add(delta, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted into fixed buckets (upper bounds, ascending; +Inf is
// implicit), plus their sum and count.
class Histogram {
 public:
  struct Snapshot {
    std::vector<uint64_t> cumulative_counts;  // [upper_bounds.size() + 1]; the last is +Inf (= count)
    double sum = 0;
    uint64_t count = 0;
  };

  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  Snapshot snapshot() const;
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }

 private:
  const std::vector<double> upper_bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> bucket_counts_;  // [upper_bounds.size() + 1], not cumulative
  double sum_ = 0;
  uint64_t count_ = 0;
};

// `count` bounds: start, start * factor, ... (start > 0, factor > 1).
std::vector<double> exponential_buckets(double start, double factor, int count);
// `count` bounds: start, start + width, ... (width > 0).
std::vector<double> linear_buckets(double start, double width, int count);

class MetricsRegistry {
 public:
  // Content-Type of render()'s output.
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Name: [a-zA-Z_:][a-zA-Z0-9_:]*; counters should end in "_total" (not
  // enforced). Label names: [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__";
  // "le" is reserved for histogram buckets.
  Counter& counter(std::string_view name, std::string_view help, const MetricLabels& labels = {});
  Gauge& gauge(std::string_view name, std::string_view help, const MetricLabels& labels = {});
  Histogram& histogram(std::string_view name, std::string_view help, const std::vector<double>& upper_bounds,
                       const MetricLabels& labels = {});

  // Runs `collect` (which may update this registry's metrics) before every
  // render(). Collectors run one scrape at a time, in the order added.
  void add_collector(std::function<void()> collect);

  // Text exposition format 0.0.4: families sorted by name, each with its
  // # HELP and # TYPE lines, then its series in the order created.
  std::string render();

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    MetricLabels labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct Family {
    Type type;
    std::string help;
    std::vector<double> upper_bounds;          // histograms only
    std::vector<std::unique_ptr<Series>> series;  // creation order
    std::map<std::string, Series*> by_labels;     // key: canonical label text
  };

  Series& series(std::string_view name, std::string_view help, Type type, const MetricLabels& labels,
                 const std::vector<double>* upper_bounds);

  std::mutex collect_mu_;  // held while collectors run (one scrape at a time)
  std::vector<std::function<void()>> collectors_;
  std::mutex mu_;          // guards families_
  std::map<std::string, Family, std::less<>> families_;
};

// Prometheus number text: shortest round-trip decimal, "+Inf", "-Inf", "NaN".
std::string format_metric_value(double value);

}  // namespace baton
