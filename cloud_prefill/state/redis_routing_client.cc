// RedisRoutingClient: the RedisClient behind make_redis_client(). It finds
// out whether the seeds are one server or a cluster (CLUSTER SLOTS), routes
// each command to the node owning its key's slot, and follows MOVED / ASK
// redirects; the connections, their pooling and each node's backoff are
// RedisNode's.
#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cloud_prefill/state/redis_client.h"
#include "cloud_prefill/state/redis_node.h"

namespace baton {
namespace {

constexpr int kSlots = 16384;
constexpr auto kStaleMapRefreshInterval = std::chrono::seconds(1);

struct Redirect {
  bool ask = false;
  int slot = 0;
  RedisEndpoint target;
};

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381"; nullopt for any other error.
std::optional<Redirect> parse_redirect(std::string_view error) {
  Redirect redirect;
  if (error.starts_with("ASK ")) {
    redirect.ask = true;
    error.remove_prefix(4);
  } else if (error.starts_with("MOVED ")) {
    error.remove_prefix(6);
  } else {
    return std::nullopt;
  }
  const size_t space = error.find(' ');
  const size_t colon = error.rfind(':');
  if (space == std::string_view::npos || colon == std::string_view::npos || colon < space ||
      !absl::SimpleAtoi(av(error.substr(0, space)), &redirect.slot) || redirect.slot < 0 || redirect.slot >= kSlots ||
      !absl::SimpleAtoi(av(error.substr(colon + 1)), &redirect.target.port)) {
    return std::nullopt;
  }
  redirect.target.host = std::string(error.substr(space + 1, colon - space - 1));
  return redirect;
}

// An error reply as a status: credentials problems are PERMISSION_DENIED,
// the rest INTERNAL with the server's text.
absl::Status error_reply_status(const RedisNode& node, std::string_view command, std::string_view error) {
  const std::string message = absl::StrCat("redis ", node.name(), " answered ", av(command), " with error: ", av(error));
  if (error.starts_with("NOAUTH") || error.starts_with("WRONGPASS") || error.starts_with("NOPERM")) {
    return absl::PermissionDeniedError(message);
  }
  return absl::InternalError(message);
}

class RedisRoutingClient final : public RedisClient {
 public:
  RedisRoutingClient(RedisOptions options, std::shared_ptr<RedisTlsContext> tls)
      : options_(std::move(options)), tls_(std::move(tls)) {
    for (const RedisEndpoint& seed : options_.seeds) seeds_.push_back(node_for_endpoint(seed));
  }

  absl::StatusOr<RedisReply> command(std::string_view key, std::span<const std::string_view> argv) override {
    commands_.fetch_add(1, std::memory_order_relaxed);
    absl::StatusOr<RedisReply> reply = absl::InvalidArgumentError("redis command without a name");
    if (!argv.empty()) reply = route_and_run(key, argv);
    if (!reply.ok()) {
      errors_.fetch_add(1, std::memory_order_relaxed);
      std::lock_guard<std::mutex> lock(mu_);
      last_error_ = std::string(reply.status().message());
    }
    return reply;
  }

  bool healthy() const override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::shared_ptr<RedisNode>& node : serving_nodes()) {
      if (node->down()) return false;
    }
    return true;
  }

  RedisClientStats stats() const override {
    RedisClientStats stats;
    std::lock_guard<std::mutex> lock(mu_);
    stats.cluster = cluster_;
    const std::vector<std::shared_ptr<RedisNode>> serving = serving_nodes();
    stats.nodes = static_cast<int>(serving.size());
    for (const std::shared_ptr<RedisNode>& node : serving) stats.nodes_down += node->down() ? 1 : 0;
    stats.commands = commands_.load(std::memory_order_relaxed);
    stats.errors = errors_.load(std::memory_order_relaxed);
    stats.redirects = redirects_.load(std::memory_order_relaxed);
    stats.reconnects = reconnects_.load(std::memory_order_relaxed);
    stats.last_error = last_error_;
    return stats;
  }

 private:
  absl::StatusOr<RedisReply> route_and_run(std::string_view key, std::span<const std::string_view> argv);
  absl::Status ensure_topology();
  // Asks `first` (then every known node) for CLUSTER SLOTS and installs the map.
  absl::Status refresh_slots(const std::shared_ptr<RedisNode>& first);
  absl::Status install_slots(const RedisNode& from, const RedisReply& reply);
  std::shared_ptr<RedisNode> node_for_key(std::string_view key);
  // The nodes commands go to: the seeds before the first contact, the one
  // server, or the cluster's slot owners (a dead seed or a node that owns no
  // slot any more does not make the tier unhealthy). Needs mu_.
  std::vector<std::shared_ptr<RedisNode>> serving_nodes() const;
  // Cluster: after a node failed, reread the slot map (a replica may have
  // taken over), at most once per kStaleMapRefreshInterval.
  void refresh_if_stale();
  std::shared_ptr<RedisNode> node_for_endpoint(const RedisEndpoint& endpoint);

