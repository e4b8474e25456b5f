#include "edge_decode/store/session_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <string_view>
#include <utility>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/kv_codec/kv_codec.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_fingerprint.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/kv_stream/kv_pack_file.h"
#include "common/kv_stream/kv_stream.h"
#include "common/kv_stream/kv_stream_reader.h"
#include "common/kv_stream/kv_stream_writer.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/kv_cache/quantized_kv_cache.h"
#include "common/util/atomic_file.h"
#include "common/util/check.h"
#include "common/util/errno_status.h"

namespace baton {
namespace {

namespace pbio = google::protobuf::io;

constexpr std::string_view kSessionMagic = "BATONSS1";
// Format 2 added the turn records (SessionFileHeader.turns and the
// truncation counters); format 1 files load as one turn starting at 0.
constexpr uint32_t kSessionFormatVersion = 2;
constexpr uint32_t kOldestSessionFormatVersion = 1;
// zstd level of the KV in session files: the store's codes are already
// quantized, so a fast level gets most of what zstd can (a turn's save sits
// between two turns).
constexpr int kSessionZstdLevel = 1;
// Largest SessionFileHeader accepted (a million tokens take ~5 MiB).
constexpr uint32_t kMaxSessionHeaderBytes = 64u << 20;

void put_le64(uint64_t value, char out[8]) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

bool is_decimal(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Errors of the file's KV section become DATA_LOSS: its model was checked in
// the header, so anything else wrong in it is damage (I/O and limits keep
// their codes).
absl::Status kv_section_error(const absl::Status& status, const std::string& path) {
  absl::StatusCode code = status.code();
  if (code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kFailedPrecondition ||
      code == absl::StatusCode::kOutOfRange) {
    code = absl::StatusCode::kDataLoss;
  }
  return absl::Status(code, absl::StrFormat("session file %s, KV: %s", path, std::string(status.message())));
}

uint32_t model_n_vocab(const ModelFingerprint& model) {
  const std::string* text = model.find("n_vocab");
  uint32_t value = 0;
  if (text == nullptr || !absl::SimpleAtoi(*text, &value)) return UINT32_MAX;
  return value;
}


// Reads and checks the magic, header and header checksum; `input` is left at
// the KV section.
absl::StatusOr<SessionFileInfo> read_session_header(pbio::ZeroCopyInputStream* input, const std::string& path,
                                                    const ModelFingerprint& model) {
  SessionFileInfo info;
  {
    pbio::CodedInputStream coded(input);
    std::string magic;
    if (!coded.ReadString(&magic, static_cast<int>(kSessionMagic.size()))) {
      return absl::DataLossError(absl::StrFormat("session file %s is truncated: it has no %u-byte magic", path,
                                                 kSessionMagic.size()));
    }
    if (magic != kSessionMagic) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s is not a session file: it does not start with the magic \"%s\"", path, std::string(kSessionMagic)));
    }
    uint32_t size = 0;
    if (!coded.ReadVarint32(&size)) {
      return absl::DataLossError(absl::StrFormat("session file %s is truncated in its header length", path));
    }
    if (size > kMaxSessionHeaderBytes) {
      return absl::DataLossError(absl::StrFormat("session file %s: header of %u bytes; the limit is %u", path, size,
                                                 kMaxSessionHeaderBytes));
    }
    std::string header_bytes;
    uint64_t checksum = 0;
    if (!coded.ReadString(&header_bytes, static_cast<int>(size)) || !coded.ReadLittleEndian64(&checksum)) {
      return absl::DataLossError(absl::StrFormat("session file %s is truncated in its %u-byte header", path, size));
    }
    if (kv_payload_checksum(header_bytes) != checksum) {
      return absl::DataLossError(absl::StrFormat("session file %s: header checksum mismatch (the file is damaged)",
                                                 path));
    }
    if (!info.header.ParseFromString(header_bytes)) {
      return absl::DataLossError(absl::StrFormat("session file %s: header does not parse", path));
    }
  }
  const v1::SessionFileHeader& h = info.header;
  if (h.format_version() < kOldestSessionFormatVersion || h.format_version() > kSessionFormatVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "session file %s has format version %u; this build reads versions %u to %u", path, h.format_version(),
        kOldestSessionFormatVersion, kSessionFormatVersion));
  }
  BATON_ASSIGN_OR_RETURN(const ModelFingerprint theirs, model_fingerprint_from_proto(h.model()));
  BATON_RETURN_IF_ERROR(compare_model_fingerprints(model, theirs, "session file " + path));
  if (!is_valid_session_id(h.session_id())) {
    return absl::DataLossError(absl::StrFormat("session file %s: session id \"%s\" is not valid", path,
                                               absl::CHexEscape(h.session_id())));
  }
  if (h.kv_tokens() > static_cast<uint32_t>(h.tokens_size())) {
    return absl::DataLossError(absl::StrFormat("session file %s: KV of %u tokens for a session of %d tokens", path,
                                               h.kv_tokens(), h.tokens_size()));
  }
  const uint32_t n_vocab = model_n_vocab(model);
  for (int i = 0; i < h.tokens_size(); ++i) {
    if (h.tokens(i) >= n_vocab || h.tokens(i) > static_cast<uint32_t>(INT32_MAX)) {
      return absl::DataLossError(absl::StrFormat("session file %s: token %d is %u; the vocabulary has %u", path, i,
                                                 h.tokens(i), n_vocab));
    }
  }
  // Turn records: first tokens ascending inside the tokens, numbers
  // ascending and at most turn_count; the pack inside the tokens.
  for (int i = 0; i < h.turns_size(); ++i) {
    const v1::SessionTurn& turn = h.turns(i);
    const bool ordered = i == 0 || (turn.first_token() > h.turns(i - 1).first_token() &&
                                    turn.number() > h.turns(i - 1).number());
    if (turn.first_token() >= static_cast<uint32_t>(h.tokens_size()) || turn.number() == 0 ||
        turn.number() > h.turn_count() || !ordered) {
      return absl::DataLossError(absl::StrFormat(
          "session file %s: turn record %d (turn %u from token %u) is out of order or outside the %d tokens and "
          "%u turns", path, i, turn.number(), turn.first_token(), h.tokens_size(), h.turn_count()));
    }
  }
  if (h.pack_tokens() > static_cast<uint32_t>(h.tokens_size())) {
    return absl::DataLossError(absl::StrFormat("session file %s: a pack of %u tokens in a session of %d tokens", path,
                                               h.pack_tokens(), h.tokens_size()));
  }
  if (h.rng_state_size() != 4) {
    return absl::DataLossError(absl::StrFormat("session file %s: sampler state has %d words; expected 4", path,
                                               h.rng_state_size()));
  }
  auto codec = kv_codec_config_from_params(h.codec());
  if (!codec.ok()) return absl::DataLossError(absl::StrFormat("session file %s: %s", path, codec.status().message()));
  info.codec = *codec;
  return info;
}


