// Client-side security of every Baton gRPC channel, written once: TLS roots,
// a client certificate for mutual TLS, and a bearer token read from a file
// ("authorization: Bearer ..." on every call). Used by the edge agent's
// CloudClient (--cloud-ca/--cloud-cert/--cloud-key/--cloud-token-file) and by
// the `baton` CLI for the cloud (the same flags) and for the edge agent
// (--ca, --api-key-file).
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"

namespace baton {

struct ChannelSecurityOptions {
  std::string ca_path;     // PEM roots; set: TLS, else plaintext
  // Client certificate chain and key (PEM) for mutual TLS; both or neither, with ca_path.
  std::string cert_path;
  std::string key_path;
  std::string token_path;  // file holding the bearer token (surrounding whitespace dropped); empty: none
  // The flags that set each path, for error messages.
  std::string ca_flag = "--cloud-ca";
  std::string cert_flag = "--cloud-cert";
  std::string key_flag = "--cloud-key";
  std::string token_flag = "--cloud-token-file";
};

struct ChannelSecurity {
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // TLS or insecure
  std::string bearer_token;                               // empty: none
  bool tls = false;
};

// Reads the files of `options`. Errors name the flag and the path:
// NOT_FOUND for an unreadable file, INVALID_ARGUMENT for an empty token file,
// a cert without key (or the reverse), or a client certificate without roots.
absl::StatusOr<ChannelSecurity> make_channel_security(const ChannelSecurityOptions& options);

// The first non-blank, non-'#' line of `path`, whitespace stripped (a token
// file, or an API key file that holds the key to send). `flag` names the
// flag in errors.
absl::StatusOr<std::string> read_token_file(const std::string& path, const std::string& flag);

// Adds "authorization: Bearer TOKEN" to `context` when `token` is not empty.
void add_bearer_token(const std::string& token, grpc::ClientContext& context);

}  // namespace baton
