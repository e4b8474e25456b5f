// CloudSessionKeys: the session keys the edge gives the cloud's session cache
// instead of its users' session ids (README "Security", issue 15 item 3).
// The cloud keys its session cache by (tenant, PrefillRequest.session_id) and
// reuses an entry for whoever presents its key, so the key is a capability:
// here it is HMAC-SHA256(secret, "baton-cloud-session/1" || session id ||
// created time) in lowercase hex (64 characters), with a 32-byte secret only
// this edge holds. Nobody without the secret can compute the key of a
// session id they know or guess, the id never leaves the device in clear,
// and a session deleted and created again under the same id gets a new key
// (its created time differs), so it never meets its predecessor's entry.
//
// The secret is drawn from the kernel's CSPRNG (getrandom). With a sessions
// directory it is kept there as "cloud-session.secret" (mode 0600, written
// atomically), so the cloud's entries still serve the sessions a restarted
// edge reloads; without one it lives as long as the process.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace baton {

inline constexpr char kCloudSessionSecretFileName[] = "cloud-session.secret";
inline constexpr size_t kCloudSessionSecretBytes = 32;

class CloudSessionKeys {
 public:
  // A fresh per-process secret.
  static absl::StatusOr<CloudSessionKeys> Ephemeral();
  // The secret kept at `path`: read when the file exists (it must be a
  // regular file of exactly 32 bytes that only its owner can read or write:
  // FAILED_PRECONDITION otherwise, naming the fix), else drawn and written
  // there (mode 0600).
  static absl::StatusOr<CloudSessionKeys> Persistent(const std::string& path);
  // A given secret (tests).
  static CloudSessionKeys FromSecret(std::string secret) { return CloudSessionKeys(std::move(secret)); }

  // The cloud session key of `session_id` created at `created_unix_ms`.
  std::string key_for(const std::string& session_id, int64_t created_unix_ms) const;

 private:
  explicit CloudSessionKeys(std::string secret) : secret_(std::move(secret)) {}
  std::string secret_;  // kCloudSessionSecretBytes random bytes
};

}  // namespace baton
