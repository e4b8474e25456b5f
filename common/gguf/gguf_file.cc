#include "common/gguf/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <new>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/util/check.h"

namespace baton {
namespace {

// This absl's StrCat does not take std::string_view.
absl::string_view av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr std::align_val_t kHeapAlignment{64};  // FromBytes buffer alignment, bytes

// Smallest encodings, used to reject counts that cannot fit in what is left
// before anything is allocated for them.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // key length, value type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // name len, n_dims, 1 dim, type, offset

uint64_t min_encoded_bytes(GgufValueType type) {
  if (type == GgufValueType::kString) return 8;      // length
  if (type == GgufValueType::kArray) return 4 + 8;   // element type, count
  return gguf_value_type_size(type);
}

bool is_numeric(GgufValueType type) {
  return type != GgufValueType::kString && type != GgufValueType::kArray && type != GgufValueType::kBool;
}

std::string supported_types_list() { return "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K, q6_K"; }

}  // namespace

// Cursor over the file image; every read is bounds-checked.
class GgufFile::Parser {
 public:
  Parser(const uint8_t* base, uint64_t size) : base_(base), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  absl::Status read_bytes(void* dst, uint64_t n, std::string_view what) {
    if (n > remaining()) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF truncated: ", av(what), " needs ", n,
                                                     " bytes at byte offset ", pos_, " but the file has ",
                                                     remaining(), " left (file is ", size_, " bytes)"));
    }
    std::memcpy(dst, base_ + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }

  // Host byte order is little-endian (static_assert in parse()).
  template <typename T>
  absl::StatusOr<T> read(std::string_view what) {
    T value{};
    BATON_RETURN_IF_ERROR(read_bytes(&value, sizeof(T), what));
    return value;
  }

  absl::StatusOr<std::string> read_string(std::string_view what) {
    const uint64_t at = pos_;
    BATON_ASSIGN_OR_RETURN(const uint64_t length, read<uint64_t>(what));
    if (length > remaining()) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF ", av(what), " at byte offset ", at, " has length ",
                                                     length, ", past the end of the file (", remaining(),
                                                     " bytes left)"));
    }
    std::string out(reinterpret_cast<const char*>(base_ + pos_), length);
    pos_ += length;
    return out;
  }

  // Reads one value of `type`; `depth` counts enclosing arrays (0 at top level).
  absl::StatusOr<GgufValue> read_value(GgufValueType type, int depth, std::string_view what) {
    switch (type) {
      case GgufValueType::kUint8: { BATON_ASSIGN_OR_RETURN(auto v, read<uint8_t>(what)); return GgufValue::u8(v); }
      case GgufValueType::kInt8: { BATON_ASSIGN_OR_RETURN(auto v, read<int8_t>(what)); return GgufValue::i8(v); }
      case GgufValueType::kUint16: { BATON_ASSIGN_OR_RETURN(auto v, read<uint16_t>(what)); return GgufValue::u16(v); }
      case GgufValueType::kInt16: { BATON_ASSIGN_OR_RETURN(auto v, read<int16_t>(what)); return GgufValue::i16(v); }
      case GgufValueType::kUint32: { BATON_ASSIGN_OR_RETURN(auto v, read<uint32_t>(what)); return GgufValue::u32(v); }
      case GgufValueType::kInt32: { BATON_ASSIGN_OR_RETURN(auto v, read<int32_t>(what)); return GgufValue::i32(v); }
      case GgufValueType::kUint64: { BATON_ASSIGN_OR_RETURN(auto v, read<uint64_t>(what)); return GgufValue::u64(v); }
      case GgufValueType::kInt64: { BATON_ASSIGN_OR_RETURN(auto v, read<int64_t>(what)); return GgufValue::i64(v); }
      case GgufValueType::kFloat32: { BATON_ASSIGN_OR_RETURN(auto v, read<float>(what)); return GgufValue::f32(v); }
      case GgufValueType::kFloat64: { BATON_ASSIGN_OR_RETURN(auto v, read<double>(what)); return GgufValue::f64(v); }
      case GgufValueType::kBool: {
        const uint64_t at = pos_;
        BATON_ASSIGN_OR_RETURN(auto v, read<uint8_t>(what));
        if (v > 1) {
          return absl::InvalidArgumentError(
              absl::StrCat("GGUF ", av(what), " at byte offset ", at, " is a bool with byte value ", v, " (not 0 or 1)"));
        }
        return GgufValue::boolean(v != 0);
      }
      case GgufValueType::kString: {
        BATON_ASSIGN_OR_RETURN(auto s, read_string(what));
        return GgufValue::string(std::move(s));
      }
      case GgufValueType::kArray: return read_array(depth + 1, what);
    }
    return absl::InvalidArgumentError(absl::StrCat("GGUF ", av(what), " has unknown value type ",
                                                   static_cast<uint32_t>(type), " at byte offset ", pos_));
  }

  absl::StatusOr<GgufValueType> read_value_type(std::string_view what) {
    const uint64_t at = pos_;
    BATON_ASSIGN_OR_RETURN(const uint32_t raw, read<uint32_t>(what));
    if (!gguf_value_type_valid(raw)) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF ", av(what), " has unknown value type ", raw,
                                                     " at byte offset ", at, " (valid types are 0..12)"));
    }
    return static_cast<GgufValueType>(raw);
  }

 private:
  absl::StatusOr<GgufValue> read_array(int depth, std::string_view what) {
    const uint64_t at = pos_;
    if (depth > kGgufMaxArrayDepth) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF ", av(what), " nests arrays ", depth,
                                                     " deep at byte offset ", at, "; the limit is ",
                                                     kGgufMaxArrayDepth));
    }
    BATON_ASSIGN_OR_RETURN(const GgufValueType elem_type, read_value_type(what));
    const uint64_t count_at = pos_;
    BATON_ASSIGN_OR_RETURN(const uint64_t count, read<uint64_t>(what));
    const uint64_t min_bytes = min_encoded_bytes(elem_type);
    if (count > remaining() / min_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GGUF ", av(what), " array count ", count, " at byte offset ", count_at, " cannot fit in the ",
          remaining(), " bytes left (each ", av(gguf_value_type_name(elem_type)), " element needs at least ",
          min_bytes, " bytes)"));
    }
    std::vector<GgufValue> elems;
    elems.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      BATON_ASSIGN_OR_RETURN(GgufValue v, read_value(elem_type, depth, what));
      elems.push_back(std::move(v));
    }
    return GgufValue::array(elem_type, std::move(elems));
  }

  const uint8_t* base_;
  uint64_t size_;  // bytes
  uint64_t pos_ = 0;
};

