#include "tests/support/redis_server.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/support/test_certs.h"
#include "tests/support/test_models.h"

namespace baton::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr auto kStartTimeout = std::chrono::seconds(10);
constexpr auto kClusterTimeout = std::chrono::seconds(30);
constexpr int kClusterBusOffset = 10000;  // Redis's cluster bus listens on port + 10000

bool on_path(const std::string& program) {
  return std::system(("command -v " + program + " > /dev/null 2>&1").c_str()) == 0;
}

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// Runs a shell command; its stdout + stderr, or an error with them.
absl::StatusOr<std::string> run_command(const std::string& command) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return absl::InternalError("popen failed for: " + command);
  std::string output;
  char buffer[4096];
  while (size_t got = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, got);
  const int status = ::pclose(pipe);
  if (status != 0) return absl::UnavailableError(absl::StrCat("`", command, "` exited with ", status, ": ", output));
  return output;
}

bool port_bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return ok;
}

// A free loopback port (and, for a cluster node, a free bus port + 10000).
absl::StatusOr<int> pick_port(bool cluster) {
  static std::mt19937 random(std::random_device{}());
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = std::uniform_int_distribution<int>(20000, 30000)(random);
    if (port_bindable(port) && (!cluster || port_bindable(port + kClusterBusOffset))) return port;
  }
  return absl::UnavailableError("no free loopback port in 20000..30000 for redis-server");
}

absl::Status missing_tools(const RedisServerOptions& options) {
  if (!on_path("redis-server")) {
    return absl::FailedPreconditionError(
        "redis-server is not installed (apt-get install redis-server redis-tools, or deploy/install-deps.sh --test)");
  }
  if (!on_path("redis-cli")) {
    return absl::FailedPreconditionError("redis-cli is not installed (apt-get install redis-tools)");
  }
  if (options.tls && !have_openssl()) {
    return absl::FailedPreconditionError("openssl is not installed: no certificates for a TLS redis-server");
  }
  return absl::OkStatus();
}

}  // namespace

bool redis_required() {
  const char* value = std::getenv("BATON_REQUIRE_REDIS");
  return value != nullptr && std::string(value) == "1";
}

RedisServer::RedisServer(RedisServerOptions options, std::string dir, int port)
    : options_(std::move(options)), dir_(std::move(dir)), port_(port) {}

