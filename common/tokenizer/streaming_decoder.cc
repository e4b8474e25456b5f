#include "common/tokenizer/streaming_decoder.h"

#include "common/tokenizer/unicode.h"

namespace baton {

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, const DecodeOptions& options)
    : tokenizer_(tokenizer), options_(options) {}

std::string StreamingDecoder::push(int32_t token) {
  tokenizer_.append_piece(token, options_, at_start_, pending_);
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    const Utf8Char c = DecodeUtf8(pending_, pos);
    if (c.valid) {
      out.append(pending_, pos, c.n_bytes);
    } else if (IsIncompleteUtf8Prefix(pending_, pos)) {
      break;  // the next token may complete it
    } else {
      AppendUtf8(kReplacementChar, out);
    }
    pos += c.n_bytes;
  }
  pending_.erase(0, pos);
  return out;
}

std::string StreamingDecoder::flush() {
  std::string out;
  // What remains is one incomplete character (push emits everything else).
  if (!pending_.empty()) AppendUtf8(kReplacementChar, out);
  pending_.clear();
  at_start_ = true;
  return out;
}

}  // namespace baton