int64_t GgufTensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // overflow ruled out when the file was parsed
  return n;
}

GgufFile::~GgufFile() {
  if (base_ == nullptr) return;
  if (mapped_) {
    munmap(const_cast<uint8_t*>(base_), size_);
  } else {
    ::operator delete[](const_cast<uint8_t*>(base_), kHeapAlignment);
  }
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrCat("cannot open GGUF file '", path, "': ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(msg);
    if (err == EACCES) return absl::PermissionDeniedError(msg);
    return absl::InvalidArgumentError(msg);
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("GGUF path '", path, "' is not a regular file"));
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (file->size_ == 0) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("GGUF file '", path, "' is empty (0 bytes)"));
  }
  void* map = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (map == MAP_FAILED) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot map GGUF file '", path, "' (", file->size_, " bytes): ", std::strerror(map_err)));
  }
  file->base_ = static_cast<const uint8_t*>(map);
  file->mapped_ = true;
  if (absl::Status status = file->parse(); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat("GGUF file '", path, "': ", status.message()));
  }
  return file;
}

void GgufFile::release_pages(const void* p, uint64_t n) const {
  if (!mapped_ || n == 0) return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(p);
  BATON_CHECK(begin >= reinterpret_cast<uintptr_t>(base_) && begin + n <= reinterpret_cast<uintptr_t>(base_) + size_,
              "release_pages: range outside the mapping");
  const uintptr_t first = (begin + page - 1) / page * page;  // whole pages only: neighbours keep theirs
  const uintptr_t last = (begin + n) / page * page;
  // MAP_PRIVATE, read-only, never written: dropped pages are re-read from the file.
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBytes(std::vector<uint8_t> bytes) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  // Exact-size allocation so sanitizers catch any read past the end.
  auto* buffer = static_cast<uint8_t*>(::operator new[](bytes.size(), kHeapAlignment));
  if (!bytes.empty()) std::memcpy(buffer, bytes.data(), bytes.size());
  file->base_ = buffer;
  file->size_ = bytes.size();
  BATON_RETURN_IF_ERROR(file->parse());
  return file;
}

