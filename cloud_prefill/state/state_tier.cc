#include "cloud_prefill/state/state_tier.h"

#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/util/check.h"
#include "common/util/log.h"

namespace baton {
namespace {

constexpr char kMagic[4] = {'B', 'T', 'S', 'T'};
constexpr uint16_t kVersion = 1;
constexpr uint8_t kFlagExact = 1;
constexpr uint8_t kFlagShuffledZstd = 2;
constexpr size_t kFingerprintChars = 64;
constexpr size_t kChecksumBytes = 16;
constexpr int kZstdLevel = 1;  // the write thread's budget: fast, and most of the gain is the shuffle

template <typename T>
void append_le(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // the hosts we build for are little-endian
  out.append(bytes, sizeof(T));
}

template <typename T>
bool read_le(std::string_view& in, T* value) {
  if (in.size() < sizeof(T)) return false;
  std::memcpy(value, in.data(), sizeof(T));
  in.remove_prefix(sizeof(T));
  return true;
}

std::string hex16_of(std::string_view domain, std::string_view value) {
  std::string input(domain);
  input.push_back('\0');
  input.append(value);
  return to_hex(sha256(input)).substr(0, 16);
}

// Byte planes of 4-byte words: byte 0 of every word, then byte 1, ... The
// exponent bytes of f32 KV then sit together and zstd finds them.
std::string shuffle4(std::string_view raw) {
  const size_t words = raw.size() / 4;
  std::string out(raw.size(), '\0');
  for (size_t w = 0; w < words; ++w) {
    for (size_t b = 0; b < 4; ++b) out[b * words + w] = raw[w * 4 + b];
  }
  return out;
}

std::string unshuffle4(std::string_view planes) {
  const size_t words = planes.size() / 4;
  std::string out(planes.size(), '\0');
  for (size_t w = 0; w < words; ++w) {
    for (size_t b = 0; b < 4; ++b) out[w * 4 + b] = planes[b * words + w];
  }
  return out;
}

// XXH3-128 of `header` followed by `payload`.
void append_checksum(std::string& out, std::string_view header, std::string_view payload) {
  XXH3_state_t* state = XXH3_createState();
  BATON_CHECK(state != nullptr && XXH3_128bits_reset(state) == XXH_OK);
  XXH3_128bits_update(state, header.data(), header.size());
  XXH3_128bits_update(state, payload.data(), payload.size());
  const XXH128_hash_t hash = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  append_le(out, hash.low64);
  append_le(out, hash.high64);
}

}  // namespace

StateTier::StateTier(std::shared_ptr<RedisClient> redis, const ModelFingerprint& fingerprint,
                     const KvGeometry& geometry, StateTierOptions options)
    : redis_(std::move(redis)),
      fingerprint_digest_(fingerprint.digest),
      key_prefix_(absl::StrCat("bt1:", fingerprint.digest.substr(0, 12), ":")),
      geometry_(geometry),
      options_(options) {
  if (redis_ != nullptr) writer_ = std::thread([this] { writer_loop(); });
}

StateTier::~StateTier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

std::string StateTier::prefix_block_key(const std::string& partition, const Digest256& digest) const {
  return absl::StrCat(key_prefix_, "pb:", hex16_of("baton state partition", partition), ":{", to_hex(digest), "}");
}

std::string StateTier::session_key(const std::string& tenant, const std::string& session_id) const {
  std::string identity = tenant;
  identity.push_back('\0');
  identity += session_id;
  return absl::StrCat(key_prefix_, "ss:", hex16_of("baton state tenant", tenant), ":{",
                      to_hex(sha256(absl::StrCat("baton state session", std::string(1, '\0'), identity))), "}");
}

std::string StateTier::seal(Kind kind, const std::string& key, std::string_view raw, bool exact) const {
  BATON_CHECK(raw.size() % 4 == 0 && key.size() <= UINT16_MAX);
  std::string stored;
  uint8_t flags = exact ? kFlagExact : 0;
  if (options_.compress) {
    const std::string planes = shuffle4(raw);
    stored.resize(ZSTD_compressBound(planes.size()));
    const size_t n = ZSTD_compress(stored.data(), stored.size(), planes.data(), planes.size(), kZstdLevel);
    BATON_CHECK(!ZSTD_isError(n), "zstd failed on a state value");
    stored.resize(n);
    flags |= kFlagShuffledZstd;
  } else {
    stored.assign(raw);
  }
  std::string value;
  value.reserve(4 + 4 + kFingerprintChars + 2 + key.size() + 16 + kChecksumBytes + stored.size());
  value.append(kMagic, 4);
  append_le(value, kVersion);
  append_le(value, static_cast<uint8_t>(kind));
  append_le(value, flags);
  std::string fingerprint = fingerprint_digest_;
  fingerprint.resize(kFingerprintChars, '\0');
  value += fingerprint;
  append_le(value, static_cast<uint16_t>(key.size()));
  value += key;
  append_le(value, static_cast<uint64_t>(raw.size()));
  append_le(value, static_cast<uint64_t>(stored.size()));
  append_checksum(value, value, stored);
  value += stored;
  return value;
}

absl::StatusOr<std::string> StateTier::open(Kind kind, const std::string& key, std::string_view value,
                                            bool* exact) const {
  const std::string_view whole = value;
  std::string_view in = value;
  if (in.size() < 4 || std::memcmp(in.data(), kMagic, 4) != 0) return absl::DataLossError("no BTST magic");
  in.remove_prefix(4);
  uint16_t version = 0;
  uint8_t stored_kind = 0, flags = 0;
  if (!read_le(in, &version) || !read_le(in, &stored_kind) || !read_le(in, &flags)) {
    return absl::DataLossError("truncated header");
  }
  if (version != kVersion) return absl::DataLossError(absl::StrCat("version ", version, ", expected ", kVersion));
  if (stored_kind != static_cast<uint8_t>(kind)) return absl::DataLossError("another kind of value");
  std::string fingerprint = fingerprint_digest_;
  fingerprint.resize(kFingerprintChars, '\0');
  if (in.size() < kFingerprintChars || in.substr(0, kFingerprintChars) != fingerprint) {
    return absl::DataLossError("another model's fingerprint");
  }
  in.remove_prefix(kFingerprintChars);
  uint16_t key_size = 0;
  if (!read_le(in, &key_size) || in.size() < key_size) return absl::DataLossError("truncated key");
  if (in.substr(0, key_size) != key) return absl::DataLossError("written under another key");
  in.remove_prefix(key_size);
  uint64_t raw_size = 0, stored_size = 0;
  if (!read_le(in, &raw_size) || !read_le(in, &stored_size)) return absl::DataLossError("truncated sizes");
  const size_t header_size = whole.size() - in.size();
  if (in.size() < kChecksumBytes || in.size() - kChecksumBytes != stored_size) {
    return absl::DataLossError(absl::StrFormat("payload of %d bytes, the header says %d",
                                               in.size() < kChecksumBytes ? 0 : in.size() - kChecksumBytes,
                                               stored_size));
  }
  std::string expected;
  append_checksum(expected, whole.substr(0, header_size), in.substr(kChecksumBytes));
  if (in.substr(0, kChecksumBytes) != expected) return absl::DataLossError("checksum mismatch");
  in.remove_prefix(kChecksumBytes);
  if (raw_size % 4 != 0 || raw_size > (uint64_t{1} << 34)) return absl::DataLossError("bad raw size");
  std::string raw;
  if ((flags & kFlagShuffledZstd) != 0) {
    std::string planes(raw_size, '\0');
    const size_t n = ZSTD_decompress(planes.data(), planes.size(), in.data(), in.size());
    if (ZSTD_isError(n) || n != raw_size) return absl::DataLossError("zstd payload does not decode to its size");
    raw = unshuffle4(planes);
  } else {
    if (in.size() != raw_size) return absl::DataLossError("raw payload size mismatch");
    raw.assign(in);
  }
  if (exact != nullptr) *exact = (flags & kFlagExact) != 0;
  return raw;
}

void StateTier::count(Kind kind, uint64_t StateTierKindStats::*field, uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  kind_stats(kind).*field += n;
}

std::optional<std::string> StateTier::fetch(Kind kind, const std::string& key, bool* exact) {
  // A node in backoff fails at once (UNAVAILABLE): a dead tier costs a miss, not a wait.
  const std::string_view argv[] = {"GET", key};
  absl::StatusOr<RedisReply> reply = redis_->command(key, argv);
  if (!reply.ok()) {
    count(kind, &StateTierKindStats::errors);
    BATON_DEBUG("state tier GET failed: %s", std::string(reply.status().message()).c_str());
    return std::nullopt;
  }
  if (reply->type == RedisReply::Type::kNil) {
    count(kind, &StateTierKindStats::misses);
    return std::nullopt;
  }
  absl::StatusOr<std::string> raw =
      reply->type == RedisReply::Type::kString ? open(kind, key, reply->str, exact)
                                               : absl::StatusOr<std::string>(absl::DataLossError("not a string"));
  if (!raw.ok()) {
    count(kind, &StateTierKindStats::corrupt);
    BATON_WARN("state tier value %s refused (a miss): %s", key.c_str(), std::string(raw.status().message()).c_str());
    return std::nullopt;
  }
  return std::move(*raw);
}

int64_t StateTier::load_prefix_blocks(const std::string& partition, std::span<const int32_t> tokens,
                                      int64_t max_tokens, F32KvCache& kv) {
  int64_t have = kv.size();
  BATON_CHECK(have % kPrefixDigestBlockTokens == 0);
  if (redis_ == nullptr) return have;
  const int64_t max_blocks =
      std::min({static_cast<int64_t>(tokens.size()), max_tokens, kv.capacity()}) / kPrefixDigestBlockTokens;
  if (have / kPrefixDigestBlockTokens >= max_blocks) return have;
  const std::vector<Digest256> digests = prefix_block_digests(tokens.first(max_blocks * kPrefixDigestBlockTokens));
  const int64_t block_floats = kPrefixDigestBlockTokens * geometry_.kv_dim();
  const size_t block_bytes = static_cast<size_t>(geometry_.n_layer) * 2 * block_floats * sizeof(float);
  for (int64_t block = have / kPrefixDigestBlockTokens; block < max_blocks; ++block) {
    const std::string key = prefix_block_key(partition, digests[static_cast<size_t>(block)]);
    std::optional<std::string> raw = fetch(Kind::kPrefixBlock, key, nullptr);
    if (!raw.has_value()) break;
    if (raw->size() != block_bytes) {
      count(Kind::kPrefixBlock, &StateTierKindStats::corrupt);
      BATON_WARN("state tier block %s has %zu bytes, this model's blocks %zu (a miss)", key.c_str(), raw->size(),
                 block_bytes);
      break;
    }
    count(Kind::kPrefixBlock, &StateTierKindStats::hits);
    const float* data = reinterpret_cast<const float*>(raw->data());
    for (int layer = 0; layer < geometry_.n_layer; ++layer) {
      const float* k = data + (int64_t{layer} * 2) * block_floats;
      const absl::Status stored = kv.store(layer, have, kPrefixDigestBlockTokens, k, k + block_floats);
      BATON_CHECK(stored.ok(), "copying L2 KV into the request cache failed");
    }
    have += kPrefixDigestBlockTokens;
  }
  kv.set_size(have);
  return have;
}

int64_t StateTier::load_session(const std::string& tenant, const std::string& session_id,
                                std::span<const int32_t> tokens, int64_t max_tokens, F32KvCache& kv, bool* exact) {
  BATON_CHECK(kv.size() == 0);
  if (redis_ == nullptr) return 0;
  const std::string key = session_key(tenant, session_id);
  bool stored_exact = true;
  std::optional<std::string> raw = fetch(Kind::kSession, key, &stored_exact);
  if (!raw.has_value()) return 0;
  std::string_view in = *raw;
  uint32_t n = 0;
  const uint64_t row_bytes = static_cast<uint64_t>(geometry_.kv_dim()) * sizeof(float);
  if (!read_le(in, &n) ||
      in.size() != uint64_t{n} * sizeof(int32_t) + uint64_t{n} * row_bytes * 2 * geometry_.n_layer) {
    count(Kind::kSession, &StateTierKindStats::corrupt);
    BATON_WARN("state tier session %s does not fit this model's geometry (a miss)", key.c_str());
    return 0;
  }
  std::vector<int32_t> history(n);
  std::memcpy(history.data(), in.data(), n * sizeof(int32_t));
  in.remove_prefix(n * sizeof(int32_t));
  // SessionCache's rule: only a request extending the stored history owns it.
  if (history.size() > tokens.size() || !std::equal(history.begin(), history.end(), tokens.begin())) {
    count(Kind::kSession, &StateTierKindStats::misses);
    return 0;
  }
  const int64_t reuse = std::min({static_cast<int64_t>(n), max_tokens, kv.capacity()});
  if (reuse <= 0) return 0;
  count(Kind::kSession, &StateTierKindStats::hits);
  const float* data = reinterpret_cast<const float*>(in.data());
  const int64_t layer_floats = int64_t{n} * geometry_.kv_dim();
  for (int layer = 0; layer < geometry_.n_layer; ++layer) {
    const float* k = data + int64_t{layer} * 2 * layer_floats;
    const absl::Status stored = kv.store(layer, 0, reuse, k, k + layer_floats);
    BATON_CHECK(stored.ok(), "copying L2 session KV into the request cache failed");
  }
  kv.set_size(reuse);
  if (exact != nullptr) *exact = stored_exact;
  return reuse;
}

void StateTier::store_prefix_blocks(const std::string& partition, std::span<const int32_t> tokens,
                                    std::shared_ptr<const F32KvCache> kv, int64_t first_block) {
  if (redis_ == nullptr) return;
  const int64_t blocks = static_cast<int64_t>(tokens.size()) / kPrefixDigestBlockTokens;
  if (first_block >= blocks) return;
  Write write;
  write.kind = Kind::kPrefixBlock;
  write.partition = partition;
  write.tokens.assign(tokens.begin(), tokens.begin() + blocks * kPrefixDigestBlockTokens);
  write.pinned_bytes = static_cast<uint64_t>(kv->capacity()) * geometry_.kv_dim() * 2 * geometry_.n_layer * 4;
  write.kv = std::move(kv);
  write.first_block = first_block;
  enqueue(std::move(write));
}

void StateTier::store_session(const std::string& tenant, const std::string& session_id, std::vector<int32_t> tokens,
                              std::shared_ptr<const F32KvCache> kv, bool exact, bool replace) {
  if (redis_ == nullptr) return;
  const uint64_t raw_bytes =
      4 + tokens.size() * (4 + static_cast<uint64_t>(geometry_.kv_dim()) * 2 * geometry_.n_layer * 4);
  if (raw_bytes > options_.max_session_bytes) {
    count(Kind::kSession, &StateTierKindStats::dropped_writes);
    BATON_DEBUG("session of %zu tokens (%llu bytes) is over the state tier's cap of %llu bytes: not written",
                tokens.size(), static_cast<unsigned long long>(raw_bytes),
                static_cast<unsigned long long>(options_.max_session_bytes));
    return;
  }
  Write write;
  write.kind = Kind::kSession;
  write.key = session_key(tenant, session_id);
  write.tokens = std::move(tokens);
  write.pinned_bytes = static_cast<uint64_t>(kv->capacity()) * geometry_.kv_dim() * 2 * geometry_.n_layer * 4;
  write.kv = std::move(kv);
  write.exact = exact;
  write.replace = replace;
  enqueue(std::move(write));
}

void StateTier::enqueue(Write write) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The same KV cache may back both kinds of write: pinned once per write
    // is an over-estimate, which only makes the bound stricter.
    if (queue_.size() >= options_.max_queued_writes ||
        (!queue_.empty() && queued_bytes_ + write.pinned_bytes > options_.max_queued_bytes)) {
      ++kind_stats(write.kind).dropped_writes;
      return;
    }
    queued_bytes_ += write.pinned_bytes;
    queue_.push_back(std::move(write));
  }
  work_cv_.notify_one();
}

