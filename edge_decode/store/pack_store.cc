#include "edge_decode/store/pack_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <utility>

#include <google/protobuf/io/coded_stream.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_fingerprint.h"
#include "common/kv_stream/kv_pack_file.h"
#include "common/kv_stream/kv_stream_reader.h"
#include "common/util/check.h"
#include "common/util/log.h"
#include "common/util/errno_status.h"

namespace baton {
namespace {

constexpr std::string_view kPackSuffix = ".batonkv";
constexpr std::string_view kPulledSuffix = ".pulled";  // after kPackSuffix
// Largest pack header read when indexing (token ids: ~5 bytes each).
constexpr uint64_t kMaxPackHeaderBytes = uint64_t{64} << 20;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Pack ids: [A-Za-z0-9._-], 1..128 characters, not "." or "..".
bool is_valid_pack_id(const std::string& id) {
  if (id.empty() || id.size() > 128 || id == "." || id == "..") return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
  });
}

uint64_t file_size(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// Nanoseconds since the epoch of the file's mtime; 0 when it has none.
uint64_t mtime_ns(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000u + static_cast<uint64_t>(st.st_mtim.tv_nsec);
}

absl::StatusOr<PackSummary> summary_of(const v1::KvHeader& header, const std::string& pack_id) {
  PackSummary s;
  s.pack_id = pack_id;
  s.description = header.description();
  s.tokens.assign(header.token_ids().begin(), header.token_ids().end());
  if (header.prefix_digest().size() != s.prefix_digest.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pack %s: prefix digest has %u bytes; expected 32", pack_id, header.prefix_digest().size()));
  }
  std::copy(header.prefix_digest().begin(), header.prefix_digest().end(), s.prefix_digest.begin());
  BATON_ASSIGN_OR_RETURN(s.codec, kv_codec_config_from_params(header.codec()));
  return s;
}

}  // namespace

PackStore::PackStore(PackStoreOptions options, ModelFingerprint model, KvGeometry geometry, KvRope rope)
    : options_(std::move(options)), model_(std::move(model)), geometry_(geometry), rope_(rope) {}

std::string PackStore::path_for(const std::string& pack_id) const {
  return options_.dir + "/" + pack_id + std::string(kPackSuffix);
}

absl::StatusOr<PackSummary> PackStore::index_file(const std::string& path, const std::string& pack_id) const {
  BATON_ASSIGN_OR_RETURN(const v1::KvHeader header, read_kv_pack_header(path, kMaxPackHeaderBytes));
  BATON_ASSIGN_OR_RETURN(const KvFingerprint fingerprint, kv_fingerprint_from_header(header));
  BATON_RETURN_IF_ERROR(compare_model_fingerprints(model_, fingerprint.model, "pack " + path));
  if (header.first_position() != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s starts at position %u; a prefix pack starts at 0", path, header.first_position()));
  }
  if (header.token_count() == 0 || static_cast<uint64_t>(header.token_ids_size()) != header.token_count()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: header has %d token ids for token_count %u", path,
                                                      header.token_ids_size(), header.token_count()));
  }
  BATON_ASSIGN_OR_RETURN(PackSummary summary, summary_of(header, pack_id));
  BATON_RETURN_IF_ERROR(summary.codec.validate(geometry_));
  summary.path = path;
  summary.file_bytes = file_size(path);
  return summary;
}

absl::Status PackStore::open(std::vector<std::string>* refused) {
  if (options_.dir.empty()) return absl::OkStatus();
  std::error_code error;
  std::filesystem::create_directories(options_.dir, error);
  if (error) return absl::InternalError(absl::StrFormat("creating pack dir %s: %s", options_.dir, error.message()));
  std::vector<std::string> names;
  {
    DIR* dir = ::opendir(options_.dir.c_str());
    if (dir == nullptr) return errno_status(errno, "listing pack dir " + options_.dir);
    while (const dirent* e = ::readdir(dir)) names.emplace_back(e->d_name);
    ::closedir(dir);
  }
  std::sort(names.begin(), names.end());
  std::vector<PackSummary> packs;
  std::vector<std::pair<uint64_t, std::string>> pulled;  // (marker mtime, pack id)
  for (const std::string& name : names) {
    const std::string path = options_.dir + "/" + name;
    // "<id>.batonkv.tmp.<pid>.<n>": a pull that never completed.
    if (name.find(std::string(kPackSuffix) + ".tmp.") != std::string::npos) {
      BATON_INFO("removing %s (an interrupted pull)", path.c_str());
      ::unlink(path.c_str());
      continue;
    }
    if (ends_with(name, std::string(kPackSuffix) + std::string(kPulledSuffix))) {
      const std::string pack_path = path.substr(0, path.size() - kPulledSuffix.size());
      if (::access(pack_path.c_str(), F_OK) != 0) ::unlink(path.c_str());  // its pack is gone
      continue;
    }
    if (!ends_with(name, kPackSuffix)) continue;
    const std::string id = name.substr(0, name.size() - kPackSuffix.size());
    auto refuse = [&](const std::string& why) {
      BATON_WARN("pack refused: %s", why.c_str());
      if (refused != nullptr) refused->push_back(why);
    };
    if (!is_valid_pack_id(id)) {
      refuse(absl::StrFormat("%s: \"%s\" is not a valid pack id", path, absl::CHexEscape(id)));
      continue;
    }
    auto summary = index_file(path, id);
    if (!summary.ok()) {
      refuse(absl::StrFormat("%s: %s", path, std::string(summary.status().message())));
      continue;
    }
    const std::string marker = path + std::string(kPulledSuffix);
    if (::access(marker.c_str(), F_OK) == 0) {
      summary->pulled = true;
      pulled.emplace_back(mtime_ns(marker), id);
    }
    packs.push_back(std::move(*summary));
  }
  std::sort(pulled.begin(), pulled.end());  // least recently used first
  std::lock_guard<std::mutex> lock(mu_);
  packs_ = std::move(packs);
  last_use_.clear();
  for (const auto& [mtime, id] : pulled) last_use_[id] = ++clock_;
  return absl::OkStatus();
}

