// Writes the seed corpus of the kv_stream fuzz target: a few valid packs for
// the fuzz model (tests/fuzz/kv_stream_fuzz_common.h) and some corrupt ones.
//   kv_stream_seed_gen OUT_DIR
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/kv_stream/kv_pack_file.h"
#include "common/kv_stream/kv_stream_writer.h"
#include "common/kv_stream/prefix_digest.h"
#include "tests/fuzz/kv_stream_fuzz_common.h"

namespace {

using namespace baton;

std::vector<v1::KvStreamMessage> make_stream(uint32_t first_position, uint32_t token_count, uint64_t max_block_bytes,
                                              v1::CodecParams codec) {
  std::vector<int32_t> tokens(first_position + token_count);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 31 + 7) % 512);
  KvFingerprint fp;
  fp.model = fuzz::fuzz_model();
  fp.context = {first_position, token_count, prefix_digest(tokens)};
  fp.codec = codec;
  v1::KvHeader header;
  set_header_fingerprint(fp, &header);
  for (size_t i = first_position; i < tokens.size(); ++i) header.add_token_ids(static_cast<uint32_t>(tokens[i]));
  header.set_pack_id("seed");
  std::vector<v1::KvStreamMessage> messages;
  KvStreamWriter writer(
      [&](const v1::KvStreamMessage& m) {
        messages.push_back(m);
        return absl::OkStatus();
      },
      {.max_block_payload_bytes = max_block_bytes});
  if (!writer.write_header(header).ok()) std::abort();
  for (uint32_t layer = 0; layer < fuzz::kFuzzLayers; ++layer) {
    for (v1::KvKind kind : {v1::KV_KIND_K, v1::KV_KIND_V}) {
      auto encode = [&](uint32_t begin, uint32_t n) -> absl::StatusOr<KvEncodedPayload> {
        std::string payload(n * fuzz::kFuzzF16BytesPerToken, '\0');
        for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(layer * 17 + kind * 5 + begin + i);
        const uint64_t raw = payload.size();
        return KvEncodedPayload{std::move(payload), raw};
      };
      if (!writer.write_layer(layer, kind, fuzz::kFuzzF16BytesPerToken, encode).ok()) std::abort();
    }
  }
  if (!writer.write_trailer().ok()) std::abort();
  return messages;
}

void write_pack(const std::string& path, const std::vector<v1::KvStreamMessage>& messages) {
  auto pack = KvPackFileWriter::create(path);
  if (!pack.ok()) std::abort();
  for (const auto& m : messages) {
    if (!(*pack)->append(m).ok()) std::abort();
  }
  if (!(*pack)->commit().ok()) std::abort();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  v1::CodecParams f16;
  f16.set_codec(v1::KV_CODEC_F16);
  f16.set_zstd_level(0);
  v1::CodecParams f16_zstd = f16;
  f16_zstd.set_zstd_level(3);
  v1::CodecParams int8 = f16;
  int8.set_codec(v1::KV_CODEC_INT8);
  int8.set_group_size(8);
  int8.set_key_axis(v1::KEY_AXIS_PER_CHANNEL);

  write_pack(dir + "/valid_small.kvpack", make_stream(0, 5, 1 << 20, f16));
  write_pack(dir + "/valid_multiblock.kvpack", make_stream(0, 40, 8 * fuzz::kFuzzF16BytesPerToken, f16));
  write_pack(dir + "/valid_delta.kvpack", make_stream(70, 30, 16 * fuzz::kFuzzF16BytesPerToken, f16));
  write_pack(dir + "/valid_zstd_level.kvpack", make_stream(0, 12, 4 * fuzz::kFuzzF16BytesPerToken, f16_zstd));
  write_pack(dir + "/int8_per_channel.kvpack", make_stream(0, 20, 8 * fuzz::kFuzzF16BytesPerToken, int8));

  const std::string valid = read_file(dir + "/valid_multiblock.kvpack");
  write_file(dir + "/corrupt_truncated.kvpack", valid.substr(0, valid.size() * 2 / 3));
  std::string flipped = valid;
  flipped[valid.size() / 2] ^= 0x10;
  write_file(dir + "/corrupt_payload_flip.kvpack", flipped);
  write_file(dir + "/corrupt_trailing_bytes.kvpack", valid + "xyz");
  write_file(dir + "/corrupt_huge_length.kvpack", std::string(kKvPackMagic) + "\xff\xff\xff\xff\x0f");
  std::vector<v1::KvStreamMessage> messages = make_stream(0, 40, 8 * fuzz::kFuzzF16BytesPerToken, f16);
  std::swap(messages[1], messages[2]);
  write_pack(dir + "/corrupt_reordered.kvpack", messages);
  messages = make_stream(0, 40, 8 * fuzz::kFuzzF16BytesPerToken, f16);
  messages.insert(messages.begin() + 2, messages[1]);
  write_pack(dir + "/corrupt_duplicate_block.kvpack", messages);
  return 0;
}
