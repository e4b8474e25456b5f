#include "edge_decode/store/session_store.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <span>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/util/check.h"
#include "common/util/clock.h"
#include "common/util/log.h"
#include "edge_decode/store/session_file.h"
#include "common/util/errno_status.h"

namespace baton {

// ---------------------------------------------------------------------------
// SessionStore

struct SessionStore::Entry {
  std::string id;
  std::unique_ptr<Session> session;  // resident in memory; null when only on disk or checked out
  bool busy = false;                 // checked out, or reserved for a first turn
  bool known = false;                // a turn was committed (in memory or on disk); false: only reserved
  bool persisted = false;            // the file holds the last committed turn
  uint64_t file_bytes = 0;           // size of the file; 0 when none
  uint64_t checked_out_bytes = 0;    // KV bytes of the session while checked out
  uint64_t last_touch = 0;           // LRU clock value of the last checkout / commit
  // Summary of the last committed turn (kept while the session is on disk).
  uint32_t kv_tokens = 0;
  KvCodecConfig codec;
  std::string pack_id;
  Digest256 prefix_digest{};
  int64_t created_unix_ms = 0;
  int64_t last_used_unix_ms = 0;
  uint32_t turn_count = 0;
  uint32_t first_held_turn = 0;
  uint32_t dropped_turns = 0;
  uint64_t dropped_tokens = 0;

