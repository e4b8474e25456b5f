// Prefix pack files (DESIGN.md "KV stream format"): the 8-byte magic
// "BATONKV1", then the KV stream's messages back to back, each preceded by its
// size in bytes as a varint (protobuf's delimited format). Written atomically
// (temp file, fsync, rename; mode 0600); read streaming through KvStreamReader,
// with every message size checked against the reader's max_message_bytes
// before anything is allocated for it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_stream/kv_stream.h"
#include "common/kv_stream/kv_stream_reader.h"
#include "common/util/atomic_file.h"
#include "proto/baton.pb.h"

namespace google::protobuf::io {
class ZeroCopyInputStream;
}

namespace baton {

inline constexpr std::string_view kKvPackMagic = "BATONKV1";

// Writes one pack file through an AtomicFile: messages go to
// "<path>.tmp.<pid>.<n>" (mode 0600); commit() flushes, fsyncs and renames it
// onto `path`. Destroying the writer
// without commit() removes the temp file, so `path` is either the old file or
// the complete new one.
class KvPackFileWriter {
 public:
  static absl::StatusOr<std::unique_ptr<KvPackFileWriter>> create(const std::string& path);
  ~KvPackFileWriter();
  KvPackFileWriter(const KvPackFileWriter&) = delete;
  KvPackFileWriter& operator=(const KvPackFileWriter&) = delete;

  absl::Status append(const v1::KvStreamMessage& message);
  absl::Status commit();
  // append() as a KvMessageSink (for KvStreamWriter); the writer must outlive it.
  KvMessageSink sink() {
    return [this](const v1::KvStreamMessage& message) { return append(message); };
  }

 private:
  KvPackFileWriter(std::string path, std::unique_ptr<AtomicFile> file);

  std::string path_;
  std::unique_ptr<AtomicFile> file_;
  bool committed_ = false;
};

// A whole pack in memory (the magic, then the messages), as a pack file
// holds it: what a store that keeps packs as values (Redis) writes.
// RESOURCE_EXHAUSTED for a message over 2 GiB.
absl::StatusOr<std::string> kv_pack_bytes(std::span<const v1::KvStreamMessage> messages);

// Reads the messages of a pack from `input` into `reader`: magic, then each
// message (size checked against reader->options().max_message_bytes first),
// until the end of input. Nothing may follow the trailer. Returns the verified
// segment (reader->commit()).
absl::StatusOr<KvSegment> read_kv_pack(google::protobuf::io::ZeroCopyInputStream* input, KvStreamReader* reader);
// The same over bytes in memory (fuzzing, packs received whole).
absl::StatusOr<KvSegment> read_kv_pack(std::string_view bytes, KvStreamReader* reader);
// The same over a file.
absl::StatusOr<KvSegment> read_kv_pack_file(const std::string& path, KvStreamReader* reader);
absl::StatusOr<KvSegment> read_kv_pack_file(const std::string& path, const KvStreamExpectation& expected,
                                            const KvStreamReaderOptions& options = {});

// Reads only the first message of a pack file (to list packs without loading
// them); the header is not verified against any model.
absl::StatusOr<v1::KvHeader> read_kv_pack_header(const std::string& path, uint64_t max_message_bytes = 4u << 20);

}  // namespace baton
