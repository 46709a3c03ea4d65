#include "runtime/serve/PrefixTree.h"

#include "runtime/cpu/RuntimeError.h"

#include <algorithm>
#include <string>

namespace kiln::serve {
namespace {

using Page = std::vector<int32_t>;

// Tokens `a` and `b` begin with, at most `limit`.
int64_t common(const int32_t *a, const int32_t *b, int64_t limit) {
  int64_t n = 0;
  while (n < limit && a[n] == b[n])
    ++n;
  return n;
}

} // namespace

PrefixTree::PrefixTree(int64_t pageTokens) : pageTokens_(pageTokens) {
  if (pageTokens < 1)
    throw RuntimeError("a prefix tree of pages of " + std::to_string(pageTokens) +
                       " tokens: expected at least 1");
}

void PrefixTree::insert(int64_t id, const std::vector<int32_t> &tokens) {
  if (!histories_.emplace(id, tokens).second)
    throw RuntimeError("prefix tree: history " + std::to_string(id) + " is there already");
  Node *node = &root_;
  ++node->below;
  const int64_t pages = static_cast<int64_t>(tokens.size()) / pageTokens_;
  for (int64_t p = 0; p < pages; ++p) {
    Page page(tokens.begin() + p * pageTokens_, tokens.begin() + (p + 1) * pageTokens_);
    std::unique_ptr<Node> &child = node->children[std::move(page)];
    if (!child)
      child = std::make_unique<Node>();
    node = child.get();
    ++node->below;
  }
  node->ends.emplace(id, Page(tokens.begin() + pages * pageTokens_, tokens.end()));
}

void PrefixTree::erase(int64_t id) {
  const auto found = histories_.find(id);
  if (found == histories_.end())
    return;
  const std::vector<int32_t> &tokens = found->second;
  const int64_t pages = static_cast<int64_t>(tokens.size()) / pageTokens_;
  // Down its path, dropping the first node only it passed through (and so
  // everything under it).
  Node *node = &root_;
  --node->below;
  for (int64_t p = 0; p < pages; ++p) {
    const Page page(tokens.begin() + p * pageTokens_, tokens.begin() + (p + 1) * pageTokens_);
    const auto child = node->children.find(page);
    if (--child->second->below == 0) {
      node->children.erase(child);
      node = nullptr;
      break;
    }
    node = child->second.get();
  }
  if (node)
    node->ends.erase(id);
  histories_.erase(found);
}

void PrefixTree::collect(const Node &node, int64_t shared, std::vector<Match> &out) {
  for (const auto &[id, tail] : node.ends)
    out.push_back(Match{id, shared});
  for (const auto &[page, child] : node.children)
    collect(*child, shared, out);
}

std::vector<PrefixTree::Match> PrefixTree::matches(const std::vector<int32_t> &prompt) const {
  std::vector<Match> out;
  const Node *node = &root_;
  int64_t depth = 0; // tokens matched so far: whole pages
  const int64_t length = static_cast<int64_t>(prompt.size());
  while (node) {
    const int32_t *rest = prompt.data() + depth;
    const int64_t left = length - depth;
    const Node *next = nullptr;
    // Histories ending here share what their tail and the prompt's rest do.
    for (const auto &[id, tail] : node->ends) {
      const int64_t shared =
          depth + common(tail.data(), rest, std::min<int64_t>(left, tail.size()));
      if (shared > 0)
        out.push_back(Match{id, shared});
    }
    for (const auto &[page, child] : node->children) {
      if (left >= pageTokens_ && std::equal(page.begin(), page.end(), rest)) {
        next = child.get(); // the prompt's own page: walked next
        continue;
      }
      // A page that parts from the prompt: all under it share as much.
      const int64_t shared = depth + common(page.data(), rest, std::min(left, pageTokens_));
      if (shared > 0)
        collect(*child, shared, out);
    }
    node = next;
    depth += pageTokens_;
  }
  std::sort(out.begin(), out.end(), [](const Match &a, const Match &b) {
    return a.shared != b.shared ? a.shared > b.shared : a.id < b.id;
  });
  return out;
}

int64_t PrefixTree::nodes() const {
  int64_t count = 0;
  std::vector<const Node *> stack{&root_};
  while (!stack.empty()) {
    const Node *node = stack.back();
    stack.pop_back();
    ++count;
    for (const auto &[page, child] : node->children)
      stack.push_back(child.get());
  }
  return count;
}

} // namespace kiln::serve