  void set_summary(const Session& s) {
    kv_tokens = static_cast<uint32_t>(s.kv ? s.kv->size() : 0);
    codec = s.codec;
    pack_id = s.pack_id;
    prefix_digest = baton::prefix_digest(std::span<const int32_t>(s.tokens.data(), kv_tokens));
    created_unix_ms = s.created_unix_ms;
    last_used_unix_ms = s.last_used_unix_ms;
    turn_count = s.turn_count;
    first_held_turn = s.turns.empty() ? 0 : s.turns.front().number;
    dropped_turns = s.dropped_turns;
    dropped_tokens = s.dropped_tokens;
  }
};

SessionStore::SessionStore(SessionStoreOptions options, ModelFingerprint model, KvGeometry geometry)
    : options_(std::move(options)), model_(std::move(model)), geometry_(geometry) {}

SessionStore::~SessionStore() {
  // Resident sessions whose file is stale (a failed save, a released first
  // turn) get one more try.
  if (options_.dir.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& entry : entries_) {
    if (entry->session == nullptr || entry->persisted) continue;
    const absl::Status st = save_session_file(path_for(entry->id), *entry->session, model_);
    if (!st.ok()) BATON_WARN("session %s not saved: %s", entry->id.c_str(), std::string(st.message()).c_str());
  }
}

std::string SessionStore::path_for(const std::string& id) const {
  return options_.dir + "/" + id + std::string(kSessionFileSuffix);
}

SessionStore::Entry* SessionStore::find_locked(const std::string& id) const {
  for (const auto& entry : entries_) {
    if (entry->id == id) return entry.get();
  }
  return nullptr;
}

void SessionStore::erase_locked(const Entry* entry) {
  entries_.erase(std::find_if(entries_.begin(), entries_.end(), [&](const auto& e) { return e.get() == entry; }));
}

void SessionStore::touch_locked(Entry& entry) { entry.last_touch = ++clock_; }

uint64_t SessionStore::memory_bytes_locked() const {
  uint64_t bytes = 0;
  for (const auto& entry : entries_) {
    bytes += entry->session ? entry->session->kv_bytes() : entry->busy ? entry->checked_out_bytes : 0;
  }
  return bytes;
}

void SessionStore::evict_locked(const Entry* keep) {
  if (options_.max_memory_bytes == 0 && options_.max_sessions <= 0) return;
  std::vector<const Entry*> unsaveable;  // stale files that could not be written: kept in memory
  for (;;) {
    int in_memory = 0;
    for (const auto& entry : entries_) in_memory += (entry->session != nullptr || (entry->busy && entry->known));
    const uint64_t bytes = memory_bytes_locked();
    const bool over = (options_.max_memory_bytes > 0 && bytes > options_.max_memory_bytes) ||
                      (options_.max_sessions > 0 && in_memory > options_.max_sessions);
    if (!over) return;
    Entry* victim = nullptr;
    for (const auto& entry : entries_) {
      if (entry->session == nullptr || entry->busy) continue;
      if (options_.dir.empty() && entry.get() == keep) continue;
      if (std::find(unsaveable.begin(), unsaveable.end(), entry.get()) != unsaveable.end()) continue;
      if (victim == nullptr || entry->last_touch < victim->last_touch) victim = entry.get();
    }
    if (victim == nullptr) return;  // only busy sessions left: they come back under the caps when returned
    if (options_.dir.empty()) {
      BATON_INFO("session %s dropped from memory (%llu KV bytes; no session dir)", victim->id.c_str(),
                 static_cast<unsigned long long>(victim->session->kv_bytes()));
      erase_locked(victim);
      continue;
    }
    if (!victim->persisted) {
      const absl::Status st = save_session_file(path_for(victim->id), *victim->session, model_);
      if (!st.ok()) {
        BATON_WARN("session %s stays in memory: saving it before eviction failed: %s", victim->id.c_str(),
                   std::string(st.message()).c_str());
        unsaveable.push_back(victim);
        continue;
      }
      victim->persisted = true;
      struct stat file_stat{};
      if (::stat(path_for(victim->id).c_str(), &file_stat) == 0) {
        victim->file_bytes = static_cast<uint64_t>(file_stat.st_size);
      }
    }
    BATON_DEBUG("session %s evicted from memory (%llu KV bytes)", victim->id.c_str(),
                static_cast<unsigned long long>(victim->session->kv_bytes()));
    victim->session.reset();
  }
}

void SessionStore::evict_files_locked(const Entry* keep) {
  if (options_.dir.empty() || (options_.max_files <= 0 && options_.max_disk_bytes == 0)) return;
  for (;;) {
    int files = 0;
    uint64_t bytes = 0;
    Entry* victim = nullptr;
    for (const auto& entry : entries_) {
      if (entry->file_bytes == 0) continue;
      ++files;
      bytes += entry->file_bytes;
      if (entry->busy || entry.get() == keep) continue;
      if (victim == nullptr || entry->last_touch < victim->last_touch) victim = entry.get();
    }
    const bool over = (options_.max_files > 0 && files > options_.max_files) ||
                      (options_.max_disk_bytes > 0 && bytes > options_.max_disk_bytes);
    if (!over || victim == nullptr) return;  // busy ones come back under the caps after their turn
    const std::string path = path_for(victim->id);
    BATON_INFO("session %s deleted (file of %llu bytes): the session dir is over its caps (%d files, %llu bytes; "
               "--max-session-files %d, --max-session-disk %llu)",
               victim->id.c_str(), static_cast<unsigned long long>(victim->file_bytes), files,
               static_cast<unsigned long long>(bytes), options_.max_files,
               static_cast<unsigned long long>(options_.max_disk_bytes));
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      BATON_WARN("session %s: deleting %s failed: %s", victim->id.c_str(), path.c_str(), std::strerror(errno));
    }
    erase_locked(victim);
  }
}

