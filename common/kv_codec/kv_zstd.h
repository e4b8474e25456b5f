// zstd for KV payloads: one frame with its content size, checked exactly on
// the way back (the KV codec's and the transform codec's back end).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace baton {

// One zstd frame of `raw` at `level` (declares its content size).
absl::StatusOr<std::string> zstd_compress(std::string_view raw, int level);

// Decompresses a frame that must hold exactly raw_size bytes into out
// [raw_size]: checks the declared size before anything is decompressed and
// that the frame is the whole payload. InvalidArgument otherwise.
absl::Status zstd_decompress_exact(std::string_view payload, uint64_t raw_size, uint8_t* out);

}  // namespace baton
