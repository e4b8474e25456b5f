// libFuzzer target: arbitrary bytes as text through the tokenizers of real
// vocabularies (SentencePiece: the bundled model's; byte-level BPE: GPT-2's
// from tests/data/vocab), and as token ids through decode and the streaming
// decoder. Must never crash, leak or hang; encode must only produce ids in
// the vocabulary; the streaming decoder's pieces must be valid UTF-8 and add
// up to decode()'s bytes once flushed; every pre-tokenizer's words must be
// non-empty and add up to the text.
// Build and run: tests/fuzz/build.sh && tests/fuzz/run.sh tokenizer 600
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/gguf/gguf_file.h"
#include "common/tokenizer/pre_tokenizer.h"
#include "common/tokenizer/streaming_decoder.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/unicode.h"

namespace {

struct Vocab {
  std::unique_ptr<baton::GgufFile> file;
  std::unique_ptr<baton::Tokenizer> tokenizer;
};

std::vector<Vocab>* vocabs = nullptr;

void load(const std::string& path) {
  auto file = baton::GgufFile::Open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: cannot open %s: %s\n", path.c_str(),
                 std::string(file.status().message()).c_str());
    std::abort();
  }
  auto tokenizer = baton::Tokenizer::FromGguf(**file);
  if (!tokenizer.ok()) std::abort();
  vocabs->push_back(Vocab{std::move(*file), std::move(*tokenizer)});
}

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "tokenizer_fuzz: %s\n", what);
    std::abort();
  }
}

// The project's UTF-8 rule (rejects overlong forms and surrogates: a
// hand-rolled lead-byte check here once flagged "\xc0\x80" as valid and
// blamed the decoder for sanitizing it).
bool valid_utf8(const std::string& s) { return baton::IsValidUtf8(s); }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  const char* root = std::getenv("BATON_SOURCE_DIR");
  const std::string dir = root != nullptr ? root : ".";
  vocabs = new std::vector<Vocab>();
  load(dir + "/deploy/models/baton-tiny-kjv-f16.gguf");
  load(dir + "/tests/data/vocab/ggml-vocab-gpt-2.gguf");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  using baton::PreTokenizerKind;
  for (const PreTokenizerKind kind :
       {PreTokenizerKind::kGpt2, PreTokenizerKind::kLlama3, PreTokenizerKind::kQwen2,
        PreTokenizerKind::kDeepseekLlm, PreTokenizerKind::kDeepseekCoder, PreTokenizerKind::kFalcon,
        PreTokenizerKind::kStarcoder, PreTokenizerKind::kTekken}) {
    std::string joined;
    for (const std::string_view word : baton::PreTokenizer(kind).split(text)) {
      require(!word.empty(), "a pre-tokenizer produced an empty word");
      joined += word;
    }
    require(joined == text, "a pre-tokenizer's words do not add up to the text");
  }
  for (const Vocab& vocab : *vocabs) {
    const baton::Tokenizer& tokenizer = *vocab.tokenizer;
    const std::vector<int32_t> ids = tokenizer.encode(text);
    for (int32_t id : ids) require(id >= 0 && id < tokenizer.n_vocab(), "encode produced an id outside the vocabulary");
    (void)tokenizer.decode(ids);

    // The bytes again as token ids (2 bytes each), through the streaming decoder.
    std::vector<int32_t> raw_ids;
    for (size_t i = 0; i + 1 < size; i += 2) {
      raw_ids.push_back(static_cast<int32_t>((data[i] | (data[i + 1] << 8)) % tokenizer.n_vocab()));
    }
    baton::StreamingDecoder decoder(tokenizer);
    std::string streamed;
    for (int32_t id : raw_ids) {
      const std::string piece = decoder.push(id);
      require(valid_utf8(piece), "the streaming decoder emitted invalid UTF-8");
      streamed += piece;
    }
    streamed += decoder.flush();
    const std::string whole = tokenizer.decode(raw_ids);
    if (valid_utf8(whole)) require(streamed == whole, "streamed pieces differ from decode()");
  }
  return 0;
}
