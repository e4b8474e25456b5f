#include "cloud_prefill/state/dir_pack_backend.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_format.h"
#include "common/kv_stream/kv_pack_file.h"
#include "common/util/atomic_file.h"
#include "common/util/check.h"
#include "common/util/errno_status.h"
#include "common/util/log.h"
#include "common/util/read_file.h"

namespace baton {
namespace {

constexpr std::string_view kPackSuffix = ".batonkv";

// Creates `path` (and its parents) as owner-only directories.
absl::Status make_private_dirs(const std::string& path) {
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error) return errno_status(error.value(), "creating pack directory " + path);
  if (::chmod(path.c_str(), 0700) != 0) return errno_status(errno, "chmod 0700 " + path);
  return absl::OkStatus();
}

std::string stored_pack_id(const v1::KvHeader& header, const Digest256& digest) {
  return header.pack_id().empty() ? to_hex(digest) : header.pack_id();
}

}  // namespace

DirPackBackend::DirPackBackend(std::string root, uint64_t quota_bytes, PackChargeFn charge)
    : root_(std::move(root)), quota_bytes_(quota_bytes), charge_(std::move(charge)) {}

absl::StatusOr<std::unique_ptr<DirPackBackend>> DirPackBackend::open(const std::string& dir,
                                                                   const std::string& model_id,
                                                                   uint64_t quota_bytes, PackChargeFn charge) {
  if (dir.empty()) return absl::InvalidArgumentError("--pack-dir is empty");
  std::unique_ptr<DirPackBackend> backend(
      new DirPackBackend(dir + "/" + pack_key_component(model_id), quota_bytes, std::move(charge)));
  BATON_RETURN_IF_ERROR(make_private_dirs(backend->root_));
  BATON_RETURN_IF_ERROR(backend->index());
  return backend;
}

absl::Status DirPackBackend::index() {
  std::error_code error;
  std::filesystem::directory_iterator it(root_, error);
  if (error) return errno_status(error.value(), "listing pack directory " + root_);
  for (; it != std::filesystem::directory_iterator(); it.increment(error)) {
    if (it->is_directory(error)) index_tenant(it->path().filename().string());
  }
  if (error) return errno_status(error.value(), "listing pack directory " + root_);
  size_t packs = 0;
  for (const auto& [name, tenant] : tenants_) packs += tenant.packs.size();
  BATON_INFO("%zu prefix packs of %zu tenants in %s", packs, tenants_.size(), root_.c_str());
  return absl::OkStatus();
}

void DirPackBackend::index_tenant(const std::string& tenant_name) {
  const std::string dir = root_ + "/" + tenant_name;
  std::error_code error;
  for (std::filesystem::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string file = it->path().filename().string();
    const std::string path = dir + "/" + file;
    if (file.find(kAtomicFileTempInfix) != std::string::npos) {  // a write a crash interrupted
      ::unlink(path.c_str());
      continue;
    }
    if (!file.ends_with(kPackSuffix)) continue;
    absl::StatusOr<v1::KvHeader> header = read_kv_pack_header(path);
    Digest256 digest{};
    if (header.ok() && header->prefix_digest().size() != digest.size()) {
      header = absl::InvalidArgumentError("its header's prefix_digest is not 32 bytes");
    }
    if (!header.ok()) {
      BATON_WARN("skipping pack file %s: %s", path.c_str(), std::string(header.status().message()).c_str());
      continue;
    }
    std::copy(header->prefix_digest().begin(), header->prefix_digest().end(), digest.begin());
    const std::string pack_id = stored_pack_id(*header, digest);
    if (pack_key_component(pack_id) + std::string(kPackSuffix) != file) {
      BATON_WARN("skipping pack file %s: it holds pack '%s', whose file name differs", path.c_str(), pack_id.c_str());
      continue;
    }
    std::error_code size_error;
    const uint64_t file_bytes = std::filesystem::file_size(path, size_error);
    Tenant& tenant = tenants_[tenant_name];
    const uint64_t charge = charge_(header->token_count(), size_error ? 0 : file_bytes);
    tenant.packs[pack_id] = Entry{digest, charge};
    tenant.by_digest[digest] = pack_id;
    tenant.bytes += charge;
  }
  if (error) BATON_WARN("listing %s: %s", dir.c_str(), error.message().c_str());
}

std::string DirPackBackend::tenant_dir(const std::string& tenant) const {
  return root_ + "/" + pack_key_component(tenant);
}

std::string DirPackBackend::pack_path(const std::string& tenant, const std::string& pack_id) const {
  return tenant_dir(tenant) + "/" + pack_key_component(pack_id) + std::string(kPackSuffix);
}