absl::StatusOr<PackSummary> PackStore::find(const std::string& pack_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const PackSummary& p : packs_) {
    if (p.pack_id == pack_id) return p;
  }
  return absl::NotFoundError(options_.dir.empty()
                                 ? absl::StrFormat("pack %s is unknown: no pack dir is configured", pack_id)
                                 : absl::StrFormat("pack %s is unknown (%d packs in %s)", pack_id, packs_.size(),
                                                   options_.dir));
}

std::vector<PackSummary> PackStore::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  return packs_;
}

absl::StatusOr<KvSegmentLoad> PackStore::load_into(const std::string& pack_id, KvCache& target) const {
  BATON_ASSIGN_OR_RETURN(const PackSummary pack, find(pack_id));
  if (target.size() != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "pack %s loads into an empty KV cache; this one holds %d tokens", pack_id, target.size()));
  }
  if (static_cast<int64_t>(pack.tokens.size()) > target.capacity()) {
    return absl::ResourceExhaustedError(absl::StrFormat("pack %s has %d tokens; the KV cache holds at most %d",
                                                        pack_id, pack.tokens.size(), target.capacity()));
  }
  if (pack.pulled) {
    std::lock_guard<std::mutex> lock(mu_);
    last_use_[pack_id] = ++clock_;
  }
  // Pinned to what the index says, so a file replaced behind our back is
  // refused rather than loaded as another prefix.
  KvStreamExpectation expected;
  expected.model = model_;
  expected.first_position = 0;
  expected.token_ids = pack.tokens;
  expected.prefix_digest = pack.prefix_digest;
  // load_kv_segment decodes every block before writing: no trial decode here.
  BATON_ASSIGN_OR_RETURN(const KvSegment segment,
                         read_kv_pack_file(pack.path, expected,
                                           kv_reader_options_with_codec(geometry_, {}, /*trial_decode=*/false)));
  BATON_ASSIGN_OR_RETURN(KvSegmentLoad load, load_kv_segment(segment, &rope_, target));
  if (pack.pulled) {
    // The marker's mtime is the pack's last use across restarts.
    ::utimensat(AT_FDCWD, (pack.path + std::string(kPulledSuffix)).c_str(), nullptr, 0);
  }
  return load;
}

uint64_t PackStore::pulled_bytes_locked() const {
  uint64_t bytes = 0;
  for (const PackSummary& p : packs_) bytes += p.pulled ? p.file_bytes : 0;
  return bytes;
}

void PackStore::evict_pulled_locked(const std::string& keep) {
  if (options_.max_pulled_bytes == 0) return;
  while (pulled_bytes_locked() > options_.max_pulled_bytes) {
    auto victim = packs_.end();
    uint64_t victim_use = 0;
    for (auto it = packs_.begin(); it != packs_.end(); ++it) {
      if (!it->pulled || it->pack_id == keep) continue;
      const uint64_t use = last_use_.count(it->pack_id) ? last_use_.at(it->pack_id) : 0;
      if (victim == packs_.end() || use < victim_use) {
        victim = it;
        victim_use = use;
      }
    }
    if (victim == packs_.end()) return;
    BATON_INFO("deleting pulled pack %s (%llu bytes): pulled packs are over the %llu-byte cap",
               victim->pack_id.c_str(), static_cast<unsigned long long>(victim->file_bytes),
               static_cast<unsigned long long>(options_.max_pulled_bytes));
    if (::unlink(victim->path.c_str()) != 0 && errno != ENOENT) {
      BATON_WARN("deleting %s: %s", victim->path.c_str(), std::strerror(errno));
    }
    ::unlink((victim->path + std::string(kPulledSuffix)).c_str());
    last_use_.erase(victim->pack_id);
    packs_.erase(victim);
  }
}

