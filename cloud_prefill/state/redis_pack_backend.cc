#include "cloud_prefill/state/redis_pack_backend.h"

#include <array>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/util/check.h"
#include "common/util/log.h"

namespace baton {

RedisPackBackend::RedisPackBackend(std::shared_ptr<RedisClient> redis, const std::string& model_id,
                                   uint64_t quota_bytes, PackChargeFn charge)
    : redis_(std::move(redis)),
      model_id_(pack_key_component(model_id)),
      quota_bytes_(quota_bytes),
      charge_(std::move(charge)) {}

std::string RedisPackBackend::prefix(const std::string& tenant) const {
  return absl::StrCat("baton:pack:", model_id_, ":", pack_key_component(tenant), ":");
}

std::string RedisPackBackend::value_key(const std::string& tenant, const std::string& pack_id,
                                        const Digest256& digest) const {
  return absl::StrCat(prefix(tenant), "v:", pack_key_component(pack_id), ":", to_hex(digest));
}

std::string RedisPackBackend::meta_key(const std::string& tenant, const std::string& pack_id) const {
  return absl::StrCat(prefix(tenant), "m:", pack_key_component(pack_id));
}

std::string RedisPackBackend::digest_key(const std::string& tenant, const Digest256& digest) const {
  return absl::StrCat(prefix(tenant), "d:", to_hex(digest));
}

std::string RedisPackBackend::bytes_key(const std::string& tenant) const { return prefix(tenant) + "bytes"; }

absl::StatusOr<std::optional<RedisPackBackend::Meta>> RedisPackBackend::read_meta(const std::string& tenant,
                                                                                  const std::string& pack_id) {
  const std::string key = meta_key(tenant, pack_id);
  BATON_ASSIGN_OR_RETURN(std::optional<std::string> text, redis_->get(key));
  if (!text.has_value()) return std::nullopt;
  // "<digest hex> <charge>"
  const size_t space = text->find(' ');
  Meta meta;
  absl::StatusOr<Digest256> digest = space == std::string::npos
                                         ? absl::StatusOr<Digest256>(absl::InvalidArgumentError("no space"))
                                         : parse_digest_hex(std::string_view(*text).substr(0, space));
  if (!digest.ok() || !absl::SimpleAtoi(text->substr(space + 1), &meta.charge)) {
    return absl::DataLossError(absl::StrFormat("redis key %s holds '%s', not \"<digest hex> <bytes>\"", key,
                                               absl::CHexEscape(text->substr(0, 100))));
  }
  meta.digest = *digest;
  return meta;
}

absl::Status RedisPackBackend::over_quota(const std::string& tenant, uint64_t charge, int64_t used) const {
  return absl::ResourceExhaustedError(absl::StrFormat(
      "tenant %s's pack quota is full: the pack needs %d bytes, %d of %d are used on all replicas (--pack-quota); "
      "delete packs (DeletePrefix) first",
      tenant, charge, used, quota_bytes_));
}

absl::Status RedisPackBackend::check_quota(const std::string& tenant, uint64_t charge) {
  // Read also without a quota: an upload learns at its header that the tier is down.
  BATON_ASSIGN_OR_RETURN(std::optional<std::string> text, redis_->get(bytes_key(tenant)));
  int64_t used = 0;
  if (text.has_value() && !absl::SimpleAtoi(*text, &used)) used = 0;
  if (quota_bytes_ == 0) return absl::OkStatus();
  if (charge > quota_bytes_ || used > static_cast<int64_t>(quota_bytes_ - charge)) {
    return over_quota(tenant, charge, used);
  }
  return absl::OkStatus();
}

absl::Status RedisPackBackend::write_value(const std::string& tenant, const std::string& pack_id,
                                           const Digest256& digest, std::string_view value) {
  BATON_RETURN_IF_ERROR(redis_->set(value_key(tenant, pack_id, digest), value).status());
  return redis_->set(digest_key(tenant, digest), pack_id).status();
}

absl::StatusOr<bool> RedisPackBackend::put_claimed(const std::string& tenant, const std::string& pack_id,
                                                   const Digest256& digest, const Meta& meta,
                                                   std::string_view value) {
  if (meta.digest != digest) {
    return absl::AlreadyExistsError(
        absl::StrFormat("pack '%s' already holds a different prefix; choose another pack_id", pack_id));
  }
  // Present; or claimed by a put that did not finish (a replica died): finish it.
  const std::string key = value_key(tenant, pack_id, digest);
  const std::array<std::string_view, 2> exists = {"EXISTS", key};
  BATON_ASSIGN_OR_RETURN(RedisReply reply, redis_->command(key, exists));
  if (reply.type == RedisReply::Type::kInteger && reply.integer > 0) return true;
  BATON_RETURN_IF_ERROR(write_value(tenant, pack_id, digest, value));
  return true;
}

absl::StatusOr<bool> RedisPackBackend::put(const std::string& tenant, const std::string& pack_id,
                                           const Digest256& digest, uint32_t token_count, std::string_view value) {
  BATON_ASSIGN_OR_RETURN(std::optional<Meta> meta, read_meta(tenant, pack_id));
  if (meta.has_value()) return put_claimed(tenant, pack_id, digest, *meta, value);
  const uint64_t charge = charge_(token_count, value.size());
  const std::string counter = bytes_key(tenant);
  BATON_ASSIGN_OR_RETURN(const int64_t used, redis_->incr_by(counter, static_cast<int64_t>(charge)));
  if (quota_bytes_ > 0 && used > static_cast<int64_t>(quota_bytes_)) {
    (void)redis_->incr_by(counter, -static_cast<int64_t>(charge));
    return over_quota(tenant, charge, used - static_cast<int64_t>(charge));
  }
  const std::string claim = meta_key(tenant, pack_id);
  absl::StatusOr<bool> claimed =
      redis_->set(claim, absl::StrCat(to_hex(digest), " ", charge), std::chrono::milliseconds(0), true);
  if (!claimed.ok() || !*claimed) {
    (void)redis_->incr_by(counter, -static_cast<int64_t>(charge));
    if (!claimed.ok()) return claimed.status();
    // Another replica claimed the id first.
    BATON_ASSIGN_OR_RETURN(meta, read_meta(tenant, pack_id));
    if (!meta.has_value()) return absl::UnavailableError("pack '" + pack_id + "' was claimed and deleted meanwhile");
    return put_claimed(tenant, pack_id, digest, *meta, value);
  }
  if (absl::Status written = write_value(tenant, pack_id, digest, value); !written.ok()) {
    // Undo the claim while the tier still answers; if it does not, the claim
    // stays (see the header) and the same upload later finishes it.
    if (redis_->del(claim).ok()) (void)redis_->incr_by(counter, -static_cast<int64_t>(charge));
    return written;
  }
  return false;
}

absl::StatusOr<std::optional<PackValue>> RedisPackBackend::get_by_id(const std::string& tenant,
                                                                     const std::string& pack_id) {
  BATON_ASSIGN_OR_RETURN(std::optional<Meta> meta, read_meta(tenant, pack_id));
  if (!meta.has_value()) return std::nullopt;
  BATON_ASSIGN_OR_RETURN(std::optional<std::string> bytes, redis_->get(value_key(tenant, pack_id, meta->digest)));
  if (!bytes.has_value()) return std::nullopt;  // claimed, not (yet) written
  return PackValue{pack_id, std::move(*bytes)};
}

absl::StatusOr<std::optional<PackValue>> RedisPackBackend::get_by_digest(const std::string& tenant,
                                                                         const Digest256& digest) {
  BATON_ASSIGN_OR_RETURN(std::optional<std::string> pack_id, id_of(tenant, digest));
  if (!pack_id.has_value()) return std::nullopt;
  BATON_ASSIGN_OR_RETURN(std::optional<PackValue> value, get_by_id(tenant, *pack_id));
  return value;
}

absl::StatusOr<std::optional<Digest256>> RedisPackBackend::digest_of(const std::string& tenant,
                                                                     const std::string& pack_id) {
  BATON_ASSIGN_OR_RETURN(std::optional<Meta> meta, read_meta(tenant, pack_id));
  if (!meta.has_value()) return std::nullopt;
  return meta->digest;
}

absl::StatusOr<std::optional<std::string>> RedisPackBackend::id_of(const std::string& tenant,
                                                                   const Digest256& digest) {
  return redis_->get(digest_key(tenant, digest));
}

absl::StatusOr<std::optional<uint64_t>> RedisPackBackend::remove(const std::string& tenant,
                                                                 const std::string& pack_id) {
  BATON_ASSIGN_OR_RETURN(std::optional<Meta> meta, read_meta(tenant, pack_id));
  if (!meta.has_value()) return std::nullopt;
  BATON_ASSIGN_OR_RETURN(const bool deleted, redis_->del(meta_key(tenant, pack_id)));
  if (!deleted) return std::nullopt;  // another replica's DeletePrefix got there first
  // The pack is gone for every reader; the rest is cleanup, whose failure
  // leaves only orphans (see the header), so it is logged, not returned.
  absl::Status cleanup = redis_->del(value_key(tenant, pack_id, meta->digest)).status();
  const std::string index = digest_key(tenant, meta->digest);
  absl::StatusOr<std::optional<std::string>> indexed = redis_->get(index);
  if (cleanup.ok()) cleanup = indexed.status();
  if (cleanup.ok() && *indexed == pack_id) cleanup = redis_->del(index).status();
  if (cleanup.ok()) cleanup = redis_->incr_by(bytes_key(tenant), -static_cast<int64_t>(meta->charge)).status();
  if (!cleanup.ok()) {
    BATON_WARN("tenant %s: pack '%s' is deleted, but its value, index or quota bytes may remain in redis: %s",
               tenant.c_str(), pack_id.c_str(), std::string(cleanup.message()).c_str());
  }
  return meta->charge;
}

}  // namespace baton