void StateTier::writer_loop() {
  for (;;) {
    Write write;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything written
      write = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    if (write.kind == Kind::kPrefixBlock) {
      write_prefix_blocks(write);
    } else {
      write_session(write);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      queued_bytes_ -= write.pinned_bytes;
      busy_ = false;
    }
    write = Write{};  // unpin the KV before waiting again
    idle_cv_.notify_all();
  }
}

void StateTier::write_prefix_blocks(const Write& write) {
  const std::vector<Digest256> digests = prefix_block_digests(write.tokens);
  const int64_t block_floats = kPrefixDigestBlockTokens * geometry_.kv_dim();
  std::string raw(static_cast<size_t>(geometry_.n_layer) * 2 * block_floats * sizeof(float), '\0');
  for (size_t block = static_cast<size_t>(write.first_block); block < digests.size(); ++block) {
    const int64_t pos = static_cast<int64_t>(block) * kPrefixDigestBlockTokens;
    for (int layer = 0; layer < geometry_.n_layer; ++layer) {
      char* k = raw.data() + (int64_t{layer} * 2) * block_floats * sizeof(float);
      std::memcpy(k, write.kv->k_row(layer, pos), block_floats * sizeof(float));
      std::memcpy(k + block_floats * sizeof(float), write.kv->v_row(layer, pos), block_floats * sizeof(float));
    }
    const std::string key = prefix_block_key(write.partition, digests[block]);
    put(Kind::kPrefixBlock, key, seal(Kind::kPrefixBlock, key, raw, true), kPrefixDigestBlockTokens, true);
  }
}

