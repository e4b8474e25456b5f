// Held-out text as model input, the same way for every command that scores or
// calibrates on a text file (`baton bench kv-quality`, `baton model
// calibrate`): tokenized line by line or whole, then cut into chunks that
// each start with BOS when the tokenizer adds one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"

namespace baton::cli {

// Tokens of the text: each non-empty line on its own, concatenated (no
// newline tokens), or the whole text at once. No BOS or EOS.
std::vector<int32_t> tokenize_text(const Tokenizer& tokenizer, const std::string& text, bool per_line);

// Chunks of [BOS] + chunk - 1 text tokens (no BOS when bos_id < 0); a short
// last chunk is kept when it has at least 8 tokens (4 when it is the only one).
std::vector<std::vector<int32_t>> cut_chunks(const std::vector<int32_t>& text_tokens, int64_t chunk, int32_t bos_id);

}  // namespace baton::cli
