// RedisPackBackend: prefix packs in Redis (--state redis://...), shared by
// every replica and durable (no TTL: a pack goes only by DeletePrefix).
//
// Keys, with P = "baton:pack:<model id>:<tenant>:" (model id: the served
// model's short_model_id; tenant and pack id through pack_key_component, so
// no ':' '{' '}' inside, hence no hash tags: a tenant's packs spread over the
// cluster's slots):
//   P "v:" <pack id> ":" <digest hex>
//                          the value: the pack file's bytes as uploaded
//   P "m:" <pack id>       "<prefix digest hex> <charge>": the pack's claim
//                          on its id and the bytes it counts against the quota
//   P "d:" <digest hex>    the pack id with that prefix digest
//   P "bytes"              INCRBY counter: the tenant's charges, all replicas
//
// The claim m is the truth: a pack exists while its m does. Reads go
// GET m, then GET v (by digest: GET d, then as by id), and the value must
// verify with m's digest; a replica revalidates its memory copy with GET m.
//
// put: GET m (present: same digest = already present, another =
// ALREADY_EXISTS); INCRBY bytes +charge (over the quota: INCRBY -charge,
// RESOURCE_EXHAUSTED); SET m NX (lost a race with another replica: INCRBY
// -charge, then as if m had been present); SET v; SET d.
// remove: GET m; DEL m (from here no replica serves the pack); DEL v; DEL d
// when it names this id; INCRBY bytes -charge if this call's DEL m deleted it.
//
// A replica that dies between two steps (without Lua scripts, which the fake
// tier of the unit tests cannot run, nothing spans keys atomically, and the
// keys of one pack may sit on different cluster nodes) leaves one of these,
// none of which serves wrong KV or a deleted pack:
// - put, after INCRBY before SET m: the counter over-counts by that charge
//   (the tenant's quota is that much stricter until an operator resets it);
// - put, after SET m before SET v (or SET d): reads miss (no value under
//   m's digest); the same upload again writes v and d without a second
//   charge; another prefix under that id gets ALREADY_EXISTS until
//   DeletePrefix;
// - remove, after DEL m: v and d are orphans nobody reads (the same pack
//   uploaded again reuses them) and the counter over-counts by the charge.
// A failed step of put (the tier errs) is rolled back as far as the tier
// still answers (DEL m, INCRBY -charge); PutPrefix then answers UNAVAILABLE.
#pragma once

#include <memory>
#include <string>

#include "cloud_prefill/state/pack_backend.h"
#include "cloud_prefill/state/redis_client.h"

namespace baton {

class RedisPackBackend final : public PackBackend {
 public:
  // `quota_bytes` 0: none.
  RedisPackBackend(std::shared_ptr<RedisClient> redis, const std::string& model_id, uint64_t quota_bytes,
                   PackChargeFn charge);

  std::string name() const override { return "redis"; }
  bool shared() const override { return true; }
  absl::Status check_quota(const std::string& tenant, uint64_t charge) override;
  absl::StatusOr<bool> put(const std::string& tenant, const std::string& pack_id, const Digest256& digest,
                           uint32_t token_count, std::string_view value) override;
  absl::StatusOr<std::optional<PackValue>> get_by_id(const std::string& tenant, const std::string& pack_id) override;
  absl::StatusOr<std::optional<PackValue>> get_by_digest(const std::string& tenant, const Digest256& digest) override;
  absl::StatusOr<std::optional<Digest256>> digest_of(const std::string& tenant, const std::string& pack_id) override;
  absl::StatusOr<std::optional<std::string>> id_of(const std::string& tenant, const Digest256& digest) override;
  absl::StatusOr<std::optional<uint64_t>> remove(const std::string& tenant, const std::string& pack_id) override;

  // The keys above, for tests and operators.
  std::string value_key(const std::string& tenant, const std::string& pack_id, const Digest256& digest) const;
  std::string meta_key(const std::string& tenant, const std::string& pack_id) const;
  std::string digest_key(const std::string& tenant, const Digest256& digest) const;
  std::string bytes_key(const std::string& tenant) const;

 private:
  struct Meta {
    Digest256 digest{};
    uint64_t charge = 0;
  };
  std::string prefix(const std::string& tenant) const;
  absl::StatusOr<std::optional<Meta>> read_meta(const std::string& tenant, const std::string& pack_id);
  // put's steps once the id is claimed: the value, then the digest index.
  absl::Status write_value(const std::string& tenant, const std::string& pack_id, const Digest256& digest,
                           std::string_view value);
  // put when the id already has a claim `meta`.
  absl::StatusOr<bool> put_claimed(const std::string& tenant, const std::string& pack_id, const Digest256& digest,
                                   const Meta& meta, std::string_view value);
  absl::Status over_quota(const std::string& tenant, uint64_t charge, int64_t used) const;

  std::shared_ptr<RedisClient> redis_;
  const std::string model_id_;
  const uint64_t quota_bytes_;
  const PackChargeFn charge_;
};

}  // namespace baton
