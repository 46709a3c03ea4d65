#include "runtime/engine/KvPages.h"

#include "runtime/cpu/RuntimeError.h"

#include <algorithm>
#include <limits>
#include <string>

namespace kiln {

KvPages::KvPages(int64_t pageTokens, int64_t pages, int64_t conversations, int64_t contextLength)
    : pageTokens_(pageTokens), pages_(pages), conversations_(conversations) {
  if (pageTokens < 1 || pages < 1 || conversations < 1 || contextLength < 1)
    throw RuntimeError("a KV page pool of " + std::to_string(pages) + " pages of " +
                       std::to_string(pageTokens) + " positions for " +
                       std::to_string(conversations) + " conversations of " +
                       std::to_string(contextLength) + " positions: each must be at least 1");
  if (pages >= std::numeric_limits<int32_t>::max())
    throw RuntimeError("a KV page pool of " + std::to_string(pages) +
                       " pages: page numbers are 32-bit");
  perConversation_ = pagesFor(contextLength);
  table_.assign(static_cast<size_t>(conversations * perConversation_), static_cast<int32_t>(pages));
  held_.assign(static_cast<size_t>(conversations), 0);
  references_.assign(static_cast<size_t>(pages), 0);
  for (int64_t page = pages - 1; page >= 0; --page)
    free_.push_back(static_cast<int32_t>(page));
}

int64_t KvPages::pagesFor(int64_t positions) const {
  return (positions + pageTokens_ - 1) / pageTokens_;
}

int64_t KvPages::held(int64_t conversation) const {
  return held_.at(static_cast<size_t>(conversation));
}

int64_t KvPages::lacking(int64_t conversation, int64_t positions) const {
  const int64_t want = std::min(pagesFor(positions), perConversation_);
  return std::max<int64_t>(0, want - held(conversation));
}

bool KvPages::reserve(int64_t conversation, int64_t positions) {
  const int64_t lack = lacking(conversation, positions);
  if (lack > freePages())
    return false;
  int64_t &held = held_.at(static_cast<size_t>(conversation));
  for (int64_t i = 0; i < lack; ++i, ++held)
    table_[static_cast<size_t>(conversation * perConversation_ + held)] = take();
  changed_ |= lack > 0;
  return true;
}

void KvPages::release(int64_t conversation, int64_t positions) {
  int64_t &held = held_.at(static_cast<size_t>(conversation));
  const int64_t keep = std::min(pagesFor(std::max<int64_t>(0, positions)), held);
  for (; held > keep; --held) {
    int32_t &entry = table_[static_cast<size_t>(conversation * perConversation_ + held - 1)];
    unreference(entry);
    entry = static_cast<int32_t>(pages_);
    changed_ = true;
  }
}

int32_t KvPages::take() {
  const int32_t page = free_.back();
  free_.pop_back();
  references_[static_cast<size_t>(page)] = 1;
  return page;
}

void KvPages::unreference(int32_t page) {
  if (--references_.at(static_cast<size_t>(page)) == 0)
    free_.push_back(page);
}

int32_t KvPages::page(int64_t conversation, int64_t index) const {
  if (index < 0 || index >= held(conversation))
    throw RuntimeError("conversation " + std::to_string(conversation) + " holds " +
                       std::to_string(held(conversation)) + " KV pages, not page " +
                       std::to_string(index));
  return table_[static_cast<size_t>(conversation * perConversation_ + index)];
}

int64_t KvPages::references(int32_t page) const {
  return references_.at(static_cast<size_t>(page));
}

int64_t KvPages::distinct(const std::vector<const std::vector<int32_t> *> &others) const {
  std::vector<bool> seen(static_cast<size_t>(pages_), false);
  int64_t count = 0;
  const auto see = [&](int32_t page) {
    if (!seen[static_cast<size_t>(page)]) {
      seen[static_cast<size_t>(page)] = true;
      ++count;
    }
  };
  for (int64_t c = 0; c < conversations_; ++c)
    for (int64_t index = 0; index < held(c); ++index)
      see(table_[static_cast<size_t>(c * perConversation_ + index)]);
  for (const std::vector<int32_t> *pages : others)
    for (int32_t page : *pages)
      see(page);
  return count;
}

std::vector<int32_t> KvPages::share(int64_t conversation, int64_t count) {
  std::vector<int32_t> shared;
  for (int64_t index = 0; index < count; ++index)
    shared.push_back(page(conversation, index));
  for (int32_t page : shared)
    ++references_[static_cast<size_t>(page)];
  return shared;
}

void KvPages::drop(const std::vector<int32_t> &pages) {
  for (int32_t page : pages)
    unreference(page);
}

void KvPages::adopt(int64_t conversation, const std::vector<int32_t> &held) {
  int64_t &count = held_.at(static_cast<size_t>(conversation));
  if (count != 0 || static_cast<int64_t>(held.size()) > perConversation_)
    throw RuntimeError("conversation " + std::to_string(conversation) + " holding " +
                       std::to_string(count) + " KV pages cannot take " +
                       std::to_string(held.size()) + " more");
  for (int32_t page : held) {
    ++references_.at(static_cast<size_t>(page));
    table_[static_cast<size_t>(conversation * perConversation_ + count++)] = page;
  }
  changed_ |= !held.empty();
}

int32_t KvPages::replace(int64_t conversation, int64_t index) {
  const int32_t old = page(conversation, index);
  if (free_.empty())
    return -1;
  const int32_t fresh = take();
  table_[static_cast<size_t>(conversation * perConversation_ + index)] = fresh;
  unreference(old);
  changed_ = true;
  return fresh;
}

} // namespace kiln
