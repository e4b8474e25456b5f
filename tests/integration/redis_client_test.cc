// RedisClient against real redis-server processes on loopback (the
// fixtures of tests/support/redis_server.h): round trips, AUTH, TLS, the
// reply cap, timeouts, a killed and restarted server, and a 3-node cluster
// with a slot migrated under the client (ASK, then MOVED). Each test skips,
// with the fixture's message, only where redis-server cannot run.
#include "cloud_prefill/state/redis_client.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <chrono>
#include <algorithm>
#include <map>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/support/redis_server.h"
#include "tests/support/test_certs.h"
#include "tests/support/test_models.h"

namespace baton {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
using testing::RedisServer;
using testing::RedisServerOptions;
using testing::RedisTestCluster;

std::unique_ptr<RedisClient> client_for(const RedisOptions& options) {
  absl::StatusOr<std::unique_ptr<RedisClient>> client = make_redis_client(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

TEST(RedisClientServer, RoundTripsAreBinarySafe) {
  auto server = RedisServer::start();
  BATON_REDIS_OR_SKIP(server);
  std::unique_ptr<RedisClient> client = client_for((*server)->client_options());
  ASSERT_NE(client, nullptr);

  const std::string key("bin\0key", 7);
  const std::string value("a\0b\r\n$-1\r\n\0", 11);
  ASSERT_TRUE(client->set(key, value).value());
  EXPECT_EQ(client->get(key).value(), std::optional<std::string>(value));

  std::string big(8 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  ASSERT_TRUE(client->set("big", big).value());
  EXPECT_TRUE(client->get("big").value() == big);

  EXPECT_EQ(client->get("absent").value(), std::nullopt);
  EXPECT_TRUE(client->del(key).value());
  EXPECT_FALSE(client->del(key).value());
  EXPECT_EQ(client->get(key).value(), std::nullopt);

  EXPECT_EQ(client->incr_by("counter", 5).value(), 5);
  EXPECT_EQ(client->incr_by("counter", -7).value(), -2);
  EXPECT_TRUE(absl::IsInternal(client->incr_by("big", 1).status()));  // not an integer: the server's error

  // NX: only the first set wins.
  EXPECT_TRUE(client->set("once", "first", milliseconds(0), /*only_if_absent=*/true).value());
  EXPECT_FALSE(client->set("once", "second", milliseconds(0), /*only_if_absent=*/true).value());
  EXPECT_EQ(client->get("once").value(), std::optional<std::string>("first"));

  // TTL: PX is set and the key expires.
  ASSERT_TRUE(client->set("short", "lived", milliseconds(150)).value());
  const std::string_view pttl[] = {"PTTL", "short"};
  absl::StatusOr<RedisReply> left = client->command("short", pttl);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_GT(left->integer, 0);
  EXPECT_LE(left->integer, 150);
  std::this_thread::sleep_for(milliseconds(250));
  EXPECT_EQ(client->get("short").value(), std::nullopt);

  // What redis-cli sees is what we wrote.
  EXPECT_EQ(trimmed((*server)->cli({"GET", "once"}).value()), "first");
  const RedisClientStats stats = client->stats();
  EXPECT_FALSE(stats.cluster);
  EXPECT_EQ(stats.nodes, 1);
  EXPECT_EQ(stats.errors, 1u);  // the INCRBY on a non-integer
  EXPECT_EQ(stats.reconnects, 0u);  // one pooled connection served every call, error reply included
  EXPECT_TRUE(client->healthy());
}

TEST(RedisClientServer, ConcurrentCallersShareThePool) {
  auto server = RedisServer::start();
  BATON_REDIS_OR_SKIP(server);
  std::unique_ptr<RedisClient> client = client_for((*server)->client_options());
  ASSERT_NE(client, nullptr);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) failures += client->incr_by("shared", 1).ok() ? 0 : 1;
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(client->get("shared").value(), std::optional<std::string>("1600"));
  // The pool keeps at most max_idle_connections_per_node (4) open once idle;
  // the fifth client counted is redis-cli asking.
  const std::string info = (*server)->cli({"INFO", "clients"}).value();
  const size_t at = info.find("connected_clients:");
  ASSERT_NE(at, std::string::npos) << info;
  int connected = 0;
  ASSERT_TRUE(absl::SimpleAtoi(trimmed(info.substr(at + 18, info.find('\n', at) - at - 18)), &connected)) << info;
  EXPECT_LE(connected, 5) << info;
}

TEST(RedisClientServer, AuthWithTheRightPasswordOnly) {
  RedisServerOptions options;
  options.password = "s3cret-pass";
  auto server = RedisServer::start(options);
  BATON_REDIS_OR_SKIP(server);
  std::unique_ptr<RedisClient> client = client_for((*server)->client_options());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->set("k", "v").ok());
  EXPECT_EQ(client->get("k").value(), std::optional<std::string>("v"));

  RedisOptions wrong = (*server)->client_options();
  wrong.password = "not-it";
  absl::Status refused = client_for(wrong)->get("k").status();
  EXPECT_TRUE(absl::IsPermissionDenied(refused)) << refused;
  EXPECT_NE(refused.message().find("refused AUTH"), std::string_view::npos) << refused;
  EXPECT_NE(refused.message().find("WRONGPASS"), std::string_view::npos) << refused;

  RedisOptions none = (*server)->client_options();
  none.password.clear();
  absl::Status unauthenticated = client_for(none)->get("k").status();
  EXPECT_TRUE(absl::IsPermissionDenied(unauthenticated)) << unauthenticated;
  EXPECT_NE(unauthenticated.message().find("NOAUTH"), std::string_view::npos) << unauthenticated;
}

TEST(RedisClientServer, TlsRoundTripAndAWrongCaFails) {
  RedisServerOptions options;
  options.tls = true;
  auto server = RedisServer::start(options);
  BATON_REDIS_OR_SKIP(server);
  std::unique_ptr<RedisClient> client = client_for((*server)->client_options());
  ASSERT_NE(client, nullptr);
  const std::string value(300 * 1024, 'x');  // several TLS records each way
  ASSERT_TRUE(client->set("tls-key", value).value());
  EXPECT_TRUE(client->get("tls-key").value() == value);

  RedisOptions stranger = (*server)->client_options();
  stranger.tls_ca_file = testing::test_pki().stranger.cert;
  absl::Status untrusted = client_for(stranger)->get("tls-key").status();
  EXPECT_TRUE(absl::IsUnavailable(untrusted)) << untrusted;
  EXPECT_NE(untrusted.message().find("certificate"), std::string_view::npos) << untrusted;

  RedisOptions plain = (*server)->client_options();
  plain.tls = false;  // a plain client on a TLS port: no reply it can read, within io_timeout
  plain.io_timeout = milliseconds(300);
  EXPECT_FALSE(client_for(plain)->get("tls-key").ok());
}

TEST(RedisClientServer, TlsChecksTheServerNameAgainstItsCertificate) {
  // A certificate the client trusts, but for another name only.
  const std::string dir = testing::make_temp_dir("redis-tls-name");
  const std::string cert = dir + "/other-cert.pem", key = dir + "/other-key.pem";
  ASSERT_EQ(std::system(("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=other.example -addext "
                         "subjectAltName=DNS:other.example -keyout " + key + " -out " + cert + " > /dev/null 2>&1")
                            .c_str()),
            0);
  RedisServerOptions options;
  options.tls = true;
  options.tls_cert_file = cert;
  options.tls_key_file = key;
  // redis-cli checks no name, so the fixture's PING works; our client must refuse.
  auto server = RedisServer::start(options);
  BATON_REDIS_OR_SKIP(server);
  absl::Status mismatch = client_for((*server)->client_options())->get("k").status();
  EXPECT_TRUE(absl::IsUnavailable(mismatch)) << mismatch;
  EXPECT_NE(mismatch.message().find("mismatch"), std::string_view::npos) << mismatch;

  // The default certificate names 127.0.0.1 and localhost: by name works too (SNI + DNS check).
  RedisServerOptions default_options;
  default_options.tls = true;
  auto named = RedisServer::start(default_options);
  BATON_REDIS_OR_SKIP(named);
  RedisOptions by_name = (*named)->client_options();
  by_name.seeds = {{"localhost", (*named)->port()}};
  absl::Status by_name_status = client_for(by_name)->set("k", "v").status();
  EXPECT_TRUE(by_name_status.ok()) << by_name_status;
  std::filesystem::remove_all(dir);
}

TEST(RedisClientServer, AFullServerEvictsLeastRecentlyUsedKeys) {
  RedisServerOptions options;
  options.maxmemory_bytes = 4 << 20;
  auto server = RedisServer::start(options);
  BATON_REDIS_OR_SKIP(server);
  std::unique_ptr<RedisClient> client = client_for((*server)->client_options());
  ASSERT_NE(client, nullptr);
  // 16 MiB into a 4 MiB server: every write succeeds, the oldest keys go.
  const std::string value(64 << 10, 'v');
  for (int i = 0; i < 256; ++i) ASSERT_TRUE(client->set(absl::StrCat("block:", i), value).ok()) << i;
  EXPECT_EQ(client->get("block:0").value(), std::nullopt);
  EXPECT_EQ(client->get("block:255").value(), std::optional<std::string>(value));
  EXPECT_NE((*server)->cli({"CONFIG", "GET", "maxmemory-policy"}).value().find("allkeys-lru"), std::string::npos);
}

TEST(RedisClientServer, TlsWithAClientCertificate) {
  RedisServerOptions options;
  options.tls = true;
  options.tls_auth_clients = true;
  options.password = "pw";
  auto server = RedisServer::start(options);
  BATON_REDIS_OR_SKIP(server);
  std::unique_ptr<RedisClient> client = client_for((*server)->client_options());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->set("mtls", "yes").ok());
  EXPECT_EQ(client->get("mtls").value(), std::optional<std::string>("yes"));

  RedisOptions anonymous = (*server)->client_options();
  anonymous.tls_cert_file.clear();
  anonymous.tls_key_file.clear();
  EXPECT_TRUE(absl::IsUnavailable(client_for(anonymous)->get("mtls").status()));
}

TEST(RedisClientServer, AReplyOverTheCapIsResourceExhaustedAndTheClientGoesOn) {
  auto server = RedisServer::start();
  BATON_REDIS_OR_SKIP(server);
  RedisOptions options = (*server)->client_options();
  options.max_reply_bytes = 1 << 20;
  std::unique_ptr<RedisClient> client = client_for(options);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->set("huge", std::string(4 << 20, 'h')).value());  // the SET's reply is small
  ASSERT_TRUE(client->set("small", "fits").value());
  absl::Status capped = client->get("huge").status();
  EXPECT_TRUE(absl::IsResourceExhausted(capped)) << capped;
  EXPECT_NE(capped.message().find("max_reply_bytes"), std::string_view::npos) << capped;
  // The connection was dropped, not the node: the next call works at once.
  EXPECT_TRUE(client->healthy());
  EXPECT_EQ(client->get("small").value(), std::optional<std::string>("fits"));
  // Just under the cap still reads.
  ASSERT_TRUE(client->set("edge", std::string((1 << 20) - 64, 'e')).value());
  EXPECT_TRUE(client->get("edge").ok());
}

