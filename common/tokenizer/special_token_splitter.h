// SpecialTokenSplitter: finds the text of added tokens in a prompt and cuts
// the prompt around them, before any model algorithm sees it.
//
// Which tokens take part (llama.cpp's tokenizer_st_partition, Hugging Face's
// added-token pass):
//   user-defined (type 4)     always: they are ordinary added words
//   control (3), unknown (2)  only with parse_special, so user text cannot
//                             inject "<|eot_id|>" or "</s>"
//
// Overlaps are resolved as llama.cpp does: tokens are taken longest text
// first (equal lengths: lower id first), and each token takes its leftmost
// non-overlapping occurrences in the text that longer tokens left. All
// occurrences are found in one pass over a byte trie, so the cost does not
// grow with the number of added tokens (Gemma-style vocabularies have
// thousands).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/tokenizer/vocab.h"

namespace baton {

class SpecialTokenSplitter {
 public:
  // A piece of the input: raw text, or one added token found in it.
  struct Fragment {
    std::string_view text;  // view into the input; empty for a token fragment
    int32_t token;          // -1 for raw text
  };

  // Indexes every control, unknown and user-defined token with non-empty text.
  explicit SpecialTokenSplitter(const Vocab& vocab);

  // Cuts `text` into fragments (appended to `out`, cleared first) whose
  // concatenation, with each token fragment replaced by its text, is `text`.
  // Raw fragments are non-empty.
  void split(std::string_view text, bool parse_special, std::vector<Fragment>& out) const;

  // True when some token could be found with this parse_special setting.
  bool has_candidates(bool parse_special) const {
    return parse_special ? n_tokens_ > 0 : n_user_defined_ > 0;
  }

 private:
  // A token a trie node ends: the one taken first among those with this text.
  struct Ending {
    int32_t token = -1;     // -1: none
    int32_t priority = 0;   // 0 is taken first (longest text, then lowest id)
  };
  struct Node {
    int32_t first_child = 0;  // children are nodes_[first_child, +n_children), sorted by byte
    int32_t n_children = 0;
    uint8_t byte = 0;         // edge label from the parent
    Ending any;               // any special type: used with parse_special
    Ending user_defined;      // user-defined only: used without it
  };

  // Child of `node` on `byte`, or -1.
  int32_t child(int32_t node, uint8_t byte) const;

  std::vector<Node> nodes_;           // nodes_[0] is the root
  std::vector<bool> is_first_byte_;   // [256] some token text starts with this byte
  int32_t n_tokens_ = 0;
  int32_t n_user_defined_ = 0;
};

}  // namespace baton
