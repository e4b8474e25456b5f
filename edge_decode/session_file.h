// Session files (format: session_store.h; the header message is
// v1::SessionFileHeader in proto/baton.proto). save_session_file and
// load_session_file are declared in session_store.h, the agent's contract;
// this file adds what SessionStore needs to index a directory: a file's
// header alone, checked, without its KV.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/kv/kv_codec_config.h"
#include "common/model/model_fingerprint.h"
#include "proto/baton.pb.h"

namespace baton {

// "<dir>/<session id>.session".
inline constexpr std::string_view kSessionFileSuffix = ".session";

// A session file's header, verified: magic, header checksum, format version,
// model fingerprint equal to the served one (FAILED_PRECONDITION naming the
// field otherwise), a valid id, token ids inside the vocabulary, kv_tokens <=
// tokens, four sampler words, a codec that converts.
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

}  // namespace baton
