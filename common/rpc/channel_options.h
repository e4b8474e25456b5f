// Client side of every Baton gRPC channel, written once: security (TLS roots,
// a client certificate for mutual TLS, and a bearer token read from a file,
// "authorization: Bearer ..." on every call), the channel arguments, and the
// deadline and token of each call. Used by the edge agent's
// CloudClient (--cloud-ca/--cloud-cert/--cloud-key/--cloud-token-file) and by
// the `baton` CLI for the cloud (the same flags) and for the edge agent
// (--ca, --api-key-file).
#pragma once

#include <chrono>
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
// Adds "authorization: VALUE" as it is, when not empty (a relay passing on
// its own caller's header).
void add_authorization(const std::string& value, grpc::ClientContext& context);

// The channel arguments Baton's clients set; zero / false keeps gRPC's default.
struct ChannelTuning {
  int max_receive_bytes = 0;  // largest message received (gRPC: 4 MiB)
  int max_send_bytes = 0;     // largest message sent (gRPC: no limit)
  // Reconnect within seconds (backoff 250 ms .. 4 s) to a server that
  // restarts or starts late: gRPC's own backoff grows to 120 s, during which
  // every call fails at once with UNAVAILABLE.
  bool fast_reconnect = false;
  // A subchannel pool of its own, so this channel gets its own TCP
  // connection instead of sharing the process's (load generators).
  bool own_connection = false;
  // > 0: the HTTP/2 stream window this client grants is fixed at this many
  // bytes (BDP probing off), so a server runs at most this far ahead of what
  // the client has read; 0: gRPC's own, which grows to max(4 MiB, 2 x BDP).
  int stream_window_bytes = 0;
};

// A channel to `address` ("host:port"); null `credentials` is plaintext.
std::shared_ptr<grpc::Channel> open_channel(const std::string& address,
                                            std::shared_ptr<grpc::ChannelCredentials> credentials,
                                            const ChannelTuning& tuning = {});

// Every client call: its deadline, and the bearer token when not empty.
void prepare_call(grpc::ClientContext& context, std::chrono::system_clock::time_point deadline,
                  const std::string& bearer_token);
// The same with a steady-clock deadline (gRPC's deadlines are system_clock:
// the time left is carried over; a deadline already passed is now).
void prepare_call(grpc::ClientContext& context, std::chrono::steady_clock::time_point deadline,
                  const std::string& bearer_token);

}  // namespace baton
