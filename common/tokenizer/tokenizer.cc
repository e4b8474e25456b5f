#include "common/tokenizer/tokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer/bpe_tokenizer.h"
#include "common/tokenizer/pre_tokenizer.h"
#include "common/tokenizer/special_token_splitter.h"
#include "common/tokenizer/spm_tokenizer.h"
#include "common/tokenizer/unicode.h"
#include "common/util/check.h"

namespace baton {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁", SentencePiece's space

// Metadata lookups where absence is fine: nullopt when the key is missing,
// an error only when it is present with the wrong type.
absl::StatusOr<std::optional<int64_t>> OptionalInt(const GgufFile& file, std::string_view key) {
  if (file.find(key) == nullptr) return std::nullopt;
  BATON_ASSIGN_OR_RETURN(const int64_t value, file.get_int(key));
  return value;
}
absl::StatusOr<std::optional<bool>> OptionalBool(const GgufFile& file, std::string_view key) {
  if (file.find(key) == nullptr) return std::nullopt;
  BATON_ASSIGN_OR_RETURN(const bool value, file.get_bool(key));
  return value;
}

// "<0xNN>" -> NN; -1 if `text` is not a byte token text.
int ParseByteToken(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(text[3]);
  const int lo = hex(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// Bytes a token decodes to mid-sequence with render_special off.
std::string DecodedPiece(TokenizerModel model, TokenType type, const std::string& text) {
  switch (type) {
    case TokenType::kUserDefined:
      return text;  // added tokens are stored unescaped
    case TokenType::kByte: {
      const int byte = ParseByteToken(text);
      return byte < 0 ? std::string() : std::string(1, static_cast<char>(byte));
    }
    case TokenType::kNormal:
      break;
    default:
      return std::string();  // control, unknown, unused: only with render_special
  }
  std::string piece;
  if (model == TokenizerModel::kLlama) {
    for (size_t pos = 0; pos < text.size();) {
      if (text.compare(pos, kSpmSpace.size(), kSpmSpace) == 0) {
        piece.push_back(' ');
        pos += kSpmSpace.size();
      } else {
        piece.push_back(text[pos++]);
      }
    }
    return piece;
  }
  // Byte-level BPE: each GPT-2 alphabet character is one byte; a character
  // outside the alphabet (malformed vocab) is kept as its UTF-8.
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = DecodeUtf8(text, pos);
    const int byte = c.valid ? CodePointToByte(c.code_point) : -1;
    if (byte >= 0) {
      piece.push_back(static_cast<char>(byte));
    } else {
      piece.append(text, pos, c.n_bytes);
    }
    pos += c.n_bytes;
  }
  return piece;
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& file) {
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  BATON_ASSIGN_OR_RETURN(const std::string model, file.get_string("tokenizer.ggml.model"));
  if (model == "llama") {
    tokenizer->model_ = TokenizerModel::kLlama;
  } else if (model == "gpt2") {
    tokenizer->model_ = TokenizerModel::kGpt2;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.model '", model,
                                                   "' is not supported; supported: llama, gpt2"));
  }
  BATON_RETURN_IF_ERROR(tokenizer->load_vocab(file));
  BATON_RETURN_IF_ERROR(tokenizer->load_special_tokens(file));

  if (tokenizer->model_ == TokenizerModel::kLlama) {
    tokenizer->spm_ = std::make_unique<SpmTokenizer>(tokenizer->vocab_);
  } else {
    std::string pre_name;
    if (file.find("tokenizer.ggml.pre") != nullptr) {
      BATON_ASSIGN_OR_RETURN(pre_name, file.get_string("tokenizer.ggml.pre"));
    }
    BATON_ASSIGN_OR_RETURN(const PreTokenizer pre_tokenizer, PreTokenizer::FromName(pre_name));
    if (file.find("tokenizer.ggml.merges") == nullptr) {
      return absl::InvalidArgumentError(
          "tokenizer.ggml.model 'gpt2' needs tokenizer.ggml.merges, which is missing");
    }
    BATON_ASSIGN_OR_RETURN(const std::vector<std::string> merges,
                           file.get_string_array("tokenizer.ggml.merges"));
    BATON_ASSIGN_OR_RETURN(BpeTokenizer bpe,
                           BpeTokenizer::Create(tokenizer->vocab_, merges, pre_tokenizer));
    tokenizer->bpe_ = std::make_unique<BpeTokenizer>(std::move(bpe));
  }

  const int32_t n_vocab = tokenizer->vocab_.n_vocab();
  tokenizer->pieces_.reserve(n_vocab);
  for (int32_t id = 0; id < n_vocab; ++id) {
    tokenizer->pieces_.push_back(DecodedPiece(tokenizer->model_, tokenizer->vocab_.types[id],
                                              tokenizer->vocab_.texts[id]));
  }
  return tokenizer;
}

