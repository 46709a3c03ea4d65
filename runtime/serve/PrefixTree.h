// A radix tree over the token pages of the histories kiln-serve has cached
// (a free slot's, a saved conversation's): each edge is one page of tokens
// (the KV cache's page, so that a node is a page boundary), a history ends
// in the node of its last whole page with the tokens past it. Asked for a
// prompt, it walks the prompt's pages from the root and names every history
// sharing a prefix with it and how long, in time proportional to the prompt
// and those histories, not to everything cached.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace kiln::serve {

class PrefixTree {
public:
  explicit PrefixTree(int64_t pageTokens);

  // Adds history `id` (any number the caller chooses, once) with `tokens`.
  void insert(int64_t id, const std::vector<int32_t> &tokens);
  // Removes it; unknown ids are ignored. Nodes no history passes through go.
  void erase(int64_t id);
  bool contains(int64_t id) const { return histories_.count(id) != 0; }
  const std::vector<int32_t> &tokens(int64_t id) const { return histories_.at(id); }
  size_t size() const { return histories_.size(); }
  int64_t pageTokens() const { return pageTokens_; }

  struct Match {
    int64_t id = 0;
    int64_t shared = 0; // tokens its history and the prompt begin with
  };
  // Every history sharing at least one token with `prompt`, the longest
  // shared first (ties by id).
  std::vector<Match> matches(const std::vector<int32_t> &prompt) const;

  // Nodes in the tree, the root included (for tests: erased histories'
  // nodes go).
  int64_t nodes() const;

private:
  struct Node {
    std::map<std::vector<int32_t>, std::unique_ptr<Node>> children; // by their page
    std::map<int64_t, std::vector<int32_t>> ends; // histories ending here: their tokens past it
    int64_t below = 0;                            // histories here and under
  };
  // Every history ending in `node` or under it, sharing `shared` tokens.
  static void collect(const Node &node, int64_t shared, std::vector<Match> &out);

  int64_t pageTokens_;
  Node root_;
  std::map<int64_t, std::vector<int32_t>> histories_;
};

} // namespace kiln::serve