// Reads the KV section: the pack magic, delimited messages through `reader`
// up to the trailer, then the footer (XXH64 over the messages' XXH64s), and
// nothing after it. The footer covers what the stream's own checksums and
// digests leave out (fields outside the fingerprint digests).
absl::StatusOr<KvSegment> read_session_kv(pbio::ZeroCopyInputStream* input, KvStreamReader* reader) {
  const uint64_t max_message_bytes = std::min<uint64_t>(reader->options().max_message_bytes, INT_MAX);
  std::string record_checksums;
  {
    pbio::CodedInputStream coded(input);
    std::string magic;
    if (!coded.ReadString(&magic, static_cast<int>(kKvPackMagic.size()))) {
      return reader->abandon(absl::DataLossError("the file ends before its KV section"));
    }
    if (magic != kKvPackMagic) return reader->abandon(absl::DataLossError("the KV section has no pack magic"));
  }
  for (int index = 0; !reader->complete(); ++index) {
    // A coded stream per message: one stream stops at 2 GiB.
    pbio::CodedInputStream coded(input);
    uint32_t size = 0;
    if (!coded.ReadVarint32(&size)) {
      return reader->abandon(absl::DataLossError(absl::StrFormat("the file ends before KV message %d", index)));
    }
    if (size > max_message_bytes) {
      return reader->abandon(absl::DataLossError(absl::StrFormat(
          "KV message %d has %u bytes; the limit is %u (max_message_bytes)", index, size, max_message_bytes)));
    }
    std::string bytes;
    if (!coded.ReadString(&bytes, static_cast<int>(size))) {
      return reader->abandon(absl::DataLossError(absl::StrFormat("KV message %d is truncated", index)));
    }
    char checksum[8];
    put_le64(kv_payload_checksum(bytes), checksum);
    record_checksums.append(checksum, 8);
    v1::KvStreamMessage message;
    if (!message.ParseFromString(bytes)) {
      return reader->abandon(absl::DataLossError(absl::StrFormat("KV message %d does not parse", index)));
    }
    BATON_RETURN_IF_ERROR(reader->consume(std::move(message)));
  }
  {
    pbio::CodedInputStream coded(input);
    uint64_t footer = 0;
    if (!coded.ReadLittleEndian64(&footer)) {
      return reader->abandon(absl::DataLossError("the file ends before the KV section's checksum"));
    }
    if (footer != kv_payload_checksum(record_checksums)) {
      return reader->abandon(absl::DataLossError("KV section checksum mismatch (the file is damaged)"));
    }
    uint8_t extra = 0;
    if (coded.ReadRaw(&extra, 1)) return reader->abandon(absl::DataLossError("bytes after the KV section"));
  }
  return reader->commit();
}

}  // namespace