absl::Status Tokenizer::load_vocab(const GgufFile& file) {
  BATON_ASSIGN_OR_RETURN(vocab_.texts, file.get_string_array("tokenizer.ggml.tokens"));
  const size_t n_vocab = vocab_.texts.size();
  if (n_vocab == 0 || n_vocab > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.tokens has ", n_vocab,
                                                   " entries; expected 1 to ", INT32_MAX));
  }
  if (file.find("tokenizer.ggml.scores") != nullptr) {
    BATON_ASSIGN_OR_RETURN(vocab_.scores, file.get_float_array("tokenizer.ggml.scores"));
    if (vocab_.scores.size() != n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.scores has ",
                                                     vocab_.scores.size(), " entries; ",
                                                     "tokenizer.ggml.tokens has ", n_vocab));
    }
  } else {
    vocab_.scores.assign(n_vocab, 0.0f);
  }
  vocab_.types.assign(n_vocab, TokenType::kNormal);
  if (file.find("tokenizer.ggml.token_type") != nullptr) {
    BATON_ASSIGN_OR_RETURN(const std::vector<int64_t> types,
                           file.get_int_array("tokenizer.ggml.token_type"));
    if (types.size() != n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.token_type has ",
                                                     types.size(), " entries; ",
                                                     "tokenizer.ggml.tokens has ", n_vocab));
    }
    for (size_t id = 0; id < n_vocab; ++id) {
      if (types[id] < 0 || types[id] > static_cast<int64_t>(TokenType::kByte)) {
        return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.token_type[", id, "] is ",
                                                       types[id], "; valid types are 0 to 6"));
      }
      vocab_.types[id] = static_cast<TokenType>(types[id]);
    }
  }
  vocab_.text_to_id.reserve(n_vocab);
  for (size_t id = 0; id < n_vocab; ++id) {
    vocab_.text_to_id.insert_or_assign(vocab_.texts[id], static_cast<int32_t>(id));
  }
  return absl::OkStatus();
}

absl::Status Tokenizer::load_special_tokens(const GgufFile& file) {
  const int32_t n_vocab = vocab_.n_vocab();
  auto load_id = [&](std::string_view key, int32_t& id) -> absl::Status {
    BATON_ASSIGN_OR_RETURN(const std::optional<int64_t> value, OptionalInt(file, key));
    if (!value.has_value()) return absl::OkStatus();
    if (*value < 0 || *value >= n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat(std::string(key), " is ", *value,
                                                     "; the vocabulary has ", n_vocab, " tokens"));
    }
    id = static_cast<int32_t>(*value);
    return absl::OkStatus();
  };
  BATON_RETURN_IF_ERROR(load_id("tokenizer.ggml.bos_token_id", bos_id_));
  BATON_RETURN_IF_ERROR(load_id("tokenizer.ggml.eos_token_id", eos_id_));
  BATON_RETURN_IF_ERROR(load_id("tokenizer.ggml.eot_token_id", eot_id_));
  BATON_RETURN_IF_ERROR(load_id("tokenizer.ggml.eom_token_id", eom_id_));
  BATON_RETURN_IF_ERROR(load_id("tokenizer.ggml.unknown_token_id", unk_id_));
  BATON_RETURN_IF_ERROR(load_id("tokenizer.ggml.padding_token_id", pad_id_));
  auto is_special_type = [&](int32_t id) {
    return vocab_.types[id] == TokenType::kControl || vocab_.types[id] == TokenType::kUserDefined;
  };
  if (eot_id_ < 0) {
    // Chat models often mark the end of a turn with a token that GGUF
    // converters did not record as EOT.
    for (const std::string_view text : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>"}) {
      const int32_t id = vocab_.find(text);
      if (id >= 0 && is_special_type(id)) {
        eot_id_ = id;
        break;
      }
    }
  }
  if (eom_id_ < 0) {
    const int32_t id = vocab_.find("<|eom_id|>");
    if (id >= 0 && is_special_type(id)) eom_id_ = id;
  }
  build_eog_set();

  const bool is_llama = model_ == TokenizerModel::kLlama;
  BATON_ASSIGN_OR_RETURN(const std::optional<bool> add_bos,
                         OptionalBool(file, "tokenizer.ggml.add_bos_token"));
  BATON_ASSIGN_OR_RETURN(const std::optional<bool> add_eos,
                         OptionalBool(file, "tokenizer.ggml.add_eos_token"));
  BATON_ASSIGN_OR_RETURN(const std::optional<bool> add_space_prefix,
                         OptionalBool(file, "tokenizer.ggml.add_space_prefix"));
  // Defaults apply only when the token exists; an explicit true needs it.
  add_bos_ = add_bos.value_or(is_llama && bos_id_ >= 0);
  add_eos_ = add_eos.value_or(false);
  if (add_bos_ && bos_id_ < 0) {
    return absl::InvalidArgumentError(
        "tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is missing");
  }
  if (add_eos_ && eos_id_ < 0) {
    return absl::InvalidArgumentError(
        "tokenizer.ggml.add_eos_token is true but tokenizer.ggml.eos_token_id is missing");
  }
  add_space_prefix_ = is_llama && add_space_prefix.value_or(true);

  special_splitter_ = std::make_unique<SpecialTokenSplitter>(vocab_);
  return absl::OkStatus();
}