absl::Status GgufFile::parse() {
  static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");
  Parser in(base_, size_);

  // Header: magic, version, tensor count, metadata count.
  if (size_ < 4 || std::memcmp(base_, "GGUF", 4) != 0) {
    std::string found;
    for (uint64_t i = 0; i < std::min<uint64_t>(size_, 4); ++i) {
      absl::StrAppend(&found, i ? " " : "", absl::Hex(base_[i], absl::kZeroPad2));
    }
    return absl::InvalidArgumentError(absl::StrCat("bad magic at byte offset 0: expected 'GGUF' (47 47 55 46), found [",
                                                   found, "]; this is not a GGUF file"));
  }
  BATON_ASSIGN_OR_RETURN(const uint32_t magic, in.read<uint32_t>("magic"));
  BATON_CHECK(magic == kGgufMagic);
  BATON_ASSIGN_OR_RETURN(version_, in.read<uint32_t>("version"));
  if (version_ == 1) {
    return absl::InvalidArgumentError("GGUF version 1 is not supported (at byte offset 4); Baton reads versions 2 and 3");
  }
  if (version_ != 2 && version_ != 3) {
    if ((version_ & 0xFFFFu) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF version field 0x", absl::Hex(version_),
                                                     " at byte offset 4 looks byte-swapped; big-endian GGUF "
                                                     "files are not supported"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF version ", version_, " at byte offset 4 is not supported; Baton reads versions 2 and 3"));
  }
  const uint64_t n_tensors_at = in.pos();
  BATON_ASSIGN_OR_RETURN(const uint64_t n_tensors, in.read<uint64_t>("tensor count"));
  const uint64_t n_kv_at = in.pos();
  BATON_ASSIGN_OR_RETURN(const uint64_t n_kv, in.read<uint64_t>("metadata count"));
  if (n_tensors > in.remaining() / kMinTensorInfoBytes) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF tensor count ", n_tensors, " at byte offset ", n_tensors_at,
                                                   " cannot fit in the ", in.remaining(), " bytes left (each tensor "
                                                   "info needs at least ", kMinTensorInfoBytes, " bytes)"));
  }
  if (n_kv > in.remaining() / kMinKvBytes) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF metadata count ", n_kv, " at byte offset ", n_kv_at,
                                                   " cannot fit in the ", in.remaining(), " bytes left (each "
                                                   "entry needs at least ", kMinKvBytes, " bytes)"));
  }

  // Metadata.
  metadata_.reserve(n_kv);
  std::vector<uint64_t> key_offsets;  // byte offset of each key, for error messages
  key_offsets.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    key_offsets.push_back(in.pos());
    BATON_ASSIGN_OR_RETURN(std::string key, in.read_string(absl::StrCat("metadata key #", i)));
    const std::string what = absl::StrCat("metadata key '", key, "'");
    BATON_ASSIGN_OR_RETURN(const GgufValueType type, in.read_value_type(what));
    BATON_ASSIGN_OR_RETURN(GgufValue value, in.read_value(type, 0, what));
    metadata_.emplace_back(std::move(key), std::move(value));
  }
  for (size_t i = 0; i < metadata_.size(); ++i) {
    if (!metadata_index_.emplace(metadata_[i].first, i).second) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF metadata key '", metadata_[i].first,
                                                     "' at byte offset ", key_offsets[i], " is a duplicate"));
    }
  }
  if (const GgufValue* align = find(kGgufAlignmentKey)) {
    absl::StatusOr<int64_t> value = align->as_int();
    if (!value.ok() || align->type() == GgufValueType::kBool || *value <= 0 || *value > (int64_t{1} << 31) ||
        (*value & (*value - 1)) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("GGUF metadata '", kGgufAlignmentKey, "' (", align->type_description(),
                       value.ok() ? absl::StrCat(" ", *value) : std::string(),
                       ") must be a power of two between 1 and 2^31"));
    }
    alignment_ = static_cast<uint64_t>(*value);
  }

  // Tensor infos.
  if (n_tensors > in.remaining() / kMinTensorInfoBytes) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF tensor count ", n_tensors, " at byte offset ", n_tensors_at,
                                                   " cannot fit in the ", in.remaining(),
                                                   " bytes left after the metadata"));
  }
  tensors_.reserve(n_tensors);
  std::vector<uint64_t> info_offsets;  // byte offset of each tensor info, for error messages
  info_offsets.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    info_offsets.push_back(in.pos());
    GgufTensorInfo info;
    BATON_ASSIGN_OR_RETURN(info.name, in.read_string(absl::StrCat("tensor #", i, " name")));
    const std::string what = absl::StrCat("tensor '", info.name, "'");
    const uint64_t n_dims_at = in.pos();
    BATON_ASSIGN_OR_RETURN(const uint32_t n_dims, in.read<uint32_t>(what));
    if (n_dims < 1 || n_dims > kGgufMaxDims) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has ", n_dims, " dimensions at byte offset ", n_dims_at,
                                                     "; GGUF allows 1 to ", kGgufMaxDims));
    }
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim_at = in.pos();
      BATON_ASSIGN_OR_RETURN(const uint64_t dim, in.read<uint64_t>(what));
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(n_elements, static_cast<int64_t>(dim), &n_elements)) {
        return absl::InvalidArgumentError(absl::StrCat(what, " dimension ", d, " = ", dim, " at byte offset ", dim_at,
                                                       " makes the element count overflow int64"));
      }
      info.dims.push_back(static_cast<int64_t>(dim));
    }
    const uint64_t type_at = in.pos();
    BATON_ASSIGN_OR_RETURN(const uint32_t raw_type, in.read<uint32_t>(what));
    if (!ggml_type_supported(raw_type)) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has type ", av(ggml_type_name(raw_type)), " (", raw_type,
                                                     ") at byte offset ", type_at,
                                                     raw_type == static_cast<uint32_t>(GgmlType::kQ8_K)
                                                         ? ", an activation-only type that no model file stores"
                                                         : ", which Baton does not support",
                                                     "; supported: ", supported_types_list()));
    }
    info.type = static_cast<GgmlType>(raw_type);
    const int64_t block = ggml_block_elements(info.type);
    if (info.dims[0] % block != 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has row length ne0=", info.dims[0], ", not a multiple of the ",
                                                     av(ggml_type_name(info.type)), " block size ", block));
    }
    int64_t n_bytes = 0;
    if (__builtin_mul_overflow(n_elements / block, ggml_block_bytes(info.type), &n_bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(what, " with ", n_elements, " elements overflows int64 bytes"));
    }
    info.n_bytes = static_cast<uint64_t>(n_bytes);
    const uint64_t offset_at = in.pos();
    BATON_ASSIGN_OR_RETURN(info.offset, in.read<uint64_t>(what));
    if (info.offset % alignment_ != 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, " data offset ", info.offset, " (at byte offset ", offset_at,
                                                     ") is not a multiple of the alignment ", alignment_));
    }
    info.data = nullptr;
    tensors_.push_back(std::move(info));
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (!tensor_index_.emplace(tensors_[i].name, i).second) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF tensor name '", tensors_[i].name, "' at byte offset ",
                                                     info_offsets[i], " is a duplicate"));
    }
  }

  // Data section: starts at the next alignment boundary after the infos.
  data_offset_ = (in.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (tensors_.empty()) return absl::OkStatus();  // trailing padding is optional then
  if (data_offset_ > size_) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF tensor data section would start at byte offset ",
                                                   data_offset_, " (aligned to ", alignment_,
                                                   "), past the end of the ", size_, "-byte file"));
  }
  const uint64_t data_bytes = size_ - data_offset_;
  for (GgufTensorInfo& info : tensors_) {
    if (info.offset > data_bytes || info.n_bytes > data_bytes - info.offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", info.name, "' data [", info.offset, ", ", info.offset + info.n_bytes,
          ") runs past the end of the file: the data section starts at byte offset ", data_offset_, " and holds ",
          data_bytes, " bytes (file is ", size_, " bytes)"));
    }
    info.data = base_ + data_offset_ + info.offset;
  }
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const GgufTensorInfo& info : tensors_) {
    if (info.n_bytes > 0) by_offset.push_back(&info);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = *by_offset[i - 1];
    const GgufTensorInfo& cur = *by_offset[i];
    if (prev.offset + prev.n_bytes > cur.offset) {
      return absl::InvalidArgumentError(absl::StrCat("tensors '", prev.name, "' [", prev.offset, ", ",
                                                     prev.offset + prev.n_bytes, ") and '", cur.name, "' [",
                                                     cur.offset, ", ", cur.offset + cur.n_bytes,
                                                     ") overlap in the data section"));
    }
  }
  return absl::OkStatus();
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<const GgufValue*> GgufFile::find_or_error(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return absl::NotFoundError(absl::StrCat("metadata key '", av(key), "' is missing"));
  return value;
}

