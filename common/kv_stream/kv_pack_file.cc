#include "common/kv_stream/kv_pack_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "absl/strings/str_format.h"
#include "common/util/atomic_file.h"
#include "common/util/check.h"
#include "common/util/errno_status.h"

namespace baton {
namespace {

namespace pbio = google::protobuf::io;

// Prefixes a reader error with where in the pack it happened, keeping its code.
absl::Status at_message(const absl::Status& status, int index, uint64_t offset) {
  return absl::Status(status.code(),
                      absl::StrFormat("pack message %d (byte %u): %s", index, offset, std::string(status.message())));
}

// True when `input` has no more bytes (the stream position is unchanged).
bool at_end(pbio::ZeroCopyInputStream* input) {
  const void* data = nullptr;
  int size = 0;
  while (input->Next(&data, &size)) {
    if (size > 0) {
      input->BackUp(size);
      return false;
    }
  }
  return true;
}

// Appends `message` to `out` as one pack record: its size as a varint, then its bytes.
absl::Status append_kv_pack_record(const v1::KvStreamMessage& message, std::string* out) {
  const size_t size = message.ByteSizeLong();
  if (size > static_cast<size_t>(INT_MAX)) {
    return absl::ResourceExhaustedError(absl::StrFormat("KV stream message of %u bytes is too large for a pack", size));
  }
  pbio::StringOutputStream string_output(out);
  pbio::CodedOutputStream coded(&string_output);
  coded.WriteVarint32(static_cast<uint32_t>(size));
  message.SerializeWithCachedSizes(&coded);
  if (coded.HadError()) return absl::InternalError("serializing a KV stream message failed");
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------------------
// Writing

absl::StatusOr<std::string> kv_pack_bytes(std::span<const v1::KvStreamMessage> messages) {
  std::string bytes(kKvPackMagic);
  for (const v1::KvStreamMessage& message : messages) BATON_RETURN_IF_ERROR(append_kv_pack_record(message, &bytes));
  return bytes;
}

KvPackFileWriter::KvPackFileWriter(std::string path, std::unique_ptr<AtomicFile> file)
    : path_(std::move(path)), file_(std::move(file)) {}

absl::StatusOr<std::unique_ptr<KvPackFileWriter>> KvPackFileWriter::create(const std::string& path) {
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFile> file, AtomicFile::create(path));
  std::unique_ptr<KvPackFileWriter> writer(new KvPackFileWriter(path, std::move(file)));
  BATON_RETURN_IF_ERROR(writer->file_->write(kKvPackMagic));
  return writer;
}

KvPackFileWriter::~KvPackFileWriter() = default;

absl::Status KvPackFileWriter::append(const v1::KvStreamMessage& message) {
  if (committed_) return absl::FailedPreconditionError("pack file " + path_ + " is already committed");
  std::string record;
  BATON_RETURN_IF_ERROR(append_kv_pack_record(message, &record));
  return file_->write(record);
}

absl::Status KvPackFileWriter::commit() {
  BATON_RETURN_IF_ERROR(file_->commit());
  committed_ = true;
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Reading

absl::StatusOr<KvSegment> read_kv_pack(pbio::ZeroCopyInputStream* input, KvStreamReader* reader) {
  const uint64_t max_message_bytes = std::min<uint64_t>(reader->options().max_message_bytes, INT_MAX);
  {
    pbio::CodedInputStream coded(input);
    std::string magic;
    if (!coded.ReadString(&magic, static_cast<int>(kKvPackMagic.size())) || magic != kKvPackMagic) {
      return reader->abandon(absl::InvalidArgumentError(
          absl::StrFormat("not a KV pack: the file does not start with the magic \"%s\"", std::string(kKvPackMagic))));
    }
  }
  uint64_t offset = kKvPackMagic.size();
  for (int index = 0;; ++index) {
    if (at_end(input)) break;
    if (reader->complete()) {
      return reader->abandon(absl::InvalidArgumentError(
          absl::StrFormat("KV pack has bytes after its trailer, at byte %u", offset)));
    }
    pbio::CodedInputStream coded(input);
    uint32_t size = 0;
    if (!coded.ReadVarint32(&size)) {
      return reader->abandon(absl::DataLossError(absl::StrFormat(
          "KV pack is truncated or garbled in the length of message %d at byte %u", index, offset)));
    }
    if (size > max_message_bytes) {
      return reader->abandon(absl::ResourceExhaustedError(absl::StrFormat(
          "KV pack message %d at byte %u has %u bytes; the limit is %u (max_message_bytes)", index, offset, size,
          max_message_bytes)));
    }
    const int length_bytes = coded.CurrentPosition();
    const pbio::CodedInputStream::Limit limit = coded.PushLimit(static_cast<int>(size));
    v1::KvStreamMessage message;
    const bool parsed = message.ParseFromCodedStream(&coded) && coded.BytesUntilLimit() == 0;
    coded.PopLimit(limit);
    if (!parsed) {
      return reader->abandon(absl::DataLossError(absl::StrFormat(
          "KV pack message %d at byte %u (%u bytes) is truncated or malformed", index, offset, size)));
    }
    absl::Status status = reader->consume(std::move(message));
    if (!status.ok()) return at_message(status, index, offset);
    offset += static_cast<uint64_t>(length_bytes) + size;
  }
  auto segment = reader->commit();
  if (!segment.ok()) {
    return absl::Status(segment.status().code(), absl::StrFormat("KV pack ends at byte %u: %s", offset,
                                                                 std::string(segment.status().message())));
  }
  return segment;
}

absl::StatusOr<KvSegment> read_kv_pack(std::string_view bytes, KvStreamReader* reader) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) {
    return reader->abandon(absl::ResourceExhaustedError(
        absl::StrFormat("KV pack of %u bytes is too large to read from memory", bytes.size())));
  }
  pbio::ArrayInputStream input(bytes.data(), static_cast<int>(bytes.size()));
  return read_kv_pack(&input, reader);
}

absl::StatusOr<KvSegment> read_kv_pack_file(const std::string& path, KvStreamReader* reader) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return reader->abandon(errno_status(errno, "opening KV pack " + path));
  pbio::FileInputStream input(fd);
  input.SetCloseOnDelete(true);
  auto segment = read_kv_pack(&input, reader);
  if (input.GetErrno() != 0) return errno_status(input.GetErrno(), "reading KV pack " + path);
  if (!segment.ok()) {
    return absl::Status(segment.status().code(), path + ": " + std::string(segment.status().message()));
  }
  return segment;
}