// A server that hangs up while we are still writing (Redis drops a client
// whose bulk exceeds proto-max-bulk-len): an error of the call, never a
// SIGPIPE that kills the process; plain TCP and TLS alike.
TEST(RedisClientServer, AHangUpMidWriteIsAnErrorNotASignal) {
  for (const bool tls : {false, true}) {
    SCOPED_TRACE(tls ? "tls" : "plain");
    RedisServerOptions server_options;
    server_options.tls = tls;
    server_options.extra_config = {"proto-max-bulk-len 1mb"};
    auto server = RedisServer::start(server_options);
    BATON_REDIS_OR_SKIP(server);
    std::unique_ptr<RedisClient> client = client_for((*server)->client_options());
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->set("before", "ok").ok());
    EXPECT_FALSE(client->set("too-big", std::string(64 << 20, 'z')).ok());
    std::this_thread::sleep_for(milliseconds(100));  // past the backoff, if the hang-up counted as a failure
    EXPECT_EQ(client->get("before").value(), std::optional<std::string>("ok"));
  }
}

// A listener that accepts (the kernel's backlog does) and never answers.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&address), length), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
  }
  ~SilentListener() { ::close(fd_); }
  int port() const { return port_; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A hostile "server": answers every connection's first command with
// `reply` and then keeps the connection open.
class ScriptedServer {
 public:
  explicit ScriptedServer(std::string reply) : reply_(std::move(reply)) {
    thread_ = std::thread([this] { serve(); });
  }
  ~ScriptedServer() {
    stop_ = true;
    thread_.join();
  }
  int port() const { return listener_.port(); }

 private:
  void serve() {
    std::vector<int> connections;
    while (!stop_) {
      pollfd entry{listener_.fd(), POLLIN, 0};
      if (::poll(&entry, 1, 20) <= 0) continue;
      const int fd = ::accept(listener_.fd(), nullptr, nullptr);
      if (fd < 0) continue;
      char request[4096];
      (void)::recv(fd, request, sizeof request, 0);
      (void)::send(fd, reply_.data(), reply_.size(), MSG_NOSIGNAL);
      connections.push_back(fd);
    }
    for (int fd : connections) ::close(fd);
  }

  SilentListener listener_;
  const std::string reply_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(RedisClientServer, AHostileArrayHeaderIsRefusedBeforeAllocation) {
  // Two billion elements announced in 13 bytes: hiredis would allocate a
  // 16 GB element table for it; the cap refuses it at the header.
  ScriptedServer hostile("*2000000000\r\n");
  RedisOptions options;
  options.seeds = {{"127.0.0.1", hostile.port()}};
  std::unique_ptr<RedisClient> client = client_for(options);
  ASSERT_NE(client, nullptr);
  const std::string_view argv[] = {"PING"};
  absl::Status status = client->command("", argv).status();
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_NE(status.message().find("array"), std::string_view::npos) << status;
}

TEST(RedisClientTimeouts, ASilentServerIsDeadlineExceededWithinIoTimeout) {
  SilentListener listener;
  RedisOptions options;
  options.seeds = {{"127.0.0.1", listener.port()}};
  options.io_timeout = milliseconds(200);
  std::unique_ptr<RedisClient> client = client_for(options);
  ASSERT_NE(client, nullptr);
  const auto start = steady_clock::now();
  absl::Status status = client->get("k").status();
  const auto elapsed = steady_clock::now() - start;
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
  EXPECT_GE(elapsed, milliseconds(190));
  EXPECT_LT(elapsed, milliseconds(700));
  EXPECT_FALSE(client->healthy());
}

TEST(RedisClientTimeouts, ASleepingServerTimesOutThenServesAgain) {
  RedisServerOptions server_options;
  server_options.enable_debug_command = true;
  auto server = RedisServer::start(server_options);
  BATON_REDIS_OR_SKIP(server);
  RedisOptions options = (*server)->client_options();
  options.io_timeout = milliseconds(200);
  std::unique_ptr<RedisClient> client = client_for(options);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->set("k", "v").ok());
  const std::string_view sleep[] = {"DEBUG", "SLEEP", "1"};
  const auto start = steady_clock::now();
  absl::Status status = client->command("", sleep).status();
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
  EXPECT_LT(steady_clock::now() - start, milliseconds(700));
  EXPECT_FALSE(client->healthy());
  std::this_thread::sleep_for(milliseconds(1200));  // the server wakes; the backoff (50 ms) is over
  EXPECT_EQ(client->get("k").value(), std::optional<std::string>("v"));
  EXPECT_TRUE(client->healthy());
}

TEST(RedisClientServer, AKilledServerFailsFastAndARestartedOneServesAgain) {
  auto server = RedisServer::start();
  BATON_REDIS_OR_SKIP(server);
  std::unique_ptr<RedisClient> client = client_for((*server)->client_options());  // backoff 50..400 ms
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->set("durable", "kept").value());
  ASSERT_TRUE((*server)->kill().ok());

  absl::Status first = client->get("durable").status();
  EXPECT_TRUE(absl::IsUnavailable(first)) << first;
  EXPECT_FALSE(client->healthy());
  const auto start = steady_clock::now();
  absl::Status during_backoff = client->get("durable").status();
  EXPECT_LT(steady_clock::now() - start, milliseconds(50));  // no connect attempt: at once
  EXPECT_TRUE(absl::IsUnavailable(during_backoff)) << during_backoff;
  EXPECT_NE(during_backoff.message().find("is down"), std::string_view::npos) << during_backoff;
  EXPECT_EQ(client->stats().nodes_down, 1);

  ASSERT_TRUE((*server)->restart().ok()) << (*server)->log_tail();
  // Calls succeed again once the backoff (at most backoff_max) has passed.
  const auto deadline = steady_clock::now() + milliseconds(2000);
  absl::StatusOr<std::optional<std::string>> value = client->get("durable");
  while (!value.ok() && steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
    value = client->get("durable");
  }
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, std::optional<std::string>("kept"));  // appendonly: the restart kept the key
  EXPECT_TRUE(client->healthy());
  const RedisClientStats stats = client->stats();
  EXPECT_EQ(stats.nodes_down, 0);
  EXPECT_GE(stats.reconnects, 1u);
}

