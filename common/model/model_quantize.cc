#include "common/model/model_quantize.h"

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/gguf/ggml_quant.h"
#include "common/gguf/gguf_file.h"
#include "common/gguf/gguf_writer.h"
#include "common/model/model.h"
#include "common/model/model_metadata.h"
#include "common/model/model_synth.h"
#include "common/util/check.h"
#include "common/util/log.h"
#include "common/util/thread_pool.h"

namespace baton {

absl::Status quantize_model(const std::string& in_path, const std::string& out_path,
                            const QuantizeOptions& options) {
  if (in_path == out_path) return absl::InvalidArgumentError("input and output are the same file");
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> in, GgufFile::Open(in_path));
  // Load as a model first: refuse to derive files from something the engine cannot run.
  BATON_ASSIGN_OR_RETURN(std::string source_digest, source_weights_digest(*in));
  const GgufFile* in_raw = in.get();
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::FromFile(std::move(in)));

  GgufWriter w(static_cast<uint32_t>(in_raw->alignment()));
  for (const auto& [key, value] : in_raw->metadata()) {
    if (key == "general.alignment") continue;  // the writer sets it
    w.set(key, value);
  }
  const QuantRecipe recipe{options.type, options.mix};
  w.set_u32("general.file_type", quant_recipe_file_type(recipe));
  if (ggml_block_elements(options.type) > 1) w.set_u32("general.quantization_version", 2);  // as llama.cpp
  w.set_string(kSourceWeightsDigestKey, source_digest);

  std::vector<QuantTensorInfo> infos;
  for (const GgufTensorInfo& t : in_raw->tensors()) infos.push_back({t.name, t.dims, t.type});
  const ModelSpec& spec = model->spec();
  BATON_ASSIGN_OR_RETURN(
      const std::vector<GgmlType> types,
      plan_tensor_types(infos, recipe, {spec.arch, spec.n_layer, spec.n_head, spec.n_head_kv}, options.output_type));

  auto pool = std::make_shared<ThreadPool>(resolve_thread_count(options.n_threads));
  for (size_t i = 0; i < in_raw->tensors().size(); ++i) {
    const GgufTensorInfo& t = in_raw->tensors()[i];
    const GgmlType out_type = types[i];
    if (t.dims.size() == 2 && out_type == GgmlType::kF32 && options.type != GgmlType::kF32 &&
        options.mix == QuantMix::kPure) {
      BATON_WARN("tensor '%s' rows of %lld are not whole %s blocks: kept as %s", t.name.c_str(),
                 static_cast<long long>(t.dims[0]), std::string(ggml_type_name(options.type)).c_str(),
                 std::string(ggml_type_name(out_type)).c_str());
    }
    const int64_t cols = t.dims[0];
    const int64_t rows = t.n_elements() / cols;
    const GgufTensorInfo* src = &t;
    w.add_tensor(t.name, out_type, t.dims, [=](uint8_t* dst, uint64_t n_bytes) -> absl::Status {
      const int64_t in_row_bytes = ggml_row_bytes(src->type, cols);
      const int64_t out_row_bytes = ggml_row_bytes(out_type, cols);
      BATON_CHECK(static_cast<uint64_t>(out_row_bytes * rows) == n_bytes);
      if (out_type == src->type) {  // nothing to convert (llama.cpp copies such tensors as they are)
        std::memcpy(dst, src->data, n_bytes);
        return absl::OkStatus();
      }
      pool->parallel_for(rows, [&](int64_t begin, int64_t end) {
        std::vector<float> row(cols);
        for (int64_t r = begin; r < end; ++r) {
          dequantize_row(src->type, src->data + r * in_row_bytes, row.data(), cols);
          quantize_row(out_type, row.data(), dst + r * out_row_bytes, cols);
        }
      });
      return absl::OkStatus();
    });
  }
  // `model` keeps the input mapping alive until the writer has run.
  return w.write(out_path);
}

}  // namespace baton
