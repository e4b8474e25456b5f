#include "text_chunks.h"

#include <algorithm>
#include <sstream>

namespace baton::cli {

std::vector<int32_t> tokenize_text(const Tokenizer& tokenizer, const std::string& text, bool per_line) {
  EncodeOptions options;
  options.add_bos = false;
  options.add_eos = false;
  if (!per_line) return tokenizer.encode(text, options);
  std::vector<int32_t> tokens;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::vector<int32_t> ids = tokenizer.encode(line, options);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
  }
  return tokens;
}

std::vector<std::vector<int32_t>> cut_chunks(const std::vector<int32_t>& text_tokens, int64_t chunk, int32_t bos_id) {
  const int64_t text_per_chunk = chunk - (bos_id >= 0 ? 1 : 0);
  std::vector<std::vector<int32_t>> chunks;
  for (size_t at = 0; at < text_tokens.size(); at += text_per_chunk) {
    std::vector<int32_t> c;
    if (bos_id >= 0) c.push_back(bos_id);
    const size_t end = std::min(text_tokens.size(), at + static_cast<size_t>(text_per_chunk));
    c.insert(c.end(), text_tokens.begin() + at, text_tokens.begin() + end);
    if (c.size() >= 8 || (chunks.empty() && c.size() >= 4)) chunks.push_back(std::move(c));
  }
  return chunks;
}

}  // namespace baton::cli