// One 3-node cluster for the cluster tests (a cluster takes seconds to form).
class RedisClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto started = RedisTestCluster::start(3);
    if (started.ok()) {
      cluster_ = started->release();
    } else {
      start_error_ = new absl::Status(started.status());
    }
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    delete start_error_;
    start_error_ = nullptr;
  }
  void SetUp() override {
    absl::StatusOr<RedisTestCluster*> started =
        cluster_ != nullptr ? absl::StatusOr<RedisTestCluster*>(cluster_) : *start_error_;
    BATON_REDIS_OR_SKIP(started);
  }
  // The owner's port of every slot, from CLUSTER SLOTS as redis-cli prints
  // it (flattened: first, last, host, port, id, ... per range); -1: none.
  static std::vector<int> slot_owner_ports() {
    std::vector<int> owners(16384, -1);
    const std::vector<std::string> lines = absl::StrSplit(cluster_->node(0).cli({"CLUSTER", "SLOTS"}).value(), '\n');
    for (size_t i = 0; i + 3 < lines.size(); ++i) {
      int first, last, port;
      if (absl::SimpleAtoi(lines[i], &first) && absl::SimpleAtoi(lines[i + 1], &last) &&
          lines[i + 2] == "127.0.0.1" && absl::SimpleAtoi(lines[i + 3], &port) && 0 <= first && first <= last &&
          last < 16384) {
        std::fill(owners.begin() + first, owners.begin() + last + 1, port);
      }
    }
    return owners;
  }
  static int owner_port(int slot) { return slot_owner_ports()[slot]; }
  static int index_of_port(int port) {
    for (int i = 0; i < cluster_->size(); ++i) {
      if (cluster_->node(i).port() == port) return i;
    }
    return -1;
  }

  static RedisTestCluster* cluster_;
  static absl::Status* start_error_;
};
RedisTestCluster* RedisClusterTest::cluster_ = nullptr;
absl::Status* RedisClusterTest::start_error_ = nullptr;