absl::Status SessionStore::open(std::vector<std::string>* refused) {
  if (options_.dir.empty()) return absl::OkStatus();
  std::error_code error;
  const bool created = std::filesystem::create_directories(options_.dir, error);
  if (error) {
    return absl::InternalError(
        absl::StrFormat("creating session dir %s: %s", options_.dir, error.message()));
  }
  struct stat dir_stat{};
  if (::stat(options_.dir.c_str(), &dir_stat) != 0) return errno_status(errno, "session dir " + options_.dir);
  if (!S_ISDIR(dir_stat.st_mode)) {
    return absl::FailedPreconditionError(absl::StrFormat("session dir %s is not a directory", options_.dir));
  }
  if (created) {
    if (::chmod(options_.dir.c_str(), 0700) != 0) return errno_status(errno, "chmod 0700 " + options_.dir);
  } else if ((dir_stat.st_mode & 077) != 0) {
    BATON_WARN("session dir %s has mode %04o: other users may read conversations (0700 recommended)",
               options_.dir.c_str(), dir_stat.st_mode & 07777);
  }

  std::vector<std::string> names;
  {
    DIR* dir = ::opendir(options_.dir.c_str());
    if (dir == nullptr) return errno_status(errno, "listing session dir " + options_.dir);
    while (const dirent* e = ::readdir(dir)) names.emplace_back(e->d_name);
    ::closedir(dir);
  }
  std::sort(names.begin(), names.end());
  struct Found {
    std::string id;
    SessionFileInfo info;
  };
  std::vector<Found> found;
  for (const std::string& name : names) {
    const std::string path = options_.dir + "/" + name;
    // "<id>.session.tmp.<pid>.<n>": a save that never completed (an id may
    // contain ".session.tmp." itself: its file is a session).
    if (is_session_temp_file_name(name)) {
      BATON_INFO("removing %s (an interrupted save)", path.c_str());
      ::unlink(path.c_str());
      continue;
    }
    if (name.size() <= kSessionFileSuffix.size() ||
        name.compare(name.size() - kSessionFileSuffix.size(), kSessionFileSuffix.size(), kSessionFileSuffix) != 0) {
      continue;
    }
    const std::string id = name.substr(0, name.size() - kSessionFileSuffix.size());
    auto refuse = [&](const std::string& why) {
      BATON_WARN("session file refused: %s", why.c_str());
      if (refused != nullptr) refused->push_back(why);
    };
    if (!is_valid_session_id(id)) {
      refuse(absl::StrFormat("%s: \"%s\" is not a valid session id", path, absl::CHexEscape(id)));
      continue;
    }
    auto info = read_session_file_header(path, model_);
    if (!info.ok()) {
      refuse(std::string(info.status().message()));
      continue;
    }
    if (info->header.session_id() != id) {
      refuse(absl::StrFormat("%s holds session \"%s\", not \"%s\"", path, info->header.session_id(), id));
      continue;
    }
    found.push_back({id, std::move(*info)});
  }
  // Oldest first, so the LRU clock orders them by their last use.
  std::stable_sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return a.info.header.last_used_unix_ms() < b.info.header.last_used_unix_ms();
  });
  std::lock_guard<std::mutex> lock(mu_);
  for (Found& f : found) {
    if (find_locked(f.id) != nullptr) continue;  // already known (open called twice)
    auto entry = std::make_unique<Entry>();
    const v1::SessionFileHeader& h = f.info.header;
    entry->id = f.id;
    entry->known = true;
    entry->persisted = true;
    entry->file_bytes = f.info.file_bytes;
    entry->kv_tokens = h.kv_tokens();
    entry->codec = f.info.codec;
    entry->pack_id = h.pack_id();
    entry->prefix_digest = prefix_digest(f.info.kv_tokens());
    entry->created_unix_ms = h.created_unix_ms();
    entry->last_used_unix_ms = h.last_used_unix_ms();
    // Format 1 files record no turns: one turn, as load_session_file reads them.
    const bool format1 = h.format_version() == 1 && h.tokens_size() > 0;
    entry->turn_count = format1 ? 1u : h.turn_count();
    entry->first_held_turn = format1 ? 1u : h.turns_size() > 0 ? h.turns(0).number() : 0u;
    entry->dropped_turns = h.dropped_turns();
    entry->dropped_tokens = h.dropped_tokens();
    touch_locked(*entry);
    entries_.push_back(std::move(entry));
  }
  evict_files_locked(nullptr);
  return absl::OkStatus();
}

bool SessionStore::contains(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry* entry = find_locked(id);
  return entry != nullptr && entry->known;
}