absl::Status PackStore::check_pulled_header(const v1::KvHeader& header) const {
  BATON_ASSIGN_OR_RETURN(const uint64_t raw_bytes, kv_header_raw_bytes(header, geometry_));
  if (options_.max_pulled_bytes > 0 && raw_bytes > options_.max_pulled_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the pulled pack's header declares %u tokens = %u bytes of KV; one pulled pack may take %u bytes "
        "(--max-pulled-pack)",
        header.token_count(), raw_bytes, options_.max_pulled_bytes));
  }
  if (options_.max_pack_memory_bytes > 0 && raw_bytes > options_.max_pack_memory_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the pulled pack's header declares %u tokens = %u bytes of KV; the KV memory budget is %u bytes",
        header.token_count(), raw_bytes, options_.max_pack_memory_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<PackSummary> PackStore::add_from_stream(const std::string& pack_id, const KvMessageSource& source,
                                                       bool overwrite,
                                                       const std::function<void(uint32_t, uint64_t)>& progress) {
  if (options_.dir.empty()) return absl::FailedPreconditionError("no pack dir is configured (--packs DIR)");
  if (!is_valid_pack_id(pack_id)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pack id \"%s\" is not valid ([A-Za-z0-9._-], 1..128 characters)", absl::CHexEscape(pack_id)));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pulling_.count(pack_id)) {
      return absl::AlreadyExistsError(absl::StrFormat("pack %s is being pulled already", pack_id));
    }
    const bool exists = std::any_of(packs_.begin(), packs_.end(), [&](const auto& p) { return p.pack_id == pack_id; });
    if (exists && !overwrite) {
      return absl::AlreadyExistsError(absl::StrFormat("pack %s exists; ask for overwrite to replace it", pack_id));
    }
    pulling_.insert(pack_id);
  }
  struct Unmark {
    PackStore* store;
    const std::string& id;
    ~Unmark() {
      std::lock_guard<std::mutex> lock(store->mu_);
      store->pulling_.erase(id);
    }
  } unmark{this, pack_id};

  const std::string path = path_for(pack_id);
  // Until commit() the messages go to a temp file that the writer removes on
  // any error; it is made once the header passed the caps.
  std::unique_ptr<KvPackFileWriter> writer;
  KvStreamExpectation expected;
  expected.model = model_;
  expected.first_position = 0;
  KvStreamReaderOptions reader_options;
  reader_options.check_header = [this](const v1::KvHeader& header) { return check_pulled_header(header); };
  KvStreamReader reader(std::move(expected), kv_reader_options_with_codec(geometry_, std::move(reader_options)));
  uint64_t file_bytes = kKvPackMagic.size();
  uint64_t wire_bytes = 0;
  uint32_t blocks = 0;
  for (;;) {
    auto message = source();
    if (!message.ok()) return reader.abandon(message.status());
    if (!message->has_value()) break;
    const bool is_block = (*message)->has_block();
    const size_t message_bytes = (*message)->ByteSizeLong();
    // Checked before it is written: the reader bounds the message size.
    BATON_RETURN_IF_ERROR(reader.consume(**message));
    if (writer == nullptr) {  // the header passed the caps: from here on bytes go to disk
      BATON_ASSIGN_OR_RETURN(writer, KvPackFileWriter::create(path));
    }
    BATON_RETURN_IF_ERROR(writer->append(**message));
    wire_bytes += message_bytes;
    file_bytes += google::protobuf::io::CodedOutputStream::VarintSize32(static_cast<uint32_t>(message_bytes)) +
                  message_bytes;
    if (is_block) {
      ++blocks;
      if (progress) progress(blocks, wire_bytes);
    }
  }
  BATON_ASSIGN_OR_RETURN(KvSegment segment, reader.commit());
  BATON_CHECK(writer != nullptr, "a committed stream had no header");
  BATON_ASSIGN_OR_RETURN(PackSummary summary, summary_of(segment.header, pack_id));
  segment = KvSegment{};  // the payloads are on disk now
  summary.path = path;
  summary.file_bytes = file_bytes;
  summary.pulled = true;
  if (options_.max_pulled_bytes > 0 && file_bytes > options_.max_pulled_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat("pack %s has %u bytes; pulled packs may take %u bytes",
                                                        pack_id, file_bytes, options_.max_pulled_bytes));
  }

  std::lock_guard<std::mutex> lock(mu_);
  BATON_RETURN_IF_ERROR(writer->commit());
  const std::string marker = path + std::string(kPulledSuffix);
  const int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) {
    ::close(fd);
    ::utimensat(AT_FDCWD, marker.c_str(), nullptr, 0);
  } else {
    BATON_WARN("pack %s: cannot mark it as pulled (%s): it will not count against the cap after a restart",
               pack_id.c_str(), std::strerror(errno));
  }
  auto it = std::find_if(packs_.begin(), packs_.end(), [&](const auto& p) { return p.pack_id == pack_id; });
  if (it != packs_.end()) {
    *it = summary;
  } else {
    packs_.push_back(summary);
  }
  last_use_[pack_id] = ++clock_;
  evict_pulled_locked(pack_id);
  return summary;
}

}  // namespace baton
