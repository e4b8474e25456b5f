// Prefix packs for tests: the engine's KV of a token list streamed as a pack
// (what `baton pack build` makes), and a PrefillService-free decoder that
// verifies a stored value the way the service does (PackLibrary::DecodeFn).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cloud_prefill/prefix_pack_store.h"
#include "proto/baton.pb.h"
#include "tests/support/tiny_model.h"

namespace baton::testing {

// The pack stream (int8, group 16, zstd 3) of `model`'s KV of `tokens`, with
// `pack_id` in its header.
std::vector<v1::KvStreamMessage> make_pack_stream(const TinyModel& model, const std::vector<int32_t>& tokens,
                                                  const std::string& pack_id);

// Reads a pack file's bytes through a KvStreamReader expecting `model` from
// position 0 and makes a StoredPack of it (id, digest, tokens, messages; no
// decoded KV).
absl::StatusOr<std::shared_ptr<StoredPack>> verify_pack_value(const TinyModel& model, std::string_view value);

}  // namespace baton::testing