std::string StateTier::raw_session(const std::vector<int32_t>& tokens, const F32KvCache& kv) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const size_t layer_bytes = static_cast<size_t>(n * geometry_.kv_dim()) * sizeof(float);
  std::string raw;
  raw.reserve(4 + tokens.size() * 4 + layer_bytes * 2 * geometry_.n_layer);
  append_le(raw, static_cast<uint32_t>(n));
  raw.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(int32_t));
  for (int layer = 0; layer < geometry_.n_layer; ++layer) {  // rows of one layer are contiguous
    raw.append(reinterpret_cast<const char*>(kv.k_row(layer, 0)), layer_bytes);
    raw.append(reinterpret_cast<const char*>(kv.v_row(layer, 0)), layer_bytes);
  }
  return raw;
}

void StateTier::write_session(const Write& write) {
  const std::string raw = raw_session(write.tokens, *write.kv);
  put(Kind::kSession, write.key, seal(Kind::kSession, write.key, raw, write.exact),
      static_cast<int64_t>(write.tokens.size()), write.replace);
}

void StateTier::put(Kind kind, const std::string& key, const std::string& value, int64_t tokens, bool replace) {
  const std::string ttl_ms = absl::StrCat(std::chrono::milliseconds(options_.ttl).count());
  std::vector<std::string_view> argv = {"SET", key, value};
  if (options_.ttl.count() > 0) argv.insert(argv.end(), {"PX", ttl_ms});
  if (!replace) argv.push_back("NX");
  absl::StatusOr<RedisReply> reply = redis_->command(key, argv);
  std::lock_guard<std::mutex> lock(mu_);
  StateTierKindStats& stats = kind_stats(kind);
  if (!reply.ok()) {
    ++stats.errors;
    BATON_DEBUG("state tier SET failed: %s", std::string(reply.status().message()).c_str());
    return;
  }
  if (reply->type == RedisReply::Type::kNil) return;  // NX and present: the owner's value stays
  ++stats.writes;
  stats.written_bytes += value.size();
  stats.written_tokens += static_cast<uint64_t>(tokens);
}

void StateTier::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
}

StateTierStats StateTier::stats() const {
  StateTierStats stats;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats.prefix = prefix_;
    stats.session = session_;
  }
  if (redis_ == nullptr) {
    stats.kind = "memory";
    stats.healthy = true;
    stats.detail = "in-process caches only (no --state redis://)";
    return stats;
  }
  stats.kind = "redis";
  stats.healthy = redis_->healthy();
  const RedisClientStats client = redis_->stats();
  stats.detail = absl::StrFormat("%s, %d node(s), %d down, %d errors", client.cluster ? "cluster" : "single node",
                                 client.nodes, client.nodes_down, client.errors);
  if (!client.last_error.empty()) absl::StrAppend(&stats.detail, "; last error: ", client.last_error);
  return stats;
}

}  // namespace baton
