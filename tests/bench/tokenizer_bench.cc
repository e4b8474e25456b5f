// Encode throughput of the two tokenizers on ~1 MB of deterministic
// English-like prose (words, punctuation, numbers, paragraphs). Reports
// tokens/s and MB/s of input text.
//
// The vocab files come from tests/data/vocab under $BATON_SOURCE_DIR, else
// under the source tree this file was compiled from.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/gguf/gguf_file.h"
#include "common/tokenizer/tokenizer.h"

namespace baton {
namespace {

std::string SourceDir() {
  const char* env = std::getenv("BATON_SOURCE_DIR");
  if (env != nullptr && env[0] != '\0') return env;
  const std::string file = __FILE__;  // <root>/tests/bench/tokenizer_bench.cc
  return file.substr(0, file.rfind("/tests/bench/"));
}

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& name, std::string& error) {
  auto file = GgufFile::Open(SourceDir() + "/tests/data/vocab/" + name);
  if (!file.ok()) {
    error = file.status().ToString();
    return nullptr;
  }
  auto tokenizer = Tokenizer::FromGguf(**file);
  if (!tokenizer.ok()) {
    error = tokenizer.status().ToString();
    return nullptr;
  }
  return std::move(*tokenizer);
}

// ~n_bytes of sentences built from common English words (fixed seed).
std::string EnglishText(size_t n_bytes) {
  static const char* const kWords[] = {
      "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with",
      "be", "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which",
      "but", "have", "an", "had", "they", "you", "were", "their", "one", "all", "we", "can",
      "her", "has", "there", "been", "if", "more", "when", "will", "would", "who", "so",
      "model", "network", "latency", "bandwidth", "tokenizer", "inference", "language",
      "request", "response", "server", "device", "memory", "throughput", "distributed",
      "understanding", "international", "experimentally", "characteristics", "don't",
      "it's", "we'll", "they've", "Baton", "London", "Monday", "GPU"};
  static const char* const kEnds[] = {".", ".", ".", "?", "!", ";", ":"};
  std::mt19937 rng(2024);
  std::string text;
  text.reserve(n_bytes + 256);
  while (text.size() < n_bytes) {
    const int n_words = 6 + static_cast<int>(rng() % 18);
    for (int i = 0; i < n_words; ++i) {
      std::string word = kWords[rng() % std::size(kWords)];
      if (i == 0) word[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(word[0])));
      text += word;
      if (rng() % 40 == 0) text += " " + std::to_string(rng() % 100000);
      if (i + 1 < n_words) text += rng() % 12 == 0 ? ", " : " ";
    }
    text += kEnds[rng() % std::size(kEnds)];
    text += rng() % 8 == 0 ? "\n\n" : " ";
  }
  return text;
}

void EncodeBenchmark(benchmark::State& state, const char* vocab_name) {
  std::string error;
  const std::unique_ptr<Tokenizer> tokenizer = LoadTokenizer(vocab_name, error);
  if (tokenizer == nullptr) {
    state.SkipWithError(error.c_str());
    return;
  }
  const std::string text = EnglishText(1 << 20);
  size_t n_tokens = 0;
  for (auto _ : state) {
    const std::vector<int32_t> ids = tokenizer->encode(text);
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(n_tokens),
                                                  benchmark::Counter::kIsIterationInvariantRate);
  state.counters["MB/s"] = benchmark::Counter(static_cast<double>(text.size()) / 1e6,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens"] = static_cast<double>(n_tokens);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}

void BM_TokenizerEncodeLlamaSpm(benchmark::State& state) {
  EncodeBenchmark(state, "ggml-vocab-llama-spm.gguf");
}
void BM_TokenizerEncodeGpt2(benchmark::State& state) {
  EncodeBenchmark(state, "ggml-vocab-gpt-2.gguf");
}
BENCHMARK(BM_TokenizerEncodeLlamaSpm)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TokenizerEncodeGpt2)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace baton