bool is_session_temp_file_name(std::string_view name) {
  const std::string infix = std::string(kSessionFileSuffix) + std::string(kAtomicFileTempInfix);
  const size_t at = name.rfind(infix);
  if (at == std::string_view::npos || at == 0) return false;
  const std::string_view pid_and_counter = name.substr(at + infix.size());  // "<pid>.<n>"
  const size_t dot = pid_and_counter.find('.');
  return dot != std::string_view::npos && is_decimal(pid_and_counter.substr(0, dot)) &&
         is_decimal(pid_and_counter.substr(dot + 1));
}

absl::StatusOr<SessionFileInfo> read_session_file_header(const std::string& path, const ModelFingerprint& model) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, "opening session file " + path);
  pbio::FileInputStream input(fd);
  input.SetCloseOnDelete(true);
  struct stat st{};
  const uint64_t file_bytes = ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  auto info = read_session_header(&input, path, model);
  if (input.GetErrno() != 0) return errno_status(input.GetErrno(), "reading session file " + path);
  if (info.ok()) info->file_bytes = file_bytes;
  return info;
}

// ---------------------------------------------------------------------------
// Writing and loading whole files

absl::Status save_session_file(const std::string& path, const Session& session, const ModelFingerprint& model) {
  if (!is_valid_session_id(session.id)) {
    return absl::InvalidArgumentError(absl::StrFormat("session id \"%s\" is not valid ([A-Za-z0-9._-], 1..128)",
                                                      absl::CHexEscape(session.id)));
  }
  const int64_t kv_tokens = session.kv ? session.kv->size() : 0;
  if (kv_tokens > static_cast<int64_t>(session.tokens.size())) {
    return absl::InvalidArgumentError(absl::StrFormat("session %s: KV holds %d tokens but the session has %d",
                                                      session.id, kv_tokens, session.tokens.size()));
  }
  v1::SessionFileHeader header;
  header.set_format_version(kSessionFormatVersion);
  header.set_session_id(session.id);
  header.mutable_tokens()->Reserve(static_cast<int>(session.tokens.size()));
  for (size_t i = 0; i < session.tokens.size(); ++i) {
    if (session.tokens[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("session %s: token %d is %d", session.id, i, session.tokens[i]));
    }
    header.add_tokens(static_cast<uint32_t>(session.tokens[i]));
  }
  BATON_ASSIGN_OR_RETURN(*header.mutable_codec(), kv_codec_params(session.codec));
  header.set_pack_id(session.pack_id);
  for (uint64_t word : session.sampler.rng) header.add_rng_state(word);
  for (int32_t token : session.sampler.recent) header.add_recent_tokens(static_cast<uint32_t>(token));
  header.set_created_unix_ms(session.created_unix_ms);
  header.set_last_used_unix_ms(session.last_used_unix_ms);
  header.set_kv_tokens(static_cast<uint32_t>(kv_tokens));
  for (const SessionTurn& turn : session.turns) {
    v1::SessionTurn* out = header.add_turns();
    out->set_number(turn.number);
    out->set_first_token(turn.first_token);
  }
  header.set_turn_count(session.turn_count);
  header.set_dropped_turns(session.dropped_turns);
  header.set_dropped_tokens(session.dropped_tokens);
  header.set_truncations(session.truncations);
  header.set_pack_tokens(session.pack_tokens);
  *header.mutable_model() = model_fingerprint_to_proto(model);
  const std::string header_bytes = header.SerializeAsString();
  if (header_bytes.size() > kMaxSessionHeaderBytes) {
    return absl::ResourceExhaustedError(absl::StrFormat("session %s: header of %u bytes; the limit is %u",
                                                        session.id, header_bytes.size(), kMaxSessionHeaderBytes));
  }

  BATON_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFile> file, AtomicFile::create(path));
  BATON_RETURN_IF_ERROR(file->write(kSessionMagic));
  {
    std::string length;
    pbio::StringOutputStream output(&length);
    pbio::CodedOutputStream coded(&output);
    coded.WriteVarint32(static_cast<uint32_t>(header_bytes.size()));
    coded.Trim();
    BATON_RETURN_IF_ERROR(file->write(length));
  }
  BATON_RETURN_IF_ERROR(file->write(header_bytes));
  char checksum[8];
  put_le64(kv_payload_checksum(header_bytes), checksum);
  BATON_RETURN_IF_ERROR(file->write(std::string_view(checksum, 8)));

  if (kv_tokens > 0) {
    const QuantizedKvCache& kv = *session.kv;
    KvStreamHeaderInfo info;
    info.model = model;
    info.codec = kv.config();
    info.codec.zstd_level = kSessionZstdLevel;
    info.first_position = 0;
    info.token_ids.assign(session.tokens.begin(), session.tokens.begin() + kv_tokens);
    info.prefix_digest = prefix_digest(info.token_ids);
    BATON_RETURN_IF_ERROR(file->write(kKvPackMagic));
    std::string record_checksums;  // 8 bytes LE per message: what the footer hashes
    KvStreamWriter writer([&](const v1::KvStreamMessage& message) {
      const std::string bytes = message.SerializeAsString();
      char record_checksum[8];
      put_le64(kv_payload_checksum(bytes), record_checksum);
      record_checksums.append(record_checksum, 8);
      std::string length;
      {
        pbio::StringOutputStream output(&length);
        pbio::CodedOutputStream coded(&output);
        coded.WriteVarint32(static_cast<uint32_t>(bytes.size()));
      }
      BATON_RETURN_IF_ERROR(file->write(length));
      return file->write(bytes);
    });
    // The store's blocks go out in its own form (no requantization).
    BATON_RETURN_IF_ERROR(write_kv_segment(kv, info, writer));
    char footer[8];
    put_le64(kv_payload_checksum(record_checksums), footer);
    BATON_RETURN_IF_ERROR(file->write(std::string_view(footer, 8)));
  }
  return file->commit();
}

