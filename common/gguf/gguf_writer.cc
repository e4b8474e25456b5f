#include "common/gguf/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "common/gguf/gguf_file.h"
#include "common/util/atomic_file.h"
#include "common/util/check.h"

namespace baton {
namespace {

uint64_t align_up(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

// Bytes of a tensor, or why its type/dims are invalid.
absl::StatusOr<uint64_t> tensor_bytes(const std::string& name, GgmlType type, const std::vector<int64_t>& dims) {
  if (!ggml_type_supported(static_cast<uint32_t>(type))) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has unsupported type ",
                                                   static_cast<uint32_t>(type)));
  }
  if (dims.empty() || dims.size() > static_cast<size_t>(kGgufMaxDims)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' has ", dims.size(), " dimensions; GGUF allows 1 to ", kGgufMaxDims));
  }
  int64_t n_elements = 1;
  for (int64_t d : dims) {
    if (d < 0 || __builtin_mul_overflow(n_elements, d, &n_elements)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has dimension ", d,
                                                     " (negative, or the element count overflows int64)"));
    }
  }
  const int64_t block = ggml_block_elements(type);
  if (dims[0] % block != 0) {
    const std::string_view type_name = ggml_type_name(type);
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has row length ", dims[0],
                                                   ", not a multiple of the ",
                                                   absl::string_view(type_name.data(), type_name.size()),
                                                   " block size ", block));
  }
  int64_t n_bytes = 0;
  if (__builtin_mul_overflow(n_elements / block, ggml_block_bytes(type), &n_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' size overflows int64 bytes"));
  }
  return static_cast<uint64_t>(n_bytes);
}

// Little-endian serialization of the header, metadata and tensor infos.
class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void put(T value) {
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    out_->insert(out_->end(), p, p + sizeof(T));
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    out_->insert(out_->end(), s.begin(), s.end());
  }
  // Value payload only (the type id is written by the caller).
  void put_value(const GgufValue& v) {
    const uint64_t bits = v.raw_bits();
    switch (v.type()) {
      case GgufValueType::kUint8:
      case GgufValueType::kInt8:
      case GgufValueType::kBool: put<uint8_t>(static_cast<uint8_t>(bits)); break;
      case GgufValueType::kUint16:
      case GgufValueType::kInt16: put<uint16_t>(static_cast<uint16_t>(bits)); break;
      case GgufValueType::kUint32:
      case GgufValueType::kInt32: put<uint32_t>(static_cast<uint32_t>(bits)); break;
      case GgufValueType::kUint64:
      case GgufValueType::kInt64: put<uint64_t>(bits); break;
      case GgufValueType::kFloat32: put<float>(static_cast<float>(*v.as_float())); break;
      case GgufValueType::kFloat64: put<double>(*v.as_float()); break;
      case GgufValueType::kString: put_string(*v.as_string()); break;
      case GgufValueType::kArray:
        put<uint32_t>(static_cast<uint32_t>(v.array_type()));
        put<uint64_t>(v.array().size());
        for (const GgufValue& elem : v.array()) put_value(elem);
        break;
    }
  }

 private:
  std::vector<uint8_t>* out_;
};

}  // namespace

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  BATON_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "GGUF alignment must be a power of two");
  if (alignment != kGgufDefaultAlignment) set_u32(kGgufAlignmentKey, alignment);
}

