// libFuzzer target: arbitrary bytes as a prefix pack (or, without the magic,
// as the delimited message sequence after it) through KvStreamReader. Must
// never crash, leak or hang; a stream it accepts must satisfy the invariants
// checked below. Build and run: tests/fuzz/build.sh && tests/fuzz/run.sh kv_stream 600
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "common/kv_stream/kv_pack_file.h"
#include "common/kv_stream/kv_stream.h"
#include "common/kv_stream/kv_stream_reader.h"
#include "tests/fuzz/kv_stream_fuzz_common.h"

namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "kv_stream_fuzz: accepted stream breaks an invariant: %s\n", what);
    std::abort();
  }
}

// What an accepted segment must hold whatever the input was.
void check_segment(const baton::KvSegment& segment) {
  const uint32_t begin = segment.header.first_position();
  const uint64_t end = uint64_t{begin} + segment.header.token_count();
  require(segment.header.token_count() > 0, "token_count > 0");
  require(static_cast<uint64_t>(segment.header.token_ids_size()) == segment.header.token_count(), "token ids");
  require(segment.trailer.block_count() == segment.blocks.size(), "block count");
  uint64_t encoded = 0, raw = 0;
  std::map<uint64_t, uint64_t> tokens_per_lane;  // (layer, kind) -> tokens covered
  for (const baton::KvStagedBlock& block : segment.blocks) {
    require(block.layer < baton::fuzz::kFuzzLayers, "layer in range");
    require(block.kind == baton::v1::KV_KIND_K || block.kind == baton::v1::KV_KIND_V, "kind");
    require(block.token_count > 0 && block.token_begin >= begin &&
                uint64_t{block.token_begin} + block.token_count <= end,
            "block inside segment");
    require(baton::kv_payload_checksum(block.payload) == block.checksum, "checksum");
    encoded += block.payload.size();
    raw += block.raw_size;
    tokens_per_lane[uint64_t{block.layer} * 2 + (block.kind == baton::v1::KV_KIND_V)] += block.token_count;
  }
  require(encoded == segment.encoded_bytes && raw == segment.raw_bytes, "byte totals");
  require(tokens_per_lane.size() == 2 * baton::fuzz::kFuzzLayers, "every lane present");
  for (const auto& [lane, tokens] : tokens_per_lane) require(tokens == end - begin, "exact coverage");
}

}  // namespace

// Protobuf logs every string field with invalid UTF-8 it refuses; the fuzzer
// makes many, and the refusal is already an error status.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int, const std::string&) {});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (bytes.compare(0, baton::kKvPackMagic.size(), baton::kKvPackMagic) != 0) {
    bytes.insert(0, baton::kKvPackMagic);
  }
  baton::KvStreamExpectation expected;
  expected.model = baton::fuzz::fuzz_model();  // pack-style: the header defines its context
  baton::KvStreamReader reader(expected, baton::fuzz::fuzz_reader_options());
  auto segment = baton::read_kv_pack(bytes, &reader);
  static const bool verbose = std::getenv("KV_STREAM_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "kv_stream_fuzz: %s\n", segment.status().ToString().c_str());
  if (segment.ok()) {
    check_segment(*segment);
  } else {
    require(reader.staged_blocks() == 0, "staging discarded on error");
    require(!reader.commit().ok(), "no commit after an error");
  }
  return 0;
}