absl::StatusOr<std::unique_ptr<Session>> load_session_file(const std::string& path, const ModelFingerprint& model,
                                                           const KvGeometry& geometry) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, "opening session file " + path);
  pbio::FileInputStream input(fd);
  input.SetCloseOnDelete(true);
  auto info = read_session_header(&input, path, model);
  if (input.GetErrno() != 0) return errno_status(input.GetErrno(), "reading session file " + path);
  if (!info.ok()) return info.status();
  const v1::SessionFileHeader& h = info->header;

  auto session = std::make_unique<Session>();
  session->id = h.session_id();
  session->tokens.assign(h.tokens().begin(), h.tokens().end());
  session->codec = info->codec;
  session->pack_id = h.pack_id();
  for (int i = 0; i < 4; ++i) session->sampler.rng[static_cast<size_t>(i)] = h.rng_state(i);
  session->sampler.recent.assign(h.recent_tokens().begin(), h.recent_tokens().end());
  session->created_unix_ms = h.created_unix_ms();
  session->last_used_unix_ms = h.last_used_unix_ms();
  if (h.format_version() == 1) {
    // No turn records: the conversation so far counts as one turn.
    if (!session->tokens.empty()) session->turns.push_back({1, 0});
    session->turn_count = session->turns.empty() ? 0 : 1;
  } else {
    for (const v1::SessionTurn& turn : h.turns()) session->turns.push_back({turn.number(), turn.first_token()});
    session->turn_count = h.turn_count();
    session->dropped_turns = h.dropped_turns();
    session->dropped_tokens = h.dropped_tokens();
    session->truncations = h.truncations();
    session->pack_tokens = h.pack_tokens();
  }

  if (h.kv_tokens() == 0) {
    // Nothing may follow the header.
    const void* data = nullptr;
    int size = 0;
    while (input.Next(&data, &size)) {
      if (size > 0) return absl::DataLossError(absl::StrFormat("session file %s has bytes after its header", path));
    }
    BATON_ASSIGN_OR_RETURN(session->kv,
                           QuantizedKvCache::Create(geometry, 0, QuantizedKvCache::store_config_for(info->codec)));
    return session;
  }

  KvStreamExpectation expected;
  expected.model = model;
  expected.first_position = 0;
  expected.token_ids = info->kv_tokens();
  expected.prefix_digest = prefix_digest(*expected.token_ids);
  // load_kv_segment decodes every block before writing: no trial decode here.
  KvStreamReader reader(std::move(expected), kv_reader_options_with_codec(geometry, {}, /*trial_decode=*/false));
  auto segment = read_session_kv(&input, &reader);
  if (input.GetErrno() != 0) return errno_status(input.GetErrno(), "reading session file " + path);
  if (!segment.ok()) return kv_section_error(segment.status(), path);
  auto stream_codec = kv_codec_config_from_params(segment->header.codec());
  if (!stream_codec.ok()) return kv_section_error(stream_codec.status(), path);
  auto kv = QuantizedKvCache::Create(geometry, h.kv_tokens(), QuantizedKvCache::store_config_for(*stream_codec));
  if (!kv.ok()) return kv_section_error(kv.status(), path);
  auto load = load_kv_segment(*segment, /*rope=*/nullptr, **kv);
  if (!load.ok()) return kv_section_error(load.status(), path);
  session->kv = std::move(*kv);
  return session;
}

}  // namespace baton