absl::StatusOr<std::unique_ptr<Session>> SessionStore::checkout(const std::string& id) {
  std::unique_lock<std::mutex> lock(mu_);
  Entry* entry = find_locked(id);
  if (entry == nullptr) return absl::NotFoundError(absl::StrFormat("session %s is unknown", id));
  if (entry->busy) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "session %s is in use: a turn is running on it (one turn at a time per session)", id));
  }
  entry->busy = true;
  touch_locked(*entry);
  if (entry->session != nullptr) {
    entry->checked_out_bytes = entry->session->kv_bytes();
    return std::move(entry->session);
  }
  // On disk only: load it without holding the lock (the entry is busy, so
  // nobody else touches its file meanwhile).
  BATON_CHECK(!options_.dir.empty() && entry->persisted);
  const std::string path = path_for(id);
  lock.unlock();
  auto session = load_session_file(path, model_, geometry_);
  if (session.ok() && (*session)->id != id) {
    session = absl::DataLossError(absl::StrFormat("session file %s holds session \"%s\"", path, (*session)->id));
  }
  lock.lock();
  entry = find_locked(id);
  BATON_CHECK(entry != nullptr && entry->busy);
  if (!session.ok()) {
    if (absl::IsNotFound(session.status())) {
      BATON_WARN("session %s: its file is gone: %s", id.c_str(), std::string(session.status().message()).c_str());
      erase_locked(entry);
    } else {
      entry->busy = false;
    }
    return session.status();
  }
  entry->checked_out_bytes = (*session)->kv_bytes();
  evict_locked(nullptr);
  return std::move(*session);
}