absl::Status DirPackBackend::check_quota_locked(const std::string& tenant, uint64_t charge) const {
  if (quota_bytes_ == 0) return absl::OkStatus();
  auto it = tenants_.find(pack_key_component(tenant));
  const uint64_t used = it == tenants_.end() ? 0 : it->second.bytes;
  if (charge > quota_bytes_ || used > quota_bytes_ - charge) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "tenant %s's pack quota is full: the pack needs %d bytes, %d of %d are used (--pack-quota); "
        "delete packs (DeletePrefix) first",
        tenant, charge, used, quota_bytes_));
  }
  return absl::OkStatus();
}

absl::Status DirPackBackend::check_quota(const std::string& tenant, uint64_t charge) {
  std::lock_guard<std::mutex> lock(mu_);
  return check_quota_locked(tenant, charge);
}

absl::StatusOr<bool> DirPackBackend::put(const std::string& tenant, const std::string& pack_id,
                                         const Digest256& digest, uint32_t token_count, std::string_view value) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string tenant_name = pack_key_component(tenant);
  if (auto it = tenants_.find(tenant_name); it != tenants_.end()) {
    if (auto pack = it->second.packs.find(pack_id); pack != it->second.packs.end()) {
      if (pack->second.digest == digest) return true;
      return absl::AlreadyExistsError(
          absl::StrFormat("pack '%s' already holds a different prefix; choose another pack_id", pack_id));
    }
  }
  const uint64_t charge = charge_(token_count, value.size());
  BATON_RETURN_IF_ERROR(check_quota_locked(tenant, charge));
  BATON_RETURN_IF_ERROR(make_private_dirs(tenant_dir(tenant)));
  BATON_RETURN_IF_ERROR(write_file_atomically(pack_path(tenant, pack_id), value));
  Tenant& entry = tenants_[tenant_name];
  entry.packs[pack_id] = Entry{digest, charge};
  entry.by_digest[digest] = pack_id;
  entry.bytes += charge;
  return false;
}

absl::StatusOr<std::optional<PackValue>> DirPackBackend::read(const std::string& tenant, const std::string& pack_id) {
  const std::string path = pack_path(tenant, pack_id);
  absl::StatusOr<std::string> bytes = read_file(path, "prefix pack");
  if (absl::IsNotFound(bytes.status())) return std::nullopt;  // removed behind our back
  if (!bytes.ok()) return bytes.status();
  return PackValue{pack_id, std::move(*bytes)};
}

absl::StatusOr<std::optional<PackValue>> DirPackBackend::get_by_id(const std::string& tenant,
                                                                   const std::string& pack_id) {
  BATON_ASSIGN_OR_RETURN(std::optional<Digest256> digest, digest_of(tenant, pack_id));
  if (!digest.has_value()) return std::nullopt;
  return read(tenant, pack_id);
}

absl::StatusOr<std::optional<PackValue>> DirPackBackend::get_by_digest(const std::string& tenant,
                                                                       const Digest256& digest) {
  BATON_ASSIGN_OR_RETURN(std::optional<std::string> pack_id, id_of(tenant, digest));
  if (!pack_id.has_value()) return std::nullopt;
  return read(tenant, *pack_id);
}

absl::StatusOr<std::optional<Digest256>> DirPackBackend::digest_of(const std::string& tenant,
                                                                   const std::string& pack_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tenants_.find(pack_key_component(tenant));
  if (it == tenants_.end()) return std::nullopt;
  auto pack = it->second.packs.find(pack_id);
  if (pack == it->second.packs.end()) return std::nullopt;
  return pack->second.digest;
}

absl::StatusOr<std::optional<std::string>> DirPackBackend::id_of(const std::string& tenant, const Digest256& digest) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tenants_.find(pack_key_component(tenant));
  if (it == tenants_.end()) return std::nullopt;
  auto pack = it->second.by_digest.find(digest);
  if (pack == it->second.by_digest.end()) return std::nullopt;
  return pack->second;
}

absl::StatusOr<std::optional<uint64_t>> DirPackBackend::remove(const std::string& tenant,
                                                               const std::string& pack_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tenants_.find(pack_key_component(tenant));
  if (it == tenants_.end()) return std::nullopt;
  auto pack = it->second.packs.find(pack_id);
  if (pack == it->second.packs.end()) return std::nullopt;
  const std::string path = pack_path(tenant, pack_id);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return errno_status(errno, "deleting prefix pack " + path);
  const Entry entry = pack->second;
  it->second.packs.erase(pack);
  it->second.by_digest.erase(entry.digest);
  it->second.bytes -= entry.charge;
  if (it->second.packs.empty()) tenants_.erase(it);
  return entry.charge;
}

size_t DirPackBackend::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t packs = 0;
  for (const auto& [name, tenant] : tenants_) packs += tenant.packs.size();
  return packs;
}

}  // namespace baton
