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
  for (int64_t i = 0; i < lack; ++i, ++held) {
    table_[static_cast<size_t>(conversation * perConversation_ + held)] = free_.back();
    free_.pop_back();
  }
  changed_ |= lack > 0;
  return true;
}

void KvPages::release(int64_t conversation, int64_t positions) {
  int64_t &held = held_.at(static_cast<size_t>(conversation));
  const int64_t keep = std::min(pagesFor(std::max<int64_t>(0, positions)), held);
  for (; held > keep; --held) {
    int32_t &entry = table_[static_cast<size_t>(conversation * perConversation_ + held - 1)];
    free_.push_back(entry);
    entry = static_cast<int32_t>(pages_);
    changed_ = true;
  }
}

} // namespace kiln