absl::Status SessionStore::commit(std::unique_ptr<Session> session) {
  if (session == nullptr) return absl::InvalidArgumentError("commit of a null session");
  const std::string id = session->id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Entry* entry = find_locked(id);
    if (entry == nullptr || !entry->busy) {
      return absl::FailedPreconditionError(
          absl::StrFormat("commit of session %s, which is not checked out or reserved", id));
    }
  }
  session->last_used_unix_ms = unix_ms_now();
  if (session->created_unix_ms == 0) session->created_unix_ms = session->last_used_unix_ms;
  // The room a turn reserved for max_tokens is given back: an idle session
  // holds (and ListSessions and the budget count) the KV of its tokens only;
  // the next turn reserves again.
  if (session->kv != nullptr) {
    if (absl::Status shrunk = session->kv->shrink_to(session->kv->size()); !shrunk.ok()) {
      BATON_WARN("session %s: %s", id.c_str(), std::string(shrunk.message()).c_str());
    }
  }
  // The entry is busy: this thread alone writes its file.
  absl::Status saved = absl::OkStatus();
  uint64_t file_bytes = 0;
  if (!options_.dir.empty()) {
    saved = save_session_file(path_for(id), *session, model_);
    struct stat file_stat{};
    if (::stat(path_for(id).c_str(), &file_stat) == 0) file_bytes = static_cast<uint64_t>(file_stat.st_size);
    if (!saved.ok()) {
      BATON_WARN("session %s: saving the turn failed (the previous file stays): %s", id.c_str(),
                 std::string(saved.message()).c_str());
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  Entry* entry = find_locked(id);
  BATON_CHECK(entry != nullptr && entry->busy);
  entry->set_summary(*session);
  entry->session = std::move(session);
  entry->busy = false;
  entry->known = true;
  entry->checked_out_bytes = 0;
  entry->persisted = !options_.dir.empty() && saved.ok();
  entry->file_bytes = file_bytes;
  touch_locked(*entry);
  evict_locked(entry);
  evict_files_locked(entry);
  return saved;
}

void SessionStore::release(std::unique_ptr<Session> session) {
  if (session == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  Entry* entry = find_locked(session->id);
  if (entry == nullptr || !entry->busy) {
    BATON_WARN("release of session %s, which is not checked out: dropped", session->id.c_str());
    return;
  }
  if (!entry->known) {
    // A first turn that did not complete: the session exists from now on,
    // in memory only until it is saved.
    entry->set_summary(*session);
    entry->known = true;
    entry->persisted = false;
  }
  entry->session = std::move(session);
  entry->busy = false;
  entry->checked_out_bytes = 0;
  evict_locked(entry);
  evict_files_locked(entry);
}

absl::Status SessionStore::reserve(const std::string& id) {
  if (!is_valid_session_id(id)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("session id \"%s\" is not valid ([A-Za-z0-9._-], 1..128 characters)", absl::CHexEscape(id)));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (const Entry* entry = find_locked(id)) {
    if (entry->busy) {
      return absl::FailedPreconditionError(absl::StrFormat("session %s is in use: a turn is running on it", id));
    }
    return absl::AlreadyExistsError(absl::StrFormat("session %s already exists", id));
  }
  auto entry = std::make_unique<Entry>();
  entry->id = id;
  entry->busy = true;
  touch_locked(*entry);
  entries_.push_back(std::move(entry));
  return absl::OkStatus();
}

void SessionStore::abandon(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry* entry = find_locked(id);
  if (entry == nullptr || !entry->busy) return;
  if (!entry->known || !entry->persisted) {
    erase_locked(entry);  // nothing of it remains
    return;
  }
  entry->busy = false;  // a checked-out session whose caller dropped it: its file holds the last turn
  entry->checked_out_bytes = 0;
}

absl::StatusOr<uint64_t> SessionStore::remove(const std::string& id) {
  std::unique_ptr<Session> dropped;  // freed outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  Entry* entry = find_locked(id);
  if (entry == nullptr || !entry->known) return absl::NotFoundError(absl::StrFormat("session %s is unknown", id));
  if (entry->busy) {
    return absl::FailedPreconditionError(
        absl::StrFormat("session %s is in use: a turn is running on it; delete it after the turn", id));
  }
  uint64_t freed = entry->session ? entry->session->kv_bytes() : 0;
  if (!options_.dir.empty()) {
    const std::string path = path_for(id);
    if (::unlink(path.c_str()) == 0) {
      freed += entry->file_bytes;
    } else if (errno != ENOENT) {
      return errno_status(errno, "deleting session file " + path);
    }
  }
  dropped = std::move(entry->session);
  erase_locked(entry);
  return freed;
}

std::vector<SessionSummary> SessionStore::list() const {
  std::vector<std::pair<uint64_t, SessionSummary>> rows;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& entry : entries_) {
      if (!entry->known) continue;
      SessionSummary s;
      s.id = entry->id;
      s.token_count = entry->kv_tokens;
      s.kv_bytes = entry->session ? entry->session->kv_bytes() : entry->busy ? entry->checked_out_bytes : 0;
      s.codec = entry->codec;
      s.pack_id = entry->pack_id;
      s.prefix_digest = entry->prefix_digest;
      s.created_unix_ms = entry->created_unix_ms;
      s.last_used_unix_ms = entry->last_used_unix_ms;
      s.persisted = entry->persisted;
      s.busy = entry->busy;
      s.turn_count = entry->turn_count;
      s.first_held_turn = entry->first_held_turn;
      s.dropped_turns = entry->dropped_turns;
      s.dropped_tokens = entry->dropped_tokens;
      rows.emplace_back(entry->last_touch, std::move(s));
    }
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<SessionSummary> out;
  out.reserve(rows.size());
  for (auto& row : rows) out.push_back(std::move(row.second));
  return out;
}

size_t SessionStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<size_t>(
      std::count_if(entries_.begin(), entries_.end(), [](const auto& entry) { return entry->known; }));
}

uint64_t SessionStore::busy_memory_bytes_except(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t bytes = 0;
  for (const auto& entry : entries_) {
    if (entry->busy && entry->id != id) bytes += entry->checked_out_bytes;
  }
  return bytes;
}

size_t SessionStore::file_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<size_t>(
      std::count_if(entries_.begin(), entries_.end(), [](const auto& e) { return e->file_bytes > 0; }));
}

uint64_t SessionStore::memory_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return memory_bytes_locked();
}

}  // namespace baton