  const RedisOptions options_;
  const std::shared_ptr<RedisTlsContext> tls_;
  std::vector<std::shared_ptr<RedisNode>> seeds_;
  std::mutex discover_mu_;  // one discovery at a time (first use, or after a failed one)

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<RedisNode>> nodes_;  // guarded by mu_; by "host:port"
  bool topology_known_ = false;                               // guarded by mu_
  bool cluster_ = false;                                      // guarded by mu_
  std::shared_ptr<RedisNode> single_;                         // guarded by mu_; not a cluster
  std::vector<std::shared_ptr<RedisNode>> slots_;             // guarded by mu_; cluster: [kSlots], null = unowned
  std::vector<std::shared_ptr<RedisNode>> owners_;            // guarded by mu_; cluster: distinct slots_ entries
  bool slots_stale_ = false;                                  // guarded by mu_; a node failed since the last map
  RedisClock::time_point last_refresh_{};                     // guarded by mu_
  std::string last_error_;                                    // guarded by mu_

  std::atomic<uint64_t> commands_{0}, errors_{0}, redirects_{0}, reconnects_{0};
};

absl::StatusOr<RedisReply> RedisRoutingClient::route_and_run(std::string_view key,
                                                             std::span<const std::string_view> argv) {
  if (absl::Status status = ensure_topology(); !status.ok()) return status;
  refresh_if_stale();
  std::shared_ptr<RedisNode> node = node_for_key(key);
  if (node == nullptr) {
    // A slot nobody owns in our map: the cluster changed; ask again once.
    (void)refresh_slots(nullptr);
    node = node_for_key(key);
    if (node == nullptr) {
      return absl::UnavailableError(absl::StrCat("no redis cluster node serves slot ", redis_key_slot(key)));
    }
  }
  bool asking = false;
  for (int redirects = 0;; ++redirects) {
    absl::StatusOr<RedisConnectionReply> reply = node->run(argv, asking);
    if (!reply.ok()) {
      if (node->down()) {
        std::lock_guard<std::mutex> lock(mu_);
        slots_stale_ = cluster_;
      }
      return reply.status();
    }
    if (!reply->is_error) return std::move(reply->reply);
    const std::optional<Redirect> redirect = parse_redirect(reply->error);
    if (!redirect.has_value()) return error_reply_status(*node, argv[0], reply->error);
    if (redirects >= options_.max_redirects) {
      return absl::UnavailableError(absl::StrCat("redis ", av(argv[0]), " still redirected after ", redirects,
                                                 " redirects (max_redirects); last: ", reply->error));
    }
    redirects_.fetch_add(1, std::memory_order_relaxed);
    node = node_for_endpoint(redirect->target);
    asking = redirect->ask;
    if (!redirect->ask) {
      // MOVED: the slot has a new owner for good; so may others (a
      // resharding moves ranges), so reread the whole map.
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (cluster_) {
          slots_[redirect->slot] = node;
          if (std::find(owners_.begin(), owners_.end(), node) == owners_.end()) owners_.push_back(node);
        }
      }
      (void)refresh_slots(node);
    }
  }
}

absl::Status RedisRoutingClient::ensure_topology() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (topology_known_) return absl::OkStatus();
  }
  std::lock_guard<std::mutex> discover_lock(discover_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (topology_known_) return absl::OkStatus();
  }
  absl::Status last = absl::InvalidArgumentError("redis options have no seed endpoint");
  const std::string_view argv[] = {"CLUSTER", "SLOTS"};
  for (const std::shared_ptr<RedisNode>& seed : seeds_) {
    absl::StatusOr<RedisConnectionReply> reply = seed->run(argv, /*asking=*/false);
    if (!reply.ok()) {
      last = reply.status();
      continue;
    }
    if (reply->is_error) {
      if (reply->error.find("cluster support disabled") != std::string::npos) {
        std::lock_guard<std::mutex> lock(mu_);
        single_ = seed;
        topology_known_ = true;
        return absl::OkStatus();
      }
      last = error_reply_status(*seed, "CLUSTER SLOTS", reply->error);
      continue;
    }
    last = install_slots(*seed, reply->reply);
    if (last.ok()) return last;
  }
  return last;
}

absl::Status RedisRoutingClient::refresh_slots(const std::shared_ptr<RedisNode>& first) {
  std::vector<std::shared_ptr<RedisNode>> candidates;
  if (first != nullptr) candidates.push_back(first);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cluster_) return absl::OkStatus();
    for (const auto& [name, node] : nodes_) {
      if (node != first) candidates.push_back(node);
    }
  }
  absl::Status last = absl::UnavailableError("no redis cluster node to ask for CLUSTER SLOTS");
  const std::string_view argv[] = {"CLUSTER", "SLOTS"};
  for (const std::shared_ptr<RedisNode>& node : candidates) {
    if (node->down()) continue;
    absl::StatusOr<RedisConnectionReply> reply = node->run(argv, /*asking=*/false);
    if (!reply.ok()) {
      last = reply.status();
    } else if (reply->is_error) {
      last = error_reply_status(*node, "CLUSTER SLOTS", reply->error);
    } else if (last = install_slots(*node, reply->reply); last.ok()) {
      return last;
    }
  }
  return last;
}