TEST_F(RedisClusterTest, KeySlotsMatchClusterKeyslot) {
  for (const std::string key : {"foo", "bar", "somekey", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap",
                                "foo{bar}{zap}", "{}", "a{b", "tenant/7:pack/abc", "{tenant/7}block/00ff"}) {
    EXPECT_EQ(trimmed(cluster_->node(0).cli({"CLUSTER", "KEYSLOT", key}).value()),
              std::to_string(redis_key_slot(key)))
        << key;
  }
}

TEST_F(RedisClusterTest, AThousandKeysLandOnTheirSlotsOwners) {
  std::unique_ptr<RedisClient> client = client_for(cluster_->client_options());
  ASSERT_NE(client, nullptr);
  std::map<std::string, std::string> written;
  for (int i = 0; i < 1000; ++i) {
    const std::string key = absl::StrCat("spread:", i), value = absl::StrCat("value-", i * 7);
    ASSERT_TRUE(client->set(key, value).ok()) << key;
    written[key] = value;
  }
  for (const auto& [key, value] : written) EXPECT_EQ(client->get(key).value(), std::optional<std::string>(value));
  // Each node holds exactly the keys whose slots it owns.
  const std::vector<int> owners = slot_owner_ports();
  std::map<int, int> keys_per_port;
  for (int i = 0; i < 1000; ++i) ++keys_per_port[owners[redis_key_slot(absl::StrCat("spread:", i))]];
  for (int n = 0; n < cluster_->size(); ++n) {
    const std::string count = cluster_->node(n).cli({"EVAL", "return #redis.call('KEYS', 'spread:*')", "0"}).value();
    EXPECT_EQ(trimmed(count), std::to_string(keys_per_port[cluster_->node(n).port()])) << "node " << n;
  }
  EXPECT_EQ(keys_per_port.count(-1), 0u);
  // redis-cli -c agrees on a sample.
  for (int i = 0; i < 1000; i += 97) {
    EXPECT_EQ(trimmed(cluster_->cli({"GET", absl::StrCat("spread:", i)}).value()), absl::StrCat("value-", i * 7));
  }
  const RedisClientStats stats = client->stats();
  EXPECT_TRUE(stats.cluster);
  EXPECT_EQ(stats.nodes, 3);
  EXPECT_EQ(stats.redirects, 0u);  // the slot map routed every key right the first time
  EXPECT_EQ(stats.errors, 0u);
}

