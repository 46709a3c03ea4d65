// kiln-serve's continuous batching over an Engine's conversations (the
// artifact's decode_batch slots, each with its own KV caches): requests wait
// in a bounded queue, take a free slot as soon as one is free, prefill their
// prompt in chunks under a per-step token budget interleaved with the decode
// steps of the others, and leave at any step (max_tokens, EOS, a stop text,
// the context's end, a client gone). One thread owns the engine; HTTP
// handlers only queue requests and read their TokenChannel.
//
// A decode step runs every decoding request: one decode_batch call over the
// slots up to the highest decoding one (the entry point steps a prefix of
// the slots), those not decoding now idle rows that leave them as they were
// (Engine::decodeBatch with step flags); one decoding request alone takes a
// decode call. --decode=each always takes a decode call each,
// whose kernels are kiln-run's, so that its tokens are exactly kiln-run's.
// With speculation (draftTokens > 0; the artifact's verify entries) each
// request drafts by lookup in its own tokens and the step verifies the
// drafts: one verify_batch call for slots 0..n-1, else a verify call each
// (a decode call where a request has no draft); a request whose drafts are
// rejected several steps in a row decodes plainly for a while.
//
// Prefix reuse: a slot a request leaves keeps what its caches hold (the
// prompt and the reply so far). With paged KV caches the engine also saves
// histories beside the slots (Engine::save: their pages, shared, and a copy
// of their sliding rings): a slot's when another request takes it, and the
// prefix a new prompt shares with a cached history when the history's
// rings no longer hold that prefix's window, or with a running request's
// prompt that has not reached it yet (that prefill stops there to save it: a
// shared system prompt is then found by every later prompt, and by requests
// admitted together with it whose prefill had not begun). A radix tree over the histories' token
// pages (PrefixTree.h) finds the cached history, slot or saved, that shares
// the longest usable prefix with a new prompt: the request takes that slot
// and rolls it back to the prefix where it holds more, or restores the
// saved history into a free slot (Engine::restore, within what the sliding
// rings allow), and prefills only the rest; otherwise it takes a free slot
// holding nothing, else the least recently used one, whose history is saved
// first.
#pragma once

