#include "cloud_prefill/prefill_server.h"

#include <chrono>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace baton {
namespace {

absl::StatusOr<std::string> read_pem(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the ", what, " ", path));
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(path, " (", what, ") is not PEM"));
  }
  return text.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> make_server_credentials(const ServerTlsOptions& tls) {
  if (tls.cert_path.empty()) {
    if (!tls.key_path.empty() || !tls.client_ca_path.empty()) {
      return absl::InvalidArgumentError("a TLS key or client CA was given without a certificate (--tls-cert)");
    }
    return grpc::InsecureServerCredentials();
  }
  if (tls.key_path.empty()) return absl::InvalidArgumentError("--tls-cert needs --tls-key");
  grpc::SslServerCredentialsOptions options;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  absl::StatusOr<std::string> cert = read_pem(tls.cert_path, "TLS certificate");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = read_pem(tls.key_path, "TLS key");
  if (!key.ok()) return key.status();
  pair.cert_chain = *cert;
  pair.private_key = *key;
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!tls.client_ca_path.empty()) {
    absl::StatusOr<std::string> roots = read_pem(tls.client_ca_path, "client CA");
    if (!roots.ok()) return roots.status();
    options.pem_root_certs = *roots;
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::unique_ptr<PrefillServer>> PrefillServer::Start(const std::string& address,
                                                                     PrefillService& service,
                                                                     const PrefillServerOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = make_server_credentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, *credentials, &port);
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on '", address, "'"));
  }
  return std::unique_ptr<PrefillServer>(new PrefillServer(std::move(server), port, &service));
}

PrefillServer::~PrefillServer() {
  Shutdown();
  service_->StopWorkers();
}

void PrefillServer::Shutdown(int64_t grace_ms) {
  if (shut_down_) return;
  shut_down_ = true;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(grace_ms));
}

}  // namespace baton