// CLUSTER SLOTS: [[first, last, [host, port, id, ...], replicas...], ...].
absl::Status RedisRoutingClient::install_slots(const RedisNode& from, const RedisReply& reply) {
  const auto malformed = [&](std::string_view why) {
    return absl::InternalError(absl::StrCat("malformed CLUSTER SLOTS reply from redis ", from.name(), ": ", av(why)));
  };
  if (reply.type != RedisReply::Type::kArray) return malformed("not an array");
  std::vector<std::shared_ptr<RedisNode>> slots(kSlots);
  for (const RedisReply& range : reply.elements) {
    if (range.type != RedisReply::Type::kArray || range.elements.size() < 3 ||
        range.elements[0].type != RedisReply::Type::kInteger || range.elements[1].type != RedisReply::Type::kInteger ||
        range.elements[2].type != RedisReply::Type::kArray || range.elements[2].elements.size() < 2) {
      return malformed("a range is not [first, last, [host, port, ...], ...]");
    }
    const int64_t first = range.elements[0].integer, last = range.elements[1].integer;
    if (first < 0 || last >= kSlots || first > last) return malformed(absl::StrCat("range ", first, "..", last));
    const RedisReply& master = range.elements[2];
    RedisEndpoint endpoint;
    endpoint.host = master.elements[0].str;
    // An unknown endpoint ("" or "?") is the address we reached the node by.
    if (endpoint.host.empty() || endpoint.host == "?") endpoint.host = from.endpoint().host;
    endpoint.port = static_cast<int>(master.elements[1].integer);
    std::shared_ptr<RedisNode> node = node_for_endpoint(endpoint);
    for (int64_t slot = first; slot <= last; ++slot) slots[slot] = node;
  }
  std::vector<std::shared_ptr<RedisNode>> owners;
  for (const std::shared_ptr<RedisNode>& node : slots) {
    if (node != nullptr && std::find(owners.begin(), owners.end(), node) == owners.end()) owners.push_back(node);
  }
  std::lock_guard<std::mutex> lock(mu_);
  slots_ = std::move(slots);
  owners_ = std::move(owners);
  cluster_ = true;
  topology_known_ = true;
  slots_stale_ = false;
  return absl::OkStatus();
}

std::vector<std::shared_ptr<RedisNode>> RedisRoutingClient::serving_nodes() const {
  if (!topology_known_) return seeds_;
  if (!cluster_) return {single_};
  return owners_;
}

void RedisRoutingClient::refresh_if_stale() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const RedisClock::time_point now = RedisClock::now();
    if (!slots_stale_ || now - last_refresh_ < kStaleMapRefreshInterval) return;
    last_refresh_ = now;
  }
  (void)refresh_slots(nullptr);
}

std::shared_ptr<RedisNode> RedisRoutingClient::node_for_key(std::string_view key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!cluster_) return single_;
  return slots_[redis_key_slot(key)];
}

std::shared_ptr<RedisNode> RedisRoutingClient::node_for_endpoint(const RedisEndpoint& endpoint) {
  const std::string name = absl::StrCat(endpoint.host, ":", endpoint.port);
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<RedisNode>& node = nodes_[name];
  if (node == nullptr) node = std::make_shared<RedisNode>(endpoint, options_, tls_, &reconnects_);
  return node;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedisClient>> make_redis_client(RedisOptions options) {
  if (options.seeds.empty()) return absl::InvalidArgumentError("redis options name no server (seeds is empty)");
  if (options.io_timeout.count() <= 0 || options.connect_timeout.count() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("redis timeouts must be positive: connect ",
                                                   options.connect_timeout.count(), " ms, io ",
                                                   options.io_timeout.count(), " ms"));
  }
  if (options.backoff_initial.count() <= 0 || options.backoff_max < options.backoff_initial) {
    return absl::InvalidArgumentError(absl::StrCat("redis backoff must be 0 < initial <= max: initial ",
                                                   options.backoff_initial.count(), " ms, max ",
                                                   options.backoff_max.count(), " ms"));
  }
  if (options.max_reply_bytes == 0 || options.max_redirects < 0 || options.max_idle_connections_per_node < 0) {
    return absl::InvalidArgumentError("redis max_reply_bytes must be > 0, max_redirects and idle connections >= 0");
  }
  std::shared_ptr<RedisTlsContext> tls;
  if (options.tls) {
    absl::StatusOr<std::shared_ptr<RedisTlsContext>> context = RedisTlsContext::create(options);
    if (!context.ok()) return context.status();
    tls = *std::move(context);
  }
  return std::unique_ptr<RedisClient>(new RedisRoutingClient(std::move(options), std::move(tls)));
}

}  // namespace baton
