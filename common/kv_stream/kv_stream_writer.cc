#include "common/kv_stream/kv_stream_writer.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_format.h"
#include "common/util/check.h"

namespace baton {

std::vector<KvTokenRange> plan_kv_block_ranges(uint32_t begin, uint32_t count, uint64_t bytes_per_token,
                                               uint64_t max_bytes, uint32_t align) {
  align = std::max<uint32_t>(align, 1);
  const uint64_t fit = bytes_per_token == 0 ? count : max_bytes / bytes_per_token;
  const uint64_t chunk = std::max<uint64_t>(align, fit / align * align);
  std::vector<KvTokenRange> ranges;
  for (uint64_t done = 0; done < count;) {
    const uint64_t n = std::min<uint64_t>(chunk, count - done);
    ranges.push_back({static_cast<uint32_t>(begin + done), static_cast<uint32_t>(n)});
    done += n;
  }
  return ranges;
}

KvStreamWriter::KvStreamWriter(KvMessageSink sink, KvStreamWriterOptions options)
    : sink_(std::move(sink)), options_(options) {}

absl::Status KvStreamWriter::write_header(v1::KvHeader header) {
  if (state_ != State::kHeader) return absl::FailedPreconditionError("KV stream header already written");
  if (header.token_count() == 0) return absl::InvalidArgumentError("KV stream header has token_count 0");
  if (static_cast<uint64_t>(header.token_ids_size()) != header.token_count()) {
    return absl::InvalidArgumentError(absl::StrFormat("KV stream header has %d token ids for token_count %u",
                                                      header.token_ids_size(), header.token_count()));
  }
  if (!header.has_fingerprint() || !header.has_codec()) {
    return absl::InvalidArgumentError("KV stream header needs a fingerprint and a codec (set_header_fingerprint)");
  }
  header.set_format_version(kv_stream_format_version_for(header.fingerprint().model()));
  codec_ = header.codec();
  segment_begin_ = header.first_position();
  segment_end_ = uint64_t{header.first_position()} + header.token_count();
  BATON_ASSIGN_OR_RETURN(layer_windows_, kv_layer_windows(header.fingerprint().model()));
  v1::KvStreamMessage message;
  *message.mutable_header() = std::move(header);
  state_ = State::kBlocks;
  return sink_(message);
}

absl::Status KvStreamWriter::write_block(uint32_t layer, v1::KvKind kind, uint32_t token_begin,
                                         uint32_t token_count, std::string payload, uint64_t raw_size) {
  if (state_ != State::kBlocks) return absl::FailedPreconditionError("KV block written outside header..trailer");
  const uint64_t end = uint64_t{token_begin} + token_count;
  if (token_count == 0 || token_begin < segment_begin_ || end > segment_end_) {
    return absl::InvalidArgumentError(absl::StrFormat("KV block [%u, %u) is outside the segment [%u, %u)",
                                                      token_begin, end, segment_begin_, segment_end_));
  }
  if (payload.size() > options_.max_block_payload_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "KV block layer %u %s [%u, %u) has a %u-byte payload; the bound is %u bytes", layer, kv_kind_name(kind),
        token_begin, end, payload.size(), options_.max_block_payload_bytes));
  }
  if (block_count_ == std::numeric_limits<uint32_t>::max()) {
    return absl::ResourceExhaustedError("KV stream has too many blocks for KvTrailer.block_count");
  }
  v1::KvStreamMessage message;
  v1::KvBlock* block = message.mutable_block();
  block->set_layer(layer);
  block->set_kind(kind);
  block->set_token_begin(token_begin);
  block->set_token_count(token_count);
  block->set_encoded_size(payload.size());
  block->set_raw_size(raw_size);
  block->set_checksum(kv_payload_checksum(payload));
  *block->mutable_payload() = std::move(payload);
  digest_.add_block(*block);
  ++block_count_;
  encoded_bytes_ += block->encoded_size();
  raw_bytes_ += raw_size;
  return sink_(message);
}

absl::Status KvStreamWriter::write_layer(uint32_t layer, v1::KvKind kind, uint64_t raw_bytes_per_token,
                                         const KvBlockEncodeFn& encode) {
  if (state_ != State::kBlocks) return absl::FailedPreconditionError("KV layer written outside header..trailer");
  return write_layer_range(layer, kind, segment_begin_, static_cast<uint32_t>(segment_end_ - segment_begin_),
                           raw_bytes_per_token, encode);
}