absl::StatusOr<KvSegment> read_kv_pack_file(const std::string& path, const KvStreamExpectation& expected,
                                            const KvStreamReaderOptions& options) {
  KvStreamReader reader(expected, options);
  return read_kv_pack_file(path, &reader);
}

absl::StatusOr<v1::KvHeader> read_kv_pack_header(const std::string& path, uint64_t max_message_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, "opening KV pack " + path);
  pbio::FileInputStream input(fd);
  input.SetCloseOnDelete(true);
  pbio::CodedInputStream coded(&input);
  std::string magic;
  if (!coded.ReadString(&magic, static_cast<int>(kKvPackMagic.size())) || magic != kKvPackMagic) {
    return absl::InvalidArgumentError(path + " is not a KV pack (no \"BATONKV1\" magic)");
  }
  uint32_t size = 0;
  if (!coded.ReadVarint32(&size)) return absl::DataLossError(path + ": KV pack has no header");
  if (size > std::min<uint64_t>(max_message_bytes, INT_MAX)) {
    return absl::ResourceExhaustedError(absl::StrFormat("%s: KV pack header has %u bytes; the limit is %u", path,
                                                        size, max_message_bytes));
  }
  const pbio::CodedInputStream::Limit limit = coded.PushLimit(static_cast<int>(size));
  v1::KvStreamMessage message;
  if (!message.ParseFromCodedStream(&coded) || coded.BytesUntilLimit() != 0 || !message.has_header()) {
    return absl::DataLossError(path + ": KV pack does not start with a readable header");
  }
  coded.PopLimit(limit);
  return std::move(*message.mutable_header());
}

}  // namespace baton
