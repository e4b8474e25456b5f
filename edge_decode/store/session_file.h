// Session files: one session (its tokens, sampler state and KV) on disk,
// what SessionStore (session_store.h) saves after every turn and indexes on
// start. The header message is v1::SessionFileHeader in proto/baton.proto.
//
// Format ("<dir>/<session id>.session"): magic "BATONSS1", then a
// delimited v1::SessionFileHeader (id, tokens, codec, pack id, sampler state,
// times, model fingerprint; from format 2 on the turn records and the
// truncation counters: a format 1 file loads as one turn starting at 0), then the XXH64 of the header's bytes (8 bytes,
// little-endian: the header has no other checksum), then the session's KV as
// a KV stream (the prefix-pack format of kv_pack_file.h, magic included,
// first_position 0, the session's store codec, zstd) covering
// [0, kv->size()), then a footer: XXH64 over the XXH64s of the stream's
// messages (8 bytes each, little-endian), 8 bytes little-endian, so a flipped
// byte anywhere is caught (the stream's own digests leave some header fields
// out). Nothing follows the header's checksum when the KV is empty.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_codec/kv_geometry.h"
#include "common/model/model_fingerprint.h"
#include "edge_decode/store/session.h"
#include "proto/baton.pb.h"

namespace baton {

// "<dir>/<session id>.session".
inline constexpr std::string_view kSessionFileSuffix = ".session";

// A session file's header, verified: magic, header checksum, format version,
// model fingerprint equal to the served one (FAILED_PRECONDITION naming the
// field otherwise), a valid id, token ids inside the vocabulary, kv_tokens <=
// tokens, turn records in order inside the tokens, four sampler words, a
// codec that converts.
struct SessionFileInfo {
  v1::SessionFileHeader header;
  KvCodecConfig codec;      // header.codec as a config
  uint64_t file_bytes = 0;  // size of the whole file

  // The tokens whose KV the file holds: header.tokens [0, kv_tokens).
  std::vector<int32_t> kv_tokens() const {
    return {header.tokens().begin(), header.tokens().begin() + header.kv_tokens()};
  }
};

// True for the name of an interrupted save's temp file,
// "<id>.session.tmp.<pid>.<n>" (what save_session_file writes before its
// rename); false for every "<id>.session", even when the id itself contains
// ".session.tmp.".
bool is_session_temp_file_name(std::string_view name);

// Reads and checks the header of a session file (not its KV). DATA_LOSS for
// damage (truncated, checksum), INVALID_ARGUMENT for a file that is not a
// session file, FAILED_PRECONDITION for another model or format version.
absl::StatusOr<SessionFileInfo> read_session_file_header(const std::string& path, const ModelFingerprint& model);

// Writes / reads one session file (used by SessionStore; exposed for tests
// and tools). save_session_file is atomic (temp, fsync, rename, fsync of the
// directory; mode 0600).
absl::Status save_session_file(const std::string& path, const Session& session, const ModelFingerprint& model);
absl::StatusOr<std::unique_ptr<Session>> load_session_file(const std::string& path, const ModelFingerprint& model,
                                                           const KvGeometry& geometry);

}  // namespace baton
