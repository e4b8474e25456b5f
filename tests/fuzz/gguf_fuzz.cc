// libFuzzer target: arbitrary bytes as a GGUF file through GgufFile::FromBytes
// and, when that accepts them, the model spec parser and the tokenizer
// loader. Must never crash, leak or hang; every accepted tensor must lie
// inside the file. Build and run: tests/fuzz/build.sh && tests/fuzz/run.sh gguf 600
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/gguf/gguf_file.h"
#include "common/model/model_spec.h"
#include "common/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = baton::GgufFile::FromBytes(std::vector<uint8_t>(data, data + size));
  if (!file.ok()) return 0;
  for (const baton::GgufTensorInfo& tensor : (*file)->tensors()) {
    const uint64_t end = (*file)->data_offset() + tensor.offset + tensor.n_bytes;
    if (end < tensor.offset || end > (*file)->file_size()) {
      std::fprintf(stderr, "gguf_fuzz: tensor '%s' lies outside the file\n", tensor.name.c_str());
      std::abort();
    }
  }
  (void)baton::model_spec_from_gguf(**file);
  auto tokenizer = baton::Tokenizer::FromGguf(**file);
  if (tokenizer.ok()) {
    // A vocabulary that loads must encode and decode without trouble.
    const std::vector<int32_t> ids = (*tokenizer)->encode("Hello world, 123 \xc3\xa9 <s>");
    (void)(*tokenizer)->decode(ids);
  }
  return 0;
}
