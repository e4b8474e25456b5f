#include "common/tokenizer/special_token_splitter.h"

#include <algorithm>
#include <map>
#include <utility>

#include "common/util/check.h"

namespace baton {
namespace {

bool IsSpecialType(TokenType type) {
  return type == TokenType::kControl || type == TokenType::kUnknown ||
         type == TokenType::kUserDefined;
}

// Build-time trie node: children by byte.
struct BuildNode {
  std::map<uint8_t, int32_t> children;
  uint8_t byte = 0;
};

// One place a token's text occurs in the input, in bytes.
struct Occurrence {
  size_t begin;
  size_t end;
  int32_t priority;
  int32_t token;
};

}  // namespace

SpecialTokenSplitter::SpecialTokenSplitter(const Vocab& vocab) : is_first_byte_(256, false) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab.n_vocab(); ++id) {
    if (IsSpecialType(vocab.types[id]) && !vocab.texts[id].empty()) ids.push_back(id);
  }
  // Longest text first; stable, so equal lengths keep id order.
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return vocab.texts[a].size() > vocab.texts[b].size();
  });

  // Build a pointer-style trie, then lay it out breadth first so that each
  // node's children are contiguous and sorted.
  std::vector<BuildNode> build(1);
  std::vector<std::pair<Ending, Ending>> endings(1);  // per build node: any, user-defined
  for (size_t priority = 0; priority < ids.size(); ++priority) {
    const int32_t id = ids[priority];
    int32_t node = 0;
    for (const char c : vocab.texts[id]) {
      const auto byte = static_cast<uint8_t>(c);
      const auto it = build[node].children.find(byte);
      if (it != build[node].children.end()) {
        node = it->second;
        continue;
      }
      const auto next = static_cast<int32_t>(build.size());
      build[node].children.emplace(byte, next);
      build.push_back({{}, byte});
      endings.emplace_back();
      node = next;
    }
    const Ending ending{id, static_cast<int32_t>(priority)};
    // Duplicate texts: the first in priority order wins, as it would take
    // every occurrence before the later one is tried.
    if (endings[node].first.token < 0) endings[node].first = ending;
    if (vocab.types[id] == TokenType::kUserDefined) {
      if (endings[node].second.token < 0) endings[node].second = ending;
      ++n_user_defined_;
    }
    ++n_tokens_;
    is_first_byte_[static_cast<uint8_t>(vocab.texts[id][0])] = true;
  }

  std::vector<int32_t> order = {0};  // build index of each final node
  nodes_.reserve(build.size());      // no reallocation: `node` below stays valid
  nodes_.push_back({});
  for (size_t i = 0; i < order.size(); ++i) {
    const BuildNode& source = build[order[i]];
    Node& node = nodes_[i];
    node.byte = source.byte;
    node.any = endings[order[i]].first;
    node.user_defined = endings[order[i]].second;
    node.first_child = static_cast<int32_t>(order.size());
    node.n_children = static_cast<int32_t>(source.children.size());
    for (const auto& [byte, child_index] : source.children) {
      order.push_back(child_index);
      nodes_.push_back({});
    }
  }
  BATON_CHECK(nodes_.size() == build.size(), "trie layout lost nodes");
}

int32_t SpecialTokenSplitter::child(int32_t node, uint8_t byte) const {
  const Node& parent = nodes_[node];
  for (int32_t i = parent.first_child; i < parent.first_child + parent.n_children; ++i) {
    if (nodes_[i].byte == byte) return i;
    if (nodes_[i].byte > byte) break;
  }
  return -1;
}

void SpecialTokenSplitter::split(std::string_view text, bool parse_special,
                                 std::vector<Fragment>& out) const {
  out.clear();
  std::vector<Occurrence> occurrences;
  if (has_candidates(parse_special)) {
    for (size_t begin = 0; begin < text.size(); ++begin) {
      if (!is_first_byte_[static_cast<uint8_t>(text[begin])]) continue;
      int32_t node = 0;
      for (size_t end = begin; end < text.size();) {
        node = child(node, static_cast<uint8_t>(text[end++]));
        if (node < 0) break;
        const Ending& ending = parse_special ? nodes_[node].any : nodes_[node].user_defined;
        if (ending.token >= 0) occurrences.push_back({begin, end, ending.priority, ending.token});
      }
    }
  }
  // Replay llama.cpp's passes: in priority order, an occurrence is taken when
  // it overlaps nothing taken before (by longer tokens, or by this token
  // further left).
  std::sort(occurrences.begin(), occurrences.end(), [](const Occurrence& a, const Occurrence& b) {
    return a.priority != b.priority ? a.priority < b.priority : a.begin < b.begin;
  });
  std::map<size_t, std::pair<size_t, int32_t>> taken;  // begin byte -> (end byte, token)
  for (const Occurrence& occurrence : occurrences) {
    // Taken spans are disjoint, so only the last one starting before our
    // end can reach into us.
    auto it = taken.lower_bound(occurrence.end);
    if (it != taken.begin() && std::prev(it)->second.first > occurrence.begin) continue;
    taken.emplace_hint(it, occurrence.begin, std::make_pair(occurrence.end, occurrence.token));
  }
  size_t cursor = 0;
  for (const auto& [begin, span] : taken) {
    if (begin > cursor) out.push_back({text.substr(cursor, begin - cursor), -1});
    out.push_back({std::string_view(), span.second});
    cursor = span.first;
  }
  if (cursor < text.size()) out.push_back({text.substr(cursor), -1});
}

}  // namespace baton