namespace {
absl::Status wrong_type(std::string_view key, const GgufValue& value, std::string_view expected) {
  return absl::InvalidArgumentError(absl::StrCat("metadata key '", av(key), "' has type ", value.type_description(),
                                                 ", expected ", av(expected)));
}
}  // namespace

absl::StatusOr<int64_t> GgufFile::get_int(std::string_view key) const {
  BATON_ASSIGN_OR_RETURN(const GgufValue* value, find_or_error(key));
  absl::StatusOr<int64_t> out = value->as_int();
  if (out.ok()) return out;
  if (value->type() == GgufValueType::kUint64) {
    return absl::InvalidArgumentError(absl::StrCat("metadata key '", av(key), "': ", out.status().message()));
  }
  return wrong_type(key, *value, "an integer");
}

absl::StatusOr<double> GgufFile::get_float(std::string_view key) const {
  BATON_ASSIGN_OR_RETURN(const GgufValue* value, find_or_error(key));
  absl::StatusOr<double> out = value->as_float();
  if (!out.ok()) return wrong_type(key, *value, "a number");
  return out;
}

absl::StatusOr<bool> GgufFile::get_bool(std::string_view key) const {
  BATON_ASSIGN_OR_RETURN(const GgufValue* value, find_or_error(key));
  absl::StatusOr<bool> out = value->as_bool();
  if (!out.ok()) return wrong_type(key, *value, "bool");
  return out;
}