TEST_F(RedisClusterTest, AMigratingSlotIsFollowedThroughAskThenMoved) {
  std::unique_ptr<RedisClient> client = client_for(cluster_->client_options());
  ASSERT_NE(client, nullptr);
  const std::string old_key = "{migrant}old", new_key = "{migrant}new";
  const int slot = redis_key_slot(old_key);
  ASSERT_TRUE(client->set(old_key, "before").ok());  // also loads the slot map
  const int source = index_of_port(owner_port(slot));
  ASSERT_GE(source, 0);
  const int target = (source + 1) % cluster_->size();
  RedisServer& from = cluster_->node(source);
  RedisServer& to = cluster_->node(target);
  const std::string from_id = trimmed(from.cli({"CLUSTER", "MYID"}).value());
  const std::string to_id = trimmed(to.cli({"CLUSTER", "MYID"}).value());
  const std::string slot_text = std::to_string(slot);
  ASSERT_EQ(trimmed(to.cli({"CLUSTER", "SETSLOT", slot_text, "IMPORTING", from_id}).value()), "OK");
  ASSERT_EQ(trimmed(from.cli({"CLUSTER", "SETSLOT", slot_text, "MIGRATING", to_id}).value()), "OK");
  ASSERT_EQ(trimmed(from.cli({"MIGRATE", "127.0.0.1", std::to_string(to.port()), "", "0", "5000", "KEYS", old_key})
                        .value()),
            "OK");

  // Mid-migration: the source no longer has the key and answers ASK.
  EXPECT_EQ(client->get(old_key).value(), std::optional<std::string>("before"));
  ASSERT_TRUE(client->set(new_key, "during").ok());  // created on the target through ASK
  const uint64_t asks = client->stats().redirects;
  EXPECT_GE(asks, 2u);

  // Finish: every node learns the target owns the slot; the client's map is
  // stale and the source answers MOVED.
  for (int n = 0; n < cluster_->size(); ++n) {
    ASSERT_EQ(trimmed(cluster_->node(n).cli({"CLUSTER", "SETSLOT", slot_text, "NODE", to_id}).value()), "OK");
  }
  EXPECT_EQ(client->get(new_key).value(), std::optional<std::string>("during"));
  const uint64_t after_moved = client->stats().redirects;
  EXPECT_EQ(after_moved, asks + 1);
  // The map was refreshed: no more redirects for this slot.
  EXPECT_EQ(client->get(old_key).value(), std::optional<std::string>("before"));
  EXPECT_EQ(client->stats().redirects, after_moved);
  EXPECT_EQ(owner_port(slot), to.port());
  EXPECT_EQ(trimmed(cluster_->cli({"GET", new_key}).value()), "during");
  EXPECT_EQ(client->stats().errors, 0u);
}

