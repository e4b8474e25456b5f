#include "common/kv_codec/kv_zstd.h"

#include <zstd.h>

#include <algorithm>
#include <memory>

#include "absl/strings/str_format.h"

namespace baton {
namespace {


struct CctxDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DctxDeleter {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

}  // namespace

absl::StatusOr<std::string> zstd_compress(std::string_view raw, int level) {
  thread_local std::unique_ptr<ZSTD_CCtx, CctxDeleter> ctx(ZSTD_createCCtx());
  // Into a per-thread buffer of the bound (reused: no fresh pages per call),
  // then a string of the frame's size.
  thread_local std::string bound;
  bound.resize(std::max(bound.size(), ZSTD_compressBound(raw.size())));
  const size_t n = ZSTD_compressCCtx(ctx.get(), bound.data(), bound.size(), raw.data(), raw.size(), level);
  if (ZSTD_isError(n)) {
    return absl::InternalError(absl::StrFormat("zstd compression failed: %s", ZSTD_getErrorName(n)));
  }
  return std::string(bound.data(), n);
}

absl::Status zstd_decompress_exact(std::string_view payload, uint64_t raw_size, uint8_t* out) {
  const unsigned long long declared = ZSTD_getFrameContentSize(payload.data(), payload.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV block payload (%d bytes) is not a zstd frame", payload.size()));
  }
  if (declared == ZSTD_CONTENTSIZE_UNKNOWN) {
    return absl::InvalidArgumentError("KV block zstd frame does not declare its content size");
  }
  if (declared != raw_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV block zstd frame declares %d bytes of content; raw_size is %d", declared, raw_size));
  }
  const size_t frame_size = ZSTD_findFrameCompressedSize(payload.data(), payload.size());
  if (ZSTD_isError(frame_size)) {
    return absl::InvalidArgumentError(absl::StrFormat("KV block payload (%d bytes): bad zstd frame: %s",
                                                      payload.size(), ZSTD_getErrorName(frame_size)));
  }
  if (frame_size != payload.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV block payload is %d bytes but its zstd frame is %d bytes", payload.size(), frame_size));
  }
  thread_local std::unique_ptr<ZSTD_DCtx, DctxDeleter> ctx(ZSTD_createDCtx());
  const size_t n = ZSTD_decompressDCtx(ctx.get(), out, raw_size, payload.data(), payload.size());
  if (ZSTD_isError(n)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV block zstd decompression failed: %s", ZSTD_getErrorName(n)));
  }
  if (n != raw_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV block decompressed to %d bytes; raw_size is %d", n, raw_size));
  }
  return absl::OkStatus();
}

}  // namespace baton
