// The pages of paged KV caches (kilnc --kv-page-tokens): the global layers'
// K and V are one pool of pages for every conversation, and a page table
// (the entry points' Input 2, i32 [conversations * pages per conversation])
// says which page holds each conversation's positions, in order. Every
// global layer uses the same page numbers. A page is taken when a call
// first writes one of its positions and given back when the conversation
// no longer holds them (reset, forget, rollback).
//
// A page may be shared: saved conversations (Engine::save) hold references
// to their pages beside the conversations that continue from them, and a
// page goes back to the pool when its last reference goes. Whoever writes
// into a shared page copies it first (Engine's copy on write: a conversation
// writes its positions from its past on, which others may read).
//
// One page past the pool is scratch: the table's entries of pages a
// conversation does not hold point there, so that a batched call's idle
// rows (computed and thrown away, Engine::decodeBatch) write somewhere
// harmless. Nothing reads it for a visible position.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln {

class KvPages {
public:
  KvPages() = default;
  // A pool of `pages` pages of `pageTokens` positions for `conversations`
  // conversations of up to `contextLength` positions each. Throws
  // RuntimeError for sizes below 1.
  KvPages(int64_t pageTokens, int64_t pages, int64_t conversations, int64_t contextLength);

  bool paged() const { return pageTokens_ > 0; }
  int64_t pageTokens() const { return pageTokens_; }
  // Table entries per conversation: pages of a whole context.
  int64_t pagesPerConversation() const { return perConversation_; }
  // The pool's pages, the scratch page not counted, and those not held.
  int64_t pages() const { return pages_; }
  int64_t freePages() const { return static_cast<int64_t>(free_.size()); }
  // Pages a conversation holds.
  int64_t held(int64_t conversation) const;
  // Pages `conversation` lacks to hold positions 0 .. positions - 1.
  int64_t lacking(int64_t conversation, int64_t positions) const;

  // Gives `conversation` the pages for positions 0 .. positions - 1; false,
  // and nothing taken, where the pool has too few.
  bool reserve(int64_t conversation, int64_t positions);
  // Gives back `conversation`'s pages past those of positions 0 ..
  // positions - 1 (a page others still hold stays theirs).
  void release(int64_t conversation, int64_t positions);

  // The page holding `conversation`'s positions index * pageTokens on; its
  // references (conversations' tables and holders of share()'s pages).
  int32_t page(int64_t conversation, int64_t index) const;
  int64_t references(int32_t page) const;
  // The distinct pages that the conversations' tables and `others` (pages
  // from share()) hold: what the pool should count as taken. A page taken
  // and held by none of them is lost (a holder dropped without drop()).
  int64_t distinct(const std::vector<const std::vector<int32_t> *> &others) const;
  // `conversation`'s first `count` pages, each with one more reference,
  // which the caller gives back with drop().
  std::vector<int32_t> share(int64_t conversation, int64_t count);
  void drop(const std::vector<int32_t> &pages);
  // Makes `held` (pages from share()) the first pages of `conversation`,
  // which holds none: each takes one more reference.
  void adopt(int64_t conversation, const std::vector<int32_t> &held);
  // Puts a free page in place of `conversation`'s page `index` (one it
  // holds), whose reference it gives back; returns the new page, or -1 and
  // nothing changed where none is free.
  int32_t replace(int64_t conversation, int64_t index);

  // [conversations * pagesPerConversation()], the scratch page where none
  // is held; `changed` until the caller has copied it (markCopied).
  const std::vector<int32_t> &table() const { return table_; }
  bool changed() const { return changed_; }
  void markCopied() { changed_ = false; }

private:
  int64_t pagesFor(int64_t positions) const;
  int32_t take();
  void unreference(int32_t page);

  int64_t pageTokens_ = 0, pages_ = 0, conversations_ = 0, perConversation_ = 0;
  std::vector<int32_t> table_;
  std::vector<int64_t> held_;
  std::vector<int32_t> references_; // per page of the pool
  // Free pages, the next one taken last: the lowest first, so that one
  // conversation alone runs over pages 0, 1, 2, ... and several interleave.
  std::vector<int32_t> free_;
  bool changed_ = true;
};

} // namespace kiln