absl::StatusOr<std::string> GgufFile::get_string(std::string_view key) const {
  BATON_ASSIGN_OR_RETURN(const GgufValue* value, find_or_error(key));
  absl::StatusOr<std::string_view> out = value->as_string();
  if (!out.ok()) return wrong_type(key, *value, "string");
  return std::string(*out);
}

absl::StatusOr<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
  BATON_ASSIGN_OR_RETURN(const GgufValue* value, find_or_error(key));
  if (!value->is_array() || value->array_type() != GgufValueType::kString) {
    return wrong_type(key, *value, "array of string");
  }
  std::vector<std::string> out;
  out.reserve(value->array().size());
  for (const GgufValue& elem : value->array()) out.emplace_back(*elem.as_string());
  return out;
}

absl::StatusOr<std::vector<float>> GgufFile::get_float_array(std::string_view key) const {
  BATON_ASSIGN_OR_RETURN(const GgufValue* value, find_or_error(key));
  if (!value->is_array() || !is_numeric(value->array_type())) return wrong_type(key, *value, "array of numbers");
  std::vector<float> out;
  out.reserve(value->array().size());
  for (const GgufValue& elem : value->array()) out.push_back(static_cast<float>(*elem.as_float()));
  return out;
}

absl::StatusOr<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  BATON_ASSIGN_OR_RETURN(const GgufValue* value, find_or_error(key));
  const GgufValueType elem_type = value->array_type();
  if (!value->is_array() || elem_type == GgufValueType::kString || elem_type == GgufValueType::kArray ||
      elem_type == GgufValueType::kFloat32 || elem_type == GgufValueType::kFloat64) {
    return wrong_type(key, *value, "array of integers");
  }
  std::vector<int64_t> out;
  out.reserve(value->array().size());
  for (const GgufValue& elem : value->array()) {
    absl::StatusOr<int64_t> v = elem.as_int();
    if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat("metadata key '", av(key), "': ", v.status().message()));
    out.push_back(*v);
  }
  return out;
}

}  // namespace baton