#include "runtime/engine/Engine.h"
#include "runtime/serve/Metrics.h"
#include "runtime/serve/PrefixTree.h"
#include "runtime/serve/Request.h"
#include "runtime/text/Tokenizer.h"

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace kiln::serve {

struct SchedulerOptions {
  // Requests queued beyond the free slots: more are refused (429).
  int64_t maxWaiting = 64;
  int64_t prefillTokensPerStep = 512; // prompt tokens a step prefills, at most
  bool batchedDecode = true;
  // Speculative decoding by lookup: drafts a step checks at most (0: off),
  // and the n-gram lengths looked up.
  int64_t draftTokens = 0;
  int ngramMin = 2, ngramMax = 4;
  // Prefix reuse: a finished request's slot keeps its tokens' K/V, and a new
  // request whose prompt begins with them takes that slot and prefills only
  // the rest.
  bool prefixReuse = true;
  // Histories saved beside the slots, at most (0: none; paged KV caches
  // only); the least recently used goes first.
  int64_t savedHistories = 0;
};

class Scheduler {
public:
  Scheduler(Engine &engine, std::shared_ptr<const text::Tokenizer> tokenizer, Metrics &metrics,
            SchedulerOptions options);
  ~Scheduler();

  // Queues `request`; false when the queue is full.
  bool submit(std::shared_ptr<Request> request);
  MetricsSnapshot snapshot();
  // Empty while the engine works; after an engine error, that error.
  std::string problem();

private:
  void loop();
  void step(std::vector<std::shared_ptr<Request>> &running);
  // Samples the next token of `request` from `logits` and hands it out.
  void advance(Request &request, const float *logits);
  // Hands out `token` (its logprobs from `logits` where asked).
  void deliver(Request &request, int32_t token, const float *logits);
  // The speculative decode step of `decoding` (sorted by slot).
  void speculate(std::vector<Request *> &decoding, bool batched);
  // This step's drafts of `request`: none while it is paused or near its end.
  std::vector<int32_t> draftsOf(Request &request);
  void end(Request &request, Finish finish);

  Engine &engine_;
  std::shared_ptr<const text::Tokenizer> tokenizer_;
  Metrics &metrics_;
  SchedulerOptions options_;
  int64_t vocab_ = 0;
  bool verifyBatch_ = false; // the artifact has a verify_batch entry

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Request>> waiting_;
  std::set<int64_t> freeSlots_;
  // Free slots whose caches still hold a finished request's tokens.
  struct CachedSlot {
    std::vector<int32_t> tokens;
    uint64_t lastUse = 0;
  };
  std::map<int64_t, CachedSlot> cachedSlots_;
  // Saved histories by their Engine::save number; `shared`: a prefix saved
  // for the prompts that share it, kept when a request continues it.
  struct SavedHistory {
    uint64_t lastUse = 0;
    bool shared = false;
  };
  std::map<int64_t, SavedHistory> saved_;
  // Every cached history's tokens: slot s as s, saved number n as -n.
  PrefixTree tree_;
  uint64_t useClock_ = 0;
  // mutex_ held for these. A cached slot's history in and out of the tree.
  void cacheSlot(int64_t slot, std::vector<int32_t> tokens);
  void uncacheSlot(int64_t slot);
  // Saves `conversation`'s first `tokens.size()` positions (its whole
  // past), making room among the saved ones (never `keep`); false where
  // nothing is saved (unpaged, or saving off).
  bool saveHistory(int64_t conversation, std::vector<int32_t> tokens, bool shared,
                   int64_t keep = 0);
  void dropSaved(int64_t number);
  // A free slot holding nothing for a new request: the lowest such, else the
  // least recently used cached one, its history saved (keeping `keep`), then
  // forgotten.
  int64_t emptySlot(int64_t keep);
  // Gives `request` a free slot (prefix reuse, else cold), and marks where
  // it or a running request that shares its prefix saves it; mutex_ held.
  void admit(Request &request, const std::vector<std::shared_ptr<Request>> &running);
  // Before a request's first chunk: a saved prefix longer than what it
  // found at admission (a running request saved it since) restored into its
  // slot. mutex_ held.
  void reconsider(Request &request);
  // Restores saved history `number` into the empty `slot` up to `keep`,
  // dropping it where it was a slot's history wholly continued.
  void restoreSaved(int64_t slot, int64_t number, int64_t keep);
  // A save point of `request` at `shared` tokens, down to a page boundary
  // (so that saving it shares whole pages and nobody copies one).
  void addSavePoint(Request &request, int64_t shared);
  // Paged KV: the pages `request` may come to hold (0 unpaged), which the
  // pool promises beside the running requests' (reservedPages_); and, once
  // admitted, pages the running requests may still take made free by
  // forgetting cached slots, least recently used first. mutex_ held.
  int64_t pagesOf(const Request &request) const;
  void makeRoom(const std::vector<std::shared_ptr<Request>> &running);
  int64_t reservedPages_ = 0;
  // After an engine call threw: fails the running and waiting requests and
  // keeps `what` as the server's problem; mutex_ held.
  void engineFailed(const std::string &what, const std::vector<std::shared_ptr<Request>> &running);
  int64_t runningCount_ = 0;
  int64_t pagesFree_ = 0; // the engine's free KV pages after the last step
  // The pages the slots and saved_ hold (Engine::distinctKvPages), which
  // /metrics sets beside those used: counted after each step while nothing
  // runs, every 32nd step while requests do.
  int64_t pagesHeld_ = 0;
  int64_t stepsSinceCount_ = 0;
  void countPages(); // mutex_ held
  std::string problem_;
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace kiln::serve