void GgufWriter::set(std::string key, GgufValue value) {
  for (auto& [existing_key, existing_value] : metadata_) {
    if (existing_key == key) {
      existing_value = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<int64_t> dims, FillFn fill) {
  tensors_.push_back(Tensor{std::move(name), type, std::move(dims), std::move(fill)});
}

void GgufWriter::add_tensor_copy(std::string name, GgmlType type, std::vector<int64_t> dims, const void* data) {
  absl::StatusOr<uint64_t> n_bytes = tensor_bytes(name, type, dims);
  FillFn fill;
  if (n_bytes.ok()) {
    auto copy = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(data),
                                                       static_cast<const uint8_t*>(data) + *n_bytes);
    fill = [copy](uint8_t* dst, uint64_t size) {
      BATON_CHECK(size == copy->size());
      std::memcpy(dst, copy->data(), size);
      return absl::OkStatus();
    };
  } else {
    // plan() reports the same error before any fill runs.
    fill = [status = n_bytes.status()](uint8_t*, uint64_t) { return status; };
  }
  add_tensor(std::move(name), type, std::move(dims), std::move(fill));
}

absl::StatusOr<GgufWriter::Layout> GgufWriter::plan() const {
  // general.alignment must agree with what the data is padded to.
  for (const auto& [key, value] : metadata_) {
    if (key != kGgufAlignmentKey) continue;
    absl::StatusOr<int64_t> recorded = value.as_int();
    if (value.type() != GgufValueType::kUint32 || !recorded.ok() || *recorded != alignment_) {
      return absl::InvalidArgumentError(absl::StrCat("metadata '", kGgufAlignmentKey, "' is ",
                                                     value.type_description(), " ",
                                                     recorded.ok() ? absl::StrCat(*recorded) : std::string("?"),
                                                     " but this writer aligns to uint32 ", alignment_));
    }
  }
  Layout layout;
  std::unordered_set<std::string_view> names;
  uint64_t data_bytes = 0;
  for (const Tensor& t : tensors_) {
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("tensor name '", t.name, "' is added twice"));
    }
    BATON_ASSIGN_OR_RETURN(const uint64_t n_bytes, tensor_bytes(t.name, t.type, t.dims));
    layout.tensor_offset.push_back(data_bytes);
    layout.tensor_bytes.push_back(n_bytes);
    data_bytes = align_up(data_bytes + n_bytes, alignment_);
  }

  ByteSink sink(&layout.header);
  sink.put<uint32_t>(kGgufMagic);
  sink.put<uint32_t>(kGgufVersion);
  sink.put<uint64_t>(tensors_.size());
  sink.put<uint64_t>(metadata_.size());
  for (const auto& [key, value] : metadata_) {
    sink.put_string(key);
    sink.put<uint32_t>(static_cast<uint32_t>(value.type()));
    sink.put_value(value);
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    sink.put_string(t.name);
    sink.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) sink.put<uint64_t>(static_cast<uint64_t>(d));
    sink.put<uint32_t>(static_cast<uint32_t>(t.type));
    sink.put<uint64_t>(layout.tensor_offset[i]);
  }
  layout.data_offset = align_up(layout.header.size(), alignment_);
  layout.total_bytes = layout.data_offset + data_bytes;
  return layout;
}

absl::StatusOr<std::vector<uint8_t>> GgufWriter::write_to_bytes() const {
  BATON_ASSIGN_OR_RETURN(const Layout layout, plan());
  std::vector<uint8_t> out(layout.total_bytes, 0);  // padding stays zero
  std::memcpy(out.data(), layout.header.data(), layout.header.size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    BATON_RETURN_IF_ERROR(
        tensors_[i].fill(out.data() + layout.data_offset + layout.tensor_offset[i], layout.tensor_bytes[i]));
  }
  return out;
}

absl::Status GgufWriter::write(const std::string& path) const {
  BATON_ASSIGN_OR_RETURN(const Layout layout, plan());
  // A model file is not a secret: the mode any new file gets.
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFile> file, AtomicFile::create(path, AtomicFileMode::kShared));
  auto put = [&](const void* p, uint64_t n) {
    return file->write(std::string_view(static_cast<const char*>(p), n));
  };
  const std::vector<uint8_t> zeros(alignment_, 0);  // padding source, bytes
  std::vector<uint8_t> buffer;                      // one tensor's bytes, reused
  BATON_RETURN_IF_ERROR(put(layout.header.data(), layout.header.size()));
  BATON_RETURN_IF_ERROR(put(zeros.data(), layout.data_offset - layout.header.size()));
  uint64_t pos = 0;  // bytes written into the data section
  for (size_t i = 0; i < tensors_.size(); ++i) {
    BATON_CHECK(pos == layout.tensor_offset[i]);
    const uint64_t n_bytes = layout.tensor_bytes[i];
    if (buffer.size() < n_bytes) buffer.resize(n_bytes);
    BATON_RETURN_IF_ERROR(tensors_[i].fill(buffer.data(), n_bytes));
    BATON_RETURN_IF_ERROR(put(buffer.data(), n_bytes));
    const uint64_t padded = align_up(pos + n_bytes, alignment_);
    BATON_RETURN_IF_ERROR(put(zeros.data(), padded - pos - n_bytes));
    pos = padded;
  }
  return file->commit();  // flush, fsync, rename, fsync of the directory
}

}  // namespace baton
