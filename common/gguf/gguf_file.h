// GgufFile: a read-only, bounds-checked GGUF (v2/v3, little-endian) reader.
// Open() maps the file; tensor data is handed out as zero-copy views into the
// mapping. Every length, count and offset read from the file is checked against
// the bytes that remain, so a corrupt or hostile file yields an
// InvalidArgumentError naming the problem and its byte offset, never a crash.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf/ggml_types.h"
#include "common/gguf/gguf_value.h"

namespace baton {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian uint32
inline constexpr uint32_t kGgufVersion = 3;          // version the writer produces
inline constexpr uint64_t kGgufDefaultAlignment = 32;
inline constexpr char kGgufAlignmentKey[] = "general.alignment";
inline constexpr int kGgufMaxDims = 4;
inline constexpr int kGgufMaxArrayDepth = 8;  // arrays nested deeper are rejected

struct GgufTensorInfo {
  std::string name;
  GgmlType type;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous row length (ne0)
  uint64_t offset;            // bytes from the start of the data section
  uint64_t n_bytes;           // size of the data
  // Zero-copy view into the mapping. Aligned to general.alignment for mapped
  // files (up to the page size); FromBytes buffers are 64-byte aligned.
  const uint8_t* data;
  int64_t n_elements() const;
};

class GgufFile {
 public:
  // Maps `path` read-only. NotFoundError if it does not exist.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses an in-memory image (tests, fuzzing); the bytes are copied into a
  // 64-byte-aligned buffer owned by the result.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBytes(std::vector<uint8_t> bytes);

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  // nullptr if absent.
  const GgufValue* find(std::string_view key) const;

  // Typed getters. A missing key is NotFoundError ("metadata key 'k' is
  // missing"); a wrong type is InvalidArgumentError naming the type found.
  absl::StatusOr<int64_t> get_int(std::string_view key) const;
  absl::StatusOr<double> get_float(std::string_view key) const;
  absl::StatusOr<bool> get_bool(std::string_view key) const;
  absl::StatusOr<std::string> get_string(std::string_view key) const;
  absl::StatusOr<std::vector<std::string>> get_string_array(std::string_view key) const;
  // Elements may be any numeric type.
  absl::StatusOr<std::vector<float>> get_float_array(std::string_view key) const;
  // Elements may be any integer type or bool.
  absl::StatusOr<std::vector<int64_t>> get_int_array(std::string_view key) const;

  // Tensors in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  // nullptr if absent.
  const GgufTensorInfo* find_tensor(std::string_view name) const;

  // Tells the kernel this process no longer needs the whole pages of the
  // mapping inside [p, p + n) (a range of tensor data): they leave the
  // process's resident memory and come back from the file if read again.
  // No-op for FromBytes images. The data seen through views is unchanged.
  void release_pages(const void* p, uint64_t n) const;

  uint64_t file_size() const { return size_; }
  // Start of the tensor data section in the file, in bytes.
  uint64_t data_offset() const { return data_offset_; }

 private:
  class Parser;
  GgufFile() = default;
  // Parses base_[0, size_) into the fields below.
  absl::Status parse();
  absl::StatusOr<const GgufValue*> find_or_error(std::string_view key) const;

  // Storage: either an mmap (mapped_ true) or an owned aligned heap buffer.
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;  // bytes
  bool mapped_ = false;

  uint32_t version_ = 0;
  uint64_t alignment_ = kGgufDefaultAlignment;  // bytes
  uint64_t data_offset_ = 0;                    // bytes from the file start
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  // Views into metadata_ / tensors_ names; built once they stop moving.
  std::unordered_map<std::string_view, size_t> metadata_index_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

}  // namespace baton