TEST_F(RedisClusterTest, ADeadSeedIsSkipped) {
  RedisOptions options = cluster_->client_options();
  options.seeds.insert(options.seeds.begin(), RedisEndpoint{"127.0.0.1", 1});  // nothing listens there
  std::unique_ptr<RedisClient> client = client_for(options);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->set("seeded", "yes").ok());
  EXPECT_EQ(client->get("seeded").value(), std::optional<std::string>("yes"));
  EXPECT_TRUE(client->healthy());  // the dead seed serves no slot
  EXPECT_EQ(client->stats().nodes, 3);
}

// Last of the suite: it kills a node. Only that node's slots fail (fast,
// in backoff), the others keep serving, and the restarted node (same port,
// nodes.conf and appendonly file) serves its keys again.
TEST_F(RedisClusterTest, AKilledNodeFailsOnlyItsSlotsUntilItIsBack) {
  std::unique_ptr<RedisClient> client = client_for(cluster_->client_options());
  ASSERT_NE(client, nullptr);
  const std::vector<int> owners = slot_owner_ports();
  RedisServer& victim = cluster_->node(2);
  std::string victim_key, other_key;
  for (int i = 0; victim_key.empty() || other_key.empty(); ++i) {
    const std::string key = absl::StrCat("node-down:", i);
    (owners[redis_key_slot(key)] == victim.port() ? victim_key : other_key) = key;
  }
  ASSERT_TRUE(client->set(victim_key, "v").ok());
  ASSERT_TRUE(client->set(other_key, "o").ok());
  ASSERT_TRUE(victim.kill().ok());

  EXPECT_TRUE(absl::IsUnavailable(client->get(victim_key).status()));
  EXPECT_FALSE(client->healthy());
  EXPECT_EQ(client->stats().nodes_down, 1);
  const auto start = steady_clock::now();
  EXPECT_TRUE(absl::IsUnavailable(client->get(victim_key).status()));
  EXPECT_LT(steady_clock::now() - start, milliseconds(50));
  EXPECT_EQ(client->get(other_key).value(), std::optional<std::string>("o"));

  ASSERT_TRUE(victim.restart().ok()) << victim.log_tail();
  ASSERT_TRUE(cluster_->wait_until_ok().ok());
  const auto deadline = steady_clock::now() + milliseconds(3000);
  absl::StatusOr<std::optional<std::string>> value = client->get(victim_key);
  while (!value.ok() && steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
    value = client->get(victim_key);
  }
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, std::optional<std::string>("v"));
  EXPECT_TRUE(client->healthy());
}

}  // namespace
}  // namespace baton
