// GgufWriter: builds GGUF v3 files that GgufFile and llama.cpp's loader accept.
// Layout: header, metadata, tensor infos, zero padding to `alignment`, then each
// tensor's data in add order, each padded to `alignment`. Tensor bytes come
// from a fill callback run at write time, so multi-GB models stream to disk.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/gguf/ggml_types.h"
#include "common/gguf/gguf_value.h"

namespace baton {

class GgufWriter {
 public:
  // Writes exactly n_bytes of tensor data into dst.
  using FillFn = std::function<absl::Status(uint8_t* dst, uint64_t n_bytes)>;

  // `alignment` (bytes) must be a power of two; when it is not 32 the writer
  // records it as uint32 metadata 'general.alignment'.
  explicit GgufWriter(uint32_t alignment = 32);

  // Replaces an existing key in place, else appends (file order = set order).
  void set(std::string key, GgufValue value);
  void set_u32(std::string key, uint32_t v) { set(std::move(key), GgufValue::u32(v)); }
  void set_i32(std::string key, int32_t v) { set(std::move(key), GgufValue::i32(v)); }
  void set_u64(std::string key, uint64_t v) { set(std::move(key), GgufValue::u64(v)); }
  void set_f32(std::string key, float v) { set(std::move(key), GgufValue::f32(v)); }
  void set_bool(std::string key, bool v) { set(std::move(key), GgufValue::boolean(v)); }
  void set_string(std::string key, std::string v) { set(std::move(key), GgufValue::string(std::move(v))); }
  void set_string_array(std::string key, std::vector<std::string> v) {
    set(std::move(key), GgufValue::string_array(std::move(v)));
  }
  void set_f32_array(std::string key, const std::vector<float>& v) { set(std::move(key), GgufValue::f32_array(v)); }
  void set_i32_array(std::string key, const std::vector<int32_t>& v) { set(std::move(key), GgufValue::i32_array(v)); }

  // dims in ggml order (dims[0] = row length). Checked at write(): 1..4 dims,
  // dims[0] a multiple of the block size, a supported type, a unique name.
  void add_tensor(std::string name, GgmlType type, std::vector<int64_t> dims, FillFn fill);
  // Copies the tensor's bytes (size from type and dims) now.
  void add_tensor_copy(std::string name, GgmlType type, std::vector<int64_t> dims, const void* data);

  // Writes through an AtomicFile (common/util/atomic_file.h): a temp file
  // next to `path`, fsynced and renamed onto it, so `path` is never partial.
  absl::Status write(const std::string& path) const;
  absl::StatusOr<std::vector<uint8_t>> write_to_bytes() const;

  uint32_t alignment() const { return alignment_; }

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;  // ggml order
    FillFn fill;
  };
  // Where everything goes; computed by plan().
  struct Layout {
    std::vector<uint8_t> header;          // header + metadata + tensor infos, unpadded
    uint64_t data_offset = 0;             // bytes, aligned
    std::vector<uint64_t> tensor_offset;  // bytes from data_offset, aligned
    std::vector<uint64_t> tensor_bytes;   // bytes
    uint64_t total_bytes = 0;             // whole file
  };
  absl::StatusOr<Layout> plan() const;

  uint32_t alignment_;  // bytes
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace baton