absl::Status KvStreamWriter::write_layer_range(uint32_t layer, v1::KvKind kind, uint32_t token_begin,
                                               uint32_t n_tokens, uint64_t raw_bytes_per_token,
                                               const KvBlockEncodeFn& encode) {
  if (state_ != State::kBlocks) return absl::FailedPreconditionError("KV layer written outside header..trailer");
  const uint32_t align = kv_block_token_alignment(codec_, kind);
  const uint64_t range_end = uint64_t{token_begin} + n_tokens;
  if (n_tokens == 0 || token_begin < segment_begin_ || range_end > segment_end_) {
    return absl::InvalidArgumentError(absl::StrFormat("KV layer range [%u, %u) is not inside the segment [%u, %u)",
                                                      token_begin, range_end, segment_begin_, segment_end_));
  }
  if ((token_begin - segment_begin_) % align != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV layer range starts at %u, not a whole number of %u-token groups after the segment start %u",
        token_begin, align, segment_begin_));
  }
  if (range_end != segment_end_ && n_tokens % align != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV layer range [%u, %u) ends inside the segment but is not a whole number of %u-token groups",
        token_begin, range_end, align));
  }
  // A windowed layer sends only its tail [first, end): the range is cut to
  // it, and a head that does not end on a group boundary (counted from the
  // segment start, as the ranges are) goes as its own block, so the blocks
  // after it stay aligned.
  const uint64_t first = static_cast<uint64_t>(
      kv_layer_first_position(layer_windows_, static_cast<int>(layer), segment_begin_, segment_end_));
  if (range_end <= first) return absl::OkStatus();
  if (token_begin < first) {
    const uint64_t aligned = segment_begin_ + (first - segment_begin_ + align - 1) / align * align;
    const uint64_t head_end = std::min(range_end, aligned);
    if (head_end > first) {
      BATON_RETURN_IF_ERROR(write_blocks(layer, kind, static_cast<uint32_t>(first),
                                         static_cast<uint32_t>(head_end - first), raw_bytes_per_token, encode));
    }
    if (head_end == range_end) return absl::OkStatus();
    token_begin = static_cast<uint32_t>(head_end);
    n_tokens = static_cast<uint32_t>(range_end - head_end);
  }
  return write_blocks(layer, kind, token_begin, n_tokens, raw_bytes_per_token, encode);
}

absl::Status KvStreamWriter::write_blocks(uint32_t layer, v1::KvKind kind, uint32_t token_begin, uint32_t n_tokens,
                                          uint64_t raw_bytes_per_token, const KvBlockEncodeFn& encode) {
  const uint32_t align = kv_block_token_alignment(codec_, kind);
  const uint64_t range_end = uint64_t{token_begin} + n_tokens;
  std::vector<KvTokenRange> plan = plan_kv_block_ranges(token_begin, n_tokens, raw_bytes_per_token,
                                                        options_.max_block_payload_bytes, align);
  const uint32_t first_chunk = plan.empty() ? align : plan.front().count;
  uint32_t chunk = first_chunk;
  for (uint64_t begin = token_begin; begin < range_end;) {
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(chunk, range_end - begin));
    auto encoded = encode(static_cast<uint32_t>(begin), n);
    if (!encoded.ok()) return encoded.status();
    if (encoded->payload.size() > options_.max_block_payload_bytes) {
      if (chunk <= align) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "KV layer %u %s: %u tokens at %u encode to %u bytes, over the %u-byte block bound even at the "
            "smallest block (%u tokens)", layer, kv_kind_name(kind), n, begin, encoded->payload.size(),
            options_.max_block_payload_bytes, align));
      }
      chunk = std::max<uint32_t>(align, chunk / 2 / align * align);  // retry the same start, smaller
      continue;
    }
    BATON_RETURN_IF_ERROR(write_block(layer, kind, static_cast<uint32_t>(begin), n,
                                      std::move(encoded->payload), encoded->raw_size));
    begin += n;
  }
  return absl::OkStatus();
}

absl::Status KvStreamWriter::write_trailer(const v1::ProducerStats* producer) {
  if (state_ != State::kBlocks) return absl::FailedPreconditionError("KV trailer written outside header..trailer");
  v1::KvStreamMessage message;
  v1::KvTrailer* trailer = message.mutable_trailer();
  trailer->set_block_count(block_count_);
  trailer->set_stream_digest(digest_.value());
  trailer->set_encoded_bytes(encoded_bytes_);
  trailer->set_raw_bytes(raw_bytes_);
  if (producer != nullptr) *trailer->mutable_producer() = *producer;
  state_ = State::kClosed;
  return sink_(message);
}

}  // namespace baton
