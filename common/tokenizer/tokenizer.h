// Tokenizer: text <-> token ids for the vocabulary stored in a GGUF file.
//
//   tokenizer.ggml.model = llama  SentencePiece-style BPE on scores (SpmTokenizer)
//   tokenizer.ggml.model = gpt2   byte-level BPE on merges (BpeTokenizer), split
//                                 by the pre-tokenizer tokenizer.ggml.pre names
//
// The facade owns the vocabulary, the special tokens and the encode/decode
// conventions shared by both models; the merge algorithms live in
// spm_tokenizer.cc and bpe_tokenizer.cc. Thread-safe for concurrent const use.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf/gguf_file.h"
#include "common/tokenizer/vocab.h"

namespace baton {

class SpmTokenizer;
class BpeTokenizer;
class SpecialTokenSplitter;

struct EncodeOptions {
  // Prepend BOS / append EOS; nullopt takes tokenizer.ggml.add_bos_token /
  // add_eos_token (defaults: llama true / false, gpt2 false / false).
  std::optional<bool> add_bos = std::nullopt;
  std::optional<bool> add_eos = std::nullopt;
  // Turn the text of control and unknown tokens (e.g. "<|eot_id|>", "</s>",
  // "<unk>") into those tokens. Off: such text is tokenized as plain text, so
  // user input cannot inject control tokens. The text of user-defined tokens
  // (added words, type 4) always becomes those tokens, as in llama.cpp and
  // Hugging Face tokenizers.
  bool parse_special = false;
};

struct DecodeOptions {
  // Render control and unknown tokens as their text ("<s>", "<|eot_id|>");
  // off: they decode to nothing.
  bool render_special = false;
};

enum class TokenizerModel { kLlama, kGpt2 };

class Tokenizer {
 public:
  // Reads the tokenizer.ggml.* metadata. InvalidArgumentError for an unknown
  // model or pre-tokenizer (naming the value and the supported ones), arrays
  // of mismatched length, or special-token ids outside the vocabulary.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text` (arbitrary bytes; invalid UTF-8 survives as byte
  // tokens). Empty text gives only the BOS/EOS the options ask for.
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;

  // Bytes of the tokens. With add_space_prefix (llama), the first token that
  // is not a control token loses one leading space, undoing the prefix encode
  // added. Every id must be valid (is_valid_token); check ids from untrusted
  // sources first.
  std::string decode(std::span<const int32_t> tokens, const DecodeOptions& options = {}) const;

  // Incremental form of decode(): appends the bytes of `token` to `out`.
  // `at_start` is true before the first token of a sequence and is cleared
  // once the leading-space rule has been applied. decode() == this in a loop.
  void append_piece(int32_t token, const DecodeOptions& options, bool& at_start,
                    std::string& out) const;

  // Bytes `token` decodes to in the middle of a sequence (no leading-space
  // removal; control tokens give "").
  std::string token_piece(int32_t token) const;
  // The token's vocabulary text as stored ("▁the", "Ġthe", "<0x0A>", "<s>").
  const std::string& token_text(int32_t token) const;
  TokenType token_type(int32_t token) const;

  bool is_valid_token(int32_t token) const { return vocab_.is_valid(token); }
  // End of generation, derived as llama.cpp derives its EOG set: the EOS,
  // EOT and EOM ids the file names, plus every token whose text is a known
  // end-of-turn marker (<|eot_id|>, <|eom_id|>, <|end_of_text|>, <|im_end|>,
  // <|endoftext|>, <|end|>, <end_of_turn>, <EOT>, _<EOT>). Instruct GGUFs
  // often name only one of them (Gemma 3: EOS <eos>, turns end with
  // <end_of_turn>; Phi-3: EOS <|endoftext|>, turns end with <|end|>).
  bool is_eog(int32_t token) const {
    return token >= 0 && token < static_cast<int32_t>(is_eog_.size()) && is_eog_[token];
  }
  // The EOG ids in increasing order.
  std::vector<int32_t> eog_ids() const;

  // -1 when the vocabulary has none. EOT comes from tokenizer.ggml.eot_token_id,
  // else the first of <|eot_id|>, <|im_end|>, <|end|>, <end_of_turn> that is a
  // control or user-defined token.
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t eot_id() const { return eot_id_; }
  // tokenizer.ggml.eom_token_id, else <|eom_id|> when it is a control or
  // user-defined token (Llama 3.1+: end of a message that awaits a tool result).
  int32_t eom_id() const { return eom_id_; }
  int32_t unk_id() const { return unk_id_; }
  int32_t pad_id() const { return pad_id_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }

  int32_t n_vocab() const { return vocab_.n_vocab(); }
  TokenizerModel model() const { return model_; }
  // "llama" or "gpt2" (the tokenizer.ggml.model value).
  std::string_view model_name() const;
  // Pre-tokenizer name for gpt2 ("gpt2", "llama-bpe", "qwen2"); "" for llama.
  std::string_view pre_tokenizer_name() const;

 private:
  Tokenizer();
  absl::Status load_vocab(const GgufFile& file);
  absl::Status load_special_tokens(const GgufFile& file);
  void encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const;
  void build_eog_set();

  TokenizerModel model_ = TokenizerModel::kLlama;
  Vocab vocab_;
  std::unique_ptr<SpmTokenizer> spm_;  // set for llama
  std::unique_ptr<BpeTokenizer> bpe_;  // set for gpt2
  // [n_vocab] bytes each token decodes to mid-sequence with render_special off.
  std::vector<std::string> pieces_;
  // Finds added-token text in prompts (see special_token_splitter.h).
  std::unique_ptr<SpecialTokenSplitter> special_splitter_;

  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t eot_id_ = -1;
  int32_t eom_id_ = -1;
  int32_t unk_id_ = -1;
  int32_t pad_id_ = -1;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_space_prefix_ = false;  // llama only: encode prepends " ", decode drops it
  std::vector<bool> is_eog_;       // [n_vocab] see is_eog()
};

}  // namespace baton