void Tokenizer::build_eog_set() {
  is_eog_.assign(vocab_.n_vocab(), false);
  for (const int32_t id : {eos_id_, eot_id_, eom_id_}) {
    if (id >= 0) is_eog_[id] = true;
  }
  // By text, whatever the token's type (llama.cpp's rule: converters do not
  // always mark these as control tokens).
  for (const std::string_view text : {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|im_end|>",
                                      "<|endoftext|>", "<|end|>", "<end_of_turn>", "<EOT>", "_<EOT>"}) {
    const int32_t id = vocab_.find(text);
    if (id >= 0) is_eog_[id] = true;
  }
}

std::vector<int32_t> Tokenizer::eog_ids() const {
  std::vector<int32_t> out;
  for (int32_t id = 0; id < static_cast<int32_t>(is_eog_.size()); ++id) {
    if (is_eog_[id]) out.push_back(id);
  }
  return out;
}

void Tokenizer::encode_text(std::string_view text, bool after_special,
                            std::vector<int32_t>& out) const {
  if (model_ == TokenizerModel::kGpt2) {
    bpe_->encode(text, out);
    return;
  }
  // SentencePiece escaping: a space before text that starts the input or
  // follows a special token, and every ' ' as "▁".
  std::string escaped;
  escaped.reserve(text.size() + text.size() / 4 + kSpmSpace.size());
  if (add_space_prefix_ && after_special) escaped.append(kSpmSpace);
  for (const char c : text) {
    if (c == ' ') {
      escaped.append(kSpmSpace);
    } else {
      escaped.push_back(c);
    }
  }
  spm_->encode(escaped, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<int32_t> out;
  if (options.add_bos.value_or(add_bos_)) {
    BATON_CHECK(bos_id_ >= 0, "add_bos requested but the vocabulary has no BOS token");
    out.push_back(bos_id_);
  }
  std::vector<SpecialTokenSplitter::Fragment> fragments;
  special_splitter_->split(text, options.parse_special, fragments);
  bool after_special = true;  // the start of the input counts as a boundary
  for (const SpecialTokenSplitter::Fragment& fragment : fragments) {
    if (fragment.token >= 0) {
      out.push_back(fragment.token);
      after_special = true;
    } else {
      encode_text(fragment.text, after_special, out);
      after_special = false;
    }
  }
  if (options.add_eos.value_or(add_eos_)) {
    BATON_CHECK(eos_id_ >= 0, "add_eos requested but the vocabulary has no EOS token");
    out.push_back(eos_id_);
  }
  return out;
}

void Tokenizer::append_piece(int32_t token, const DecodeOptions& options, bool& at_start,
                             std::string& out) const {
  BATON_CHECK(vocab_.is_valid(token), "token id outside the vocabulary");
  const TokenType type = vocab_.types[token];
  const bool shown_as_text =
      options.render_special && (type == TokenType::kControl || type == TokenType::kUnknown);
  const std::string& piece = shown_as_text ? vocab_.texts[token] : pieces_[token];
  size_t skip = 0;  // bytes
  if (at_start && type != TokenType::kControl) {
    if (add_space_prefix_ && !piece.empty() && piece[0] == ' ') skip = 1;
    at_start = false;
  }
  out.append(piece, skip);
}

std::string Tokenizer::decode(std::span<const int32_t> tokens, const DecodeOptions& options) const {
  std::string out;
  bool at_start = true;
  for (const int32_t token : tokens) append_piece(token, options, at_start, out);
  return out;
}

std::string Tokenizer::token_piece(int32_t token) const {
  BATON_CHECK(vocab_.is_valid(token), "token id outside the vocabulary");
  return pieces_[token];
}

const std::string& Tokenizer::token_text(int32_t token) const {
  BATON_CHECK(vocab_.is_valid(token), "token id outside the vocabulary");
  return vocab_.texts[token];
}

TokenType Tokenizer::token_type(int32_t token) const {
  BATON_CHECK(vocab_.is_valid(token), "token id outside the vocabulary");
  return vocab_.types[token];
}

std::string_view Tokenizer::model_name() const {
  return model_ == TokenizerModel::kLlama ? "llama" : "gpt2";
}

std::string_view Tokenizer::pre_tokenizer_name() const {
  return bpe_ ? bpe_->pre_tokenizer().name() : std::string_view();
}

}  // namespace baton
