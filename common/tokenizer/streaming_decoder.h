// StreamingDecoder: turns tokens into text one token at a time, for streaming
// generated output. A UTF-8 character can span tokens (byte-fallback tokens,
// byte-level BPE pieces), so bytes that only begin a character are held back
// until the rest arrives; nothing emitted is ever half a character.
//
// For token sequences whose decode() is valid UTF-8, the concatenation of
// every push() and the final flush() equals decode(). Bytes that cannot be
// part of valid UTF-8 become U+FFFD instead (one per maximal invalid
// subpart, as in the Unicode recommendation), so the output is always valid.
#pragma once

#include <cstdint>
#include <string>

#include "common/tokenizer/tokenizer.h"

namespace baton {

class StreamingDecoder {
 public:
  // `tokenizer` must outlive the decoder.
  explicit StreamingDecoder(const Tokenizer& tokenizer, const DecodeOptions& options = {});

  // Decodes one more token; returns the text that became complete (often
  // empty while a multi-byte character is still incomplete).
  std::string push(int32_t token);
  // Ends the sequence: returns what is held back (an incomplete character
  // becomes U+FFFD) and resets the decoder for a new sequence.
  std::string flush();

  // Bytes held back waiting for the rest of a character (0 to 3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  DecodeOptions options_;
  bool at_start_ = true;  // before the first token: leading-space rule pending
  std::string pending_;   // decoded bytes not yet emitted
};

}  // namespace baton