RedisServer::~RedisServer() {
  (void)kill();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::start(RedisServerOptions options) {
  if (absl::Status missing = missing_tools(options); !missing.ok()) return missing;
  absl::Status last;
  // A port another process takes between our check and the server's bind
  // makes it exit at startup: try another.
  for (int attempt = 0; attempt < 3; ++attempt) {
    absl::StatusOr<int> port = pick_port(options.cluster);
    if (!port.ok()) return port.status();
    std::unique_ptr<RedisServer> server(new RedisServer(options, make_temp_dir("redis"), *port));
    if (last = server->write_config(); !last.ok()) return last;
    if (last = server->spawn_and_wait(); last.ok()) return server;
    if (!absl::StrContains(server->log_tail(), "Address already in use")) return last;
  }
  return last;
}

absl::Status RedisServer::write_config() const {
  std::ofstream config(dir_ + "/redis.conf");
  config << "bind 127.0.0.1\nprotected-mode no\ndaemonize no\nlogfile \"\"\n"
         << "dir " << dir_ << "\n"
         << "save \"\"\nappendonly yes\nappendfsync always\n";
  if (options_.tls) {
    const TestPki& pki = test_pki();
    // The CA file trusts the client certificate (used only with tls_auth_clients).
    const bool own = !options_.tls_cert_file.empty();
    config << "port 0\ntls-port " << port_ << "\ntls-cert-file " << (own ? options_.tls_cert_file : pki.server.cert)
           << "\ntls-key-file " << (own ? options_.tls_key_file : pki.server.key) << "\ntls-ca-cert-file " << pki.client.cert << "\ntls-auth-clients "
           << (options_.tls_auth_clients ? "yes" : "no") << "\n";
  } else {
    config << "port " << port_ << "\n";
  }
  if (!options_.password.empty()) config << "requirepass " << options_.password << "\n";
  if (options_.cluster) config << "cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-node-timeout 5000\n";
  if (options_.maxmemory_bytes > 0) {
    config << "maxmemory " << options_.maxmemory_bytes << "\nmaxmemory-policy allkeys-lru\n";
  }
  if (options_.enable_debug_command) config << "enable-debug-command local\n";
  for (const std::string& line : options_.extra_config) config << line << "\n";
  config.close();
  if (!config) return absl::InternalError("cannot write " + dir_ + "/redis.conf");
  return absl::OkStatus();
}

absl::Status RedisServer::spawn_and_wait() {
  const std::string config = dir_ + "/redis.conf", log = dir_ + "/redis.log";
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError("fork failed for redis-server");
  if (pid == 0) {
    // The server must not outlive a test binary that crashes.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    ::execlp("redis-server", "redis-server", config.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  pid_ = pid;
  std::vector<std::string> ping = {"PING"};
  const auto deadline = steady_clock::now() + kStartTimeout;
  while (steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::FailedPreconditionError(
          absl::StrCat("redis-server exited at startup (status ", status, "); its log:\n", log_tail()));
    }
    absl::StatusOr<std::string> pong = cli(ping);
    if (pong.ok() && absl::StrContains(*pong, "PONG")) return absl::OkStatus();
    std::this_thread::sleep_for(milliseconds(20));
  }
  (void)kill();
  return absl::DeadlineExceededError(
      absl::StrCat("redis-server on port ", port_, " did not answer PING within 10 s; its log:\n", log_tail()));
}

absl::Status RedisServer::kill() {
  if (pid_ <= 0) return absl::OkStatus();
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return absl::OkStatus();
}

absl::Status RedisServer::restart() {
  (void)kill();
  return spawn_and_wait();
}

std::string RedisServer::url() const {
  return absl::StrCat(options_.tls ? "rediss" : "redis", "://127.0.0.1:", port_);
}

RedisOptions RedisServer::client_options() const {
  RedisOptions options;
  options.seeds = {{"127.0.0.1", port_}};
  options.password = options_.password;
  options.tls = options_.tls;
  if (options_.tls) {
    options.tls_ca_file = options_.tls_cert_file.empty() ? test_pki().server.cert : options_.tls_cert_file;
    if (options_.tls_auth_clients) {
      options.tls_cert_file = test_pki().client.cert;
      options.tls_key_file = test_pki().client.key;
    }
  }
  options.connect_timeout = milliseconds(500);
  options.io_timeout = milliseconds(2000);
  options.backoff_initial = milliseconds(50);
  options.backoff_max = milliseconds(400);
  return options;
}

std::vector<std::string> RedisServer::cli_connection_args() const {
  std::vector<std::string> args = {"-h", "127.0.0.1", "-p", std::to_string(port_)};
  if (options_.tls) {
    args.insert(args.end(), {"--tls", "--cacert",
                             options_.tls_cert_file.empty() ? test_pki().server.cert : options_.tls_cert_file});
    if (options_.tls_auth_clients) {
      args.insert(args.end(), {"--cert", test_pki().client.cert, "--key", test_pki().client.key});
    }
  }
  if (!options_.password.empty()) args.insert(args.end(), {"-a", options_.password, "--no-auth-warning"});
  return args;
}

absl::StatusOr<std::string> RedisServer::cli(const std::vector<std::string>& args) const {
  std::string command = "redis-cli";
  for (const std::string& arg : cli_connection_args()) command += " " + shell_quote(arg);
  for (const std::string& arg : args) command += " " + shell_quote(arg);
  return run_command(command);
}

std::string RedisServer::log_tail() const {
  std::ifstream log(dir_ + "/redis.log");
  std::vector<std::string> lines;
  for (std::string line; std::getline(log, line);) lines.push_back(line);
  const size_t first = lines.size() > 15 ? lines.size() - 15 : 0;
  return absl::StrJoin(lines.begin() + static_cast<std::ptrdiff_t>(first), lines.end(), "\n");
}

absl::StatusOr<std::unique_ptr<RedisTestCluster>> RedisTestCluster::start(int nodes, RedisServerOptions options) {
  if (options.tls) return absl::InvalidArgumentError("RedisTestCluster has no TLS (tls-cluster) support");
  options.cluster = true;
  std::unique_ptr<RedisTestCluster> cluster(new RedisTestCluster);
  std::vector<std::string> create = {"--cluster", "create"};
  for (int i = 0; i < nodes; ++i) {
    absl::StatusOr<std::unique_ptr<RedisServer>> node = RedisServer::start(options);
    if (!node.ok()) return node.status();
    create.push_back(absl::StrCat("127.0.0.1:", (*node)->port()));
    cluster->nodes_.push_back(*std::move(node));
  }
  create.insert(create.end(), {"--cluster-replicas", "0", "--cluster-yes"});
  if (absl::StatusOr<std::string> created = cluster->nodes_[0]->cli(create); !created.ok()) return created.status();
  if (absl::Status ok = cluster->wait_until_ok(); !ok.ok()) return ok;
  return cluster;
}

absl::Status RedisTestCluster::wait_until_ok() const {
  const auto deadline = steady_clock::now() + kClusterTimeout;
  std::string last;
  const std::vector<std::string> info = {"CLUSTER", "INFO"};
  for (const std::unique_ptr<RedisServer>& node : nodes_) {
    while (true) {
      absl::StatusOr<std::string> reply = node->cli(info);
      if (reply.ok() && absl::StrContains(*reply, "cluster_state:ok")) break;
      last = reply.ok() ? *reply : std::string(reply.status().message());
      if (steady_clock::now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("redis cluster node ", node->port(), " not cluster_state:ok within 30 s: ", last));
      }
      std::this_thread::sleep_for(milliseconds(50));
    }
  }
  return absl::OkStatus();
}

std::string RedisTestCluster::url() const {
  std::vector<std::string> hosts;
  for (const std::unique_ptr<RedisServer>& node : nodes_) hosts.push_back(absl::StrCat("127.0.0.1:", node->port()));
  return "redis://" + absl::StrJoin(hosts, ",");
}

RedisOptions RedisTestCluster::client_options() const {
  RedisOptions options = nodes_[0]->client_options();
  options.seeds.clear();
  for (const std::unique_ptr<RedisServer>& node : nodes_) options.seeds.push_back({"127.0.0.1", node->port()});
  return options;
}

absl::StatusOr<std::string> RedisTestCluster::cli(const std::vector<std::string>& args) const {
  std::vector<std::string> with_redirects = {"-c"};
  with_redirects.insert(with_redirects.end(), args.begin(), args.end());
  return nodes_[0]->cli(with_redirects);
}

}  // namespace baton::testing
