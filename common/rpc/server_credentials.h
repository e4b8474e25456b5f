// Server-side TLS of every Baton gRPC listener (baton-prefill --listen,
// baton-edge --listen): plaintext, TLS with a server certificate, or mutual
// TLS when a client CA is given.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"

namespace baton {

struct ServerTlsOptions {
  std::string cert_path;       // PEM certificate chain; empty: plaintext
  std::string key_path;        // PEM private key
  std::string client_ca_path;  // PEM roots; set: clients must present a certificate they sign (mutual TLS)
};

// Server credentials from `tls`: insecure when cert_path is empty.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> make_server_credentials(const ServerTlsOptions& tls);

// The text of a PEM file; errors name `what` and the path (NOT_FOUND when it
// cannot be read, INVALID_ARGUMENT when it holds no PEM block).
absl::StatusOr<std::string> read_pem_file(const std::string& path, const char* what);

}  // namespace baton
