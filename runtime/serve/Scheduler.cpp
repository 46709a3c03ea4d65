#include "runtime/serve/Scheduler.h"

#include "runtime/speculate/VerifyStep.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kiln::serve {
namespace {

double seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// The log-probabilities of `chosen` and of the `top` most likely tokens.
void logprobs(const float *logits, int64_t vocab, int32_t chosen, int top, TokenEvent &event) {
  const float largest = *std::max_element(logits, logits + vocab);
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v)
    sum += std::exp(static_cast<double>(logits[v]) - largest);
  const double logSum = std::log(sum) + largest;
  event.logprob = logits[chosen] - logSum;
  if (top <= 0)
    return;
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const size_t keep = std::min<size_t>(static_cast<size_t>(top), order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(),
                    [&](int32_t a, int32_t b) {
                      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                    });
  for (size_t i = 0; i < keep; ++i)
    event.top.emplace_back(order[i], logits[order[i]] - logSum);
}

// Where `text` may be cut so that what follows could still begin one of
// `stops`: the start of the longest such suffix, moved back to a character
// boundary.
size_t safeCut(const std::string &text, const std::vector<std::string> &stops) {
  size_t cut = text.size();
  for (const std::string &stop : stops)
    for (size_t length = std::min(stop.size() - 1, text.size()); length > 0; --length)
      if (text.compare(text.size() - length, length, stop, 0, length) == 0) {
        cut = std::min(cut, text.size() - length);
        break;
      }
  while (cut > 0 && cut < text.size() && (static_cast<uint8_t>(text[cut]) & 0xc0) == 0x80)
    --cut;
  return cut;
}

} // namespace

Scheduler::Scheduler(Engine &engine, std::shared_ptr<const text::Tokenizer> tokenizer,
                     Metrics &metrics, SchedulerOptions options)
    : engine_(engine), tokenizer_(std::move(tokenizer)), metrics_(metrics), options_(options),
      vocab_(engine.vocabSize()), tree_(engine.kvPageTokens() > 0 ? engine.kvPageTokens() : 16) {
  if (!engine_.canSave())
    options_.savedHistories = 0;
  if (!options_.prefixReuse)
    options_.savedHistories = 0;
  for (int64_t c = 0; c < engine_.conversations(); ++c)
    freeSlots_.insert(c);
  verifyBatch_ = engine_.artifact().findEntryPoint("verify_batch") != nullptr;
  countPages();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

bool Scheduler::submit(std::shared_ptr<Request> request) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Queued requests that a free slot will take at the next step do not
    // count against the queue's bound.
    if (static_cast<int64_t>(waiting_.size()) >=
        options_.maxWaiting + static_cast<int64_t>(freeSlots_.size()))
      return false;
    waiting_.push_back(std::move(request));
  }
  wake_.notify_all();
  return true;
}

void Scheduler::countPages() {
  pagesFree_ = engine_.freeKvPages();
  std::vector<int64_t> saved;
  for (const auto &[number, history] : saved_)
    saved.push_back(number);
  try {
    pagesHeld_ = engine_.distinctKvPages(saved);
  } catch (const std::exception &) {
    pagesHeld_ = 0; // a number the engine does not know: /metrics shows the pages as lost
  }
}

MetricsSnapshot Scheduler::snapshot() {
  std::lock_guard<std::mutex> lock(mutex_);
  MetricsSnapshot now;
  now.waiting = static_cast<int64_t>(waiting_.size());
  now.running = runningCount_;
  now.slotsFree = static_cast<int64_t>(freeSlots_.size());
  now.slotsUsed = engine_.conversations() - now.slotsFree;
  now.pagesFree = pagesFree_;
  now.pagesUsed = engine_.kvPages() - pagesFree_;
  now.pagesHeld = pagesHeld_;
  now.savedHistories = static_cast<int64_t>(saved_.size());
  return now;
}

std::string Scheduler::problem() {
  std::lock_guard<std::mutex> lock(mutex_);
  return problem_;
}

void Scheduler::loop() {
  std::vector<std::shared_ptr<Request>> running;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !running.empty(); });
      if (stopping_)
        break;
      // Admission: the lowest free slot first, so that the running
      // requests tend to be the first slots (few idle rows in a
      // decode_batch call).
      try {
        // In arrival order, while a slot is free and the KV pool can
        // promise the request's pages beside the running ones'.
        while (!waiting_.empty() && !freeSlots_.empty()) {
          // Unpaged, every request's pages and the pool are 0.
          const int64_t pages = pagesOf(*waiting_.front());
          if (pages > engine_.kvPages()) {
            std::shared_ptr<Request> request = std::move(waiting_.front());
            waiting_.pop_front();
            end(*request, Finish{"",
                                 "the request needs " + std::to_string(pages) +
                                     " KV pages (its prompt and max_tokens); the pool has " +
                                     std::to_string(engine_.kvPages()),
                                 400});
            continue;
          }
          if (reservedPages_ + pages > engine_.kvPages())
            break;
          std::shared_ptr<Request> request = std::move(waiting_.front());
          waiting_.pop_front();
          running.push_back(request);
          admit(*request, running);
          request->pages = pages;
          reservedPages_ += pages;
          makeRoom(running);
        }
      } catch (const std::exception &error) {
        engineFailed(error.what(), running);
      }
      runningCount_ = static_cast<int64_t>(running.size());
    }
    try {
      step(running);
    } catch (const std::exception &error) {
      std::lock_guard<std::mutex> lock(mutex_);
      engineFailed(error.what(), running);
    }
    // Leavers give their slot back.
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = running.begin(); it != running.end();) {
      if ((*it)->done) {
        if (problem_.empty()) {
          // The slot keeps what its caches hold, for a request that
          // continues it.
          const Request &r = **it;
          const int64_t slot = r.conversation;
          std::vector<int32_t> tokens(r.params.prompt.begin(),
                                      r.params.prompt.begin() +
                                          static_cast<std::ptrdiff_t>(r.prefilled));
          if (r.prefilled == r.params.prompt.size())
            tokens.insert(tokens.end(), r.generated.begin(), r.generated.end());
          tokens.resize(
              std::min<size_t>(tokens.size(), static_cast<size_t>(engine_.pastTokens(slot))));
          if (options_.prefixReuse && !tokens.empty()) {
            cacheSlot(slot, std::move(tokens));
          } else {
            try {
              engine_.forget(slot); // throws only where followers are gone
            } catch (const std::exception &error) {
              engineFailed(error.what(), running);
            }
          }
          freeSlots_.insert(slot);
        }
        reservedPages_ -= (*it)->pages;
        it = running.erase(it);
      } else {
        ++it;
      }
    }
    runningCount_ = static_cast<int64_t>(running.size());
    // The held pages cost a pass over every page list: each step while the
    // server is idle, every 32nd while requests run.
    if (running.empty() || ++stepsSinceCount_ >= 32) {
      countPages();
      stepsSinceCount_ = 0;
    } else {
      pagesFree_ = engine_.freeKvPages();
    }
  }
  for (const std::shared_ptr<Request> &request : running)
    if (!request->done)
      end(*request, Finish{"", "the server is shutting down", 503});
}

void Scheduler::engineFailed(const std::string &what,
                             const std::vector<std::shared_ptr<Request>> &running) {
  // The engine may be unusable (a GPU error is sticky, a rank is gone):
  // every request in it fails, and so do later ones.
  problem_ = what;
  for (const std::shared_ptr<Request> &request : running)
    if (!request->done)
      end(*request, Finish{"", "the engine failed: " + what, 500});
  for (const std::shared_ptr<Request> &request : waiting_)
    end(*request, Finish{"", "the engine failed: " + what, 503});
  waiting_.clear();
}

void Scheduler::cacheSlot(int64_t slot, std::vector<int32_t> tokens) {
  tree_.erase(slot);
  tree_.insert(slot, tokens);
  cachedSlots_[slot] = CachedSlot{std::move(tokens), ++useClock_};
}

void Scheduler::uncacheSlot(int64_t slot) {
  cachedSlots_.erase(slot);
  tree_.erase(slot);
}

bool Scheduler::saveHistory(int64_t conversation, std::vector<int32_t> tokens, bool shared,
                            int64_t keep) {
  if (options_.savedHistories <= 0 || tokens.empty())
    return false;
  while (static_cast<int64_t>(saved_.size()) >= options_.savedHistories) {
    int64_t oldest = 0;
    uint64_t lastUse = UINT64_MAX;
    for (const auto &[number, history] : saved_)
      if (number != keep && history.lastUse < lastUse) {
        lastUse = history.lastUse;
        oldest = number;
      }
    if (oldest == 0)
      return false;
    dropSaved(oldest);
  }
  const int64_t number = engine_.save(conversation);
  if (number == 0) {
    // No device memory for another copy: keep to the ones there are.
    options_.savedHistories = static_cast<int64_t>(saved_.size());
    return false;
  }
  saved_[number] = SavedHistory{++useClock_, shared};
  tree_.insert(-number, std::move(tokens));
  metrics_.historySaved();
  return true;
}

void Scheduler::dropSaved(int64_t number) {
  engine_.dropSaved(number);
  saved_.erase(number);
  tree_.erase(-number);
}

int64_t Scheduler::emptySlot(int64_t keep) {
  // The lowest free slot holding nothing, so that running requests tend to
  // be slots 0..n-1.
  for (int64_t free : freeSlots_)
    if (!cachedSlots_.count(free))
      return free;
  int64_t slot = -1;
  uint64_t oldest = UINT64_MAX;
  for (const auto &[cachedSlot, cached] : cachedSlots_)
    if (cached.lastUse < oldest) {
      oldest = cached.lastUse;
      slot = cachedSlot;
    }
  // Its history stays findable, saved, while there is room for it.
  saveHistory(slot, cachedSlots_.at(slot).tokens, false, keep);
  engine_.forget(slot);
  uncacheSlot(slot);
  return slot;
}

void Scheduler::addSavePoint(Request &r, int64_t shared) {
  const int64_t page = tree_.pageTokens();
  const size_t point = static_cast<size_t>(shared / page * page);
  if (options_.savedHistories <= 0 || shared < page || point <= r.prefilled)
    return;
  const auto at = std::lower_bound(r.savePoints.begin(), r.savePoints.end(), point);
  if (at == r.savePoints.end() || *at != point)
    r.savePoints.insert(at, point);
}

void Scheduler::restoreSaved(int64_t slot, int64_t number, int64_t keep) {
  engine_.restore(slot, number, keep);
  metrics_.historyRestored();
  // A slot's history saved when the slot was taken lives on in the slot now
  // (this request's, wholly its prefix); a shared prefix stays saved.
  SavedHistory &history = saved_.at(number);
  if (!history.shared && keep == engine_.savedPast(number))
    dropSaved(number);
  else
    history.lastUse = ++useClock_;
}

void Scheduler::admit(Request &r, const std::vector<std::shared_ptr<Request>> &running) {
  const std::vector<int32_t> &prompt = r.params.prompt;
  // The cached history sharing the longest prefix with the prompt that it
  // can still continue from (its rings hold the window there); at least
  // the prompt's last token is prefilled again, for its logits. A free
  // slot wins a tie with a saved history (no copy), the most recently used
  // a tie among either.
  const int64_t most = prompt.empty() ? 0 : static_cast<int64_t>(prompt.size()) - 1;
  int64_t best = 0, keep = 0, furthest = 0;
  bool found = false;
  uint64_t bestUse = 0;
  for (const PrefixTree::Match &match : tree_.matches(prompt)) {
    const int64_t length = std::min(match.shared, most);
    furthest = std::max(furthest, length);
    if (length <= 0 || length < keep)
      continue;
    const bool slot = match.id >= 0;
    const bool usable =
        slot ? engine_.canRollback(match.id, length) : engine_.canRestore(-match.id, length);
    if (!usable)
      continue;
    const uint64_t use = slot ? cachedSlots_.at(match.id).lastUse : saved_.at(-match.id).lastUse;
    const bool better = !found || length > keep || (slot != (best >= 0) ? slot : use > bestUse);
    if (better) {
      found = true;
      best = match.id;
      keep = length;
      bestUse = use;
    }
  }
  if (found && best >= 0) {
    engine_.rollback(best, keep);
    r.conversation = best;
    uncacheSlot(best);
    freeSlots_.erase(best);
  } else if (found) {
    const int64_t slot = emptySlot(-best);
    restoreSaved(slot, -best, keep);
    r.conversation = slot;
    freeSlots_.erase(slot);
  } else {
    r.conversation = emptySlot(0);
    freeSlots_.erase(r.conversation);
  }
  r.prefilled = static_cast<size_t>(keep);
  r.started = false;
  if (keep > 0)
    metrics_.prefixReuse(static_cast<uint64_t>(keep));
  if (options_.savedHistories <= 0 || prompt.empty())
    return;
  // A prefix shared further than any cached history can be continued from
  // (its window is gone) is saved where this prompt's prefill reaches it; one
  // shared with a running request's prompt, where that prefill reaches it if
  // it has not yet (else here too).
  const int64_t page = tree_.pageTokens();
  for (const std::shared_ptr<Request> &other : running) {
    Request &q = *other;
    if (&q == &r || q.done || q.params.prompt.empty())
      continue;
    const size_t limit = std::min(prompt.size(), q.params.prompt.size()) - 1;
    const int64_t shared = static_cast<int64_t>(
        std::mismatch(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(limit),
                      q.params.prompt.begin())
            .first -
        prompt.begin());
    if (shared <= keep)
      continue;
    const size_t point = static_cast<size_t>(shared / page * page);
    if (q.prefilled < point) {
      addSavePoint(q, shared);
      if (!r.awaited.lock() && point > r.prefilled) {
        r.awaited = other;
        r.awaitedPoint = point;
      }
    } else {
      furthest = std::max(furthest, shared);
    }
  }
  if (furthest > keep)
    addSavePoint(r, furthest);
}

void Scheduler::reconsider(Request &r) {
  r.started = true;
  if (options_.savedHistories <= 0 || r.params.prompt.empty())
    return;
  const std::vector<int32_t> &prompt = r.params.prompt;
  const int64_t most = static_cast<int64_t>(prompt.size()) - 1;
  int64_t best = 0, keep = static_cast<int64_t>(r.prefilled);
  for (const PrefixTree::Match &match : tree_.matches(prompt)) {
    const int64_t length = std::min(match.shared, most);
    if (match.id < 0 && length > keep && engine_.canRestore(-match.id, length)) {
      best = -match.id;
      keep = length;
    }
  }
  if (best == 0)
    return;
  metrics_.prefixReuse(static_cast<uint64_t>(keep) - r.prefilled);
  engine_.forget(r.conversation);
  restoreSaved(r.conversation, best, keep);
  r.prefilled = static_cast<size_t>(keep);
  while (!r.savePoints.empty() && r.savePoints.front() <= r.prefilled)
    r.savePoints.erase(r.savePoints.begin());
}

int64_t Scheduler::pagesOf(const Request &r) const {
  const int64_t page = engine_.kvPageTokens();
  if (page == 0)
    return 0;
  const int64_t positions =
      std::min(engine_.contextLength(), static_cast<int64_t>(r.params.prompt.size()) +
                                            r.params.maxTokens + options_.draftTokens);
  // With saved histories a request may copy a page it shares before writing
  // into it, once: after a restore or a rollback into the middle of one (its
  // save points are page boundaries, which share whole pages).
  return (positions + page - 1) / page + (options_.savedHistories > 0 ? 1 : 0);
}

void Scheduler::makeRoom(const std::vector<std::shared_ptr<Request>> &running) {
  if (engine_.kvPageTokens() == 0)
    return;
  // What the running requests may still take: their promise less what they
  // hold. The promises fit the pool, so forgetting every cached slot would
  // make room for all of it.
  int64_t owed = 0;
  for (const std::shared_ptr<Request> &r : running)
    if (!r->done)
      owed += std::max<int64_t>(0, r->pages - engine_.heldKvPages(r->conversation));
  // Cached slots and saved histories alike, least recently used first (a
  // page others share goes back with its last holder).
  while (engine_.freeKvPages() < owed) {
    int64_t oldest = 0;
    bool slot = false;
    uint64_t lastUse = UINT64_MAX;
    for (const auto &[cachedSlot, cached] : cachedSlots_)
      if (cached.lastUse < lastUse && engine_.heldKvPages(cachedSlot) > 0) {
        lastUse = cached.lastUse;
        oldest = cachedSlot;
        slot = true;
      }
    for (const auto &[number, history] : saved_)
      if (history.lastUse < lastUse && engine_.savedKvPages(number) > 0) {
        lastUse = history.lastUse;
        oldest = number;
        slot = false;
      }
    if (lastUse == UINT64_MAX)
      break; // nothing cached holds pages (the promises say this cannot be)
    if (slot) {
      engine_.forget(oldest);
      uncacheSlot(oldest);
    } else {
      dropSaved(oldest);
    }
    metrics_.prefixEvicted();
  }
}

void Scheduler::step(std::vector<std::shared_ptr<Request>> &running) {
  for (const std::shared_ptr<Request> &request : running)
    if (!request->done && request->channel.cancelled())
      end(*request, Finish{"", "cancelled", 499});

  // Prefill, in arrival order, under the step's budget.
  int64_t budget = options_.prefillTokensPerStep;
  for (const std::shared_ptr<Request> &request : running) {
    Request &r = *request;
    const size_t total = r.params.prompt.size();
    if (r.done || r.prefilled >= total || budget <= 0)
      continue;
    if (!r.started) {
      // Its prefix is being computed by a request that saves it: wait.
      if (const std::shared_ptr<Request> q = r.awaited.lock();
          q && !q->done && q->prefilled < r.awaitedPoint)
        continue;
      std::lock_guard<std::mutex> lock(mutex_);
      reconsider(r);
    }
    size_t n = std::min(static_cast<size_t>(budget), total - r.prefilled);
    // Paged caches: a chunk short of the prompt's end ends on a page
    // boundary, so that the next one starts on one (as with prefix reuse).
    if (const size_t page = static_cast<size_t>(engine_.kvPageTokens());
        page > 0 && r.prefilled + n < total && (r.prefilled + n) / page * page > r.prefilled)
      n = (r.prefilled + n) / page * page - r.prefilled;
    // A prefix to save ends a chunk.
    for (size_t point : r.savePoints)
      if (point > r.prefilled) {
        n = std::min(n, point - r.prefilled);
        break;
      }
    const std::vector<int32_t> chunk(
        r.params.prompt.begin() + static_cast<std::ptrdiff_t>(r.prefilled),
        r.params.prompt.begin() + static_cast<std::ptrdiff_t>(r.prefilled + n));
    const std::vector<float> logits = engine_.prefill(r.conversation, chunk);
    r.prefilled += n;
    budget -= static_cast<int64_t>(n);
    metrics_.tokens(n, 0);
    if (std::binary_search(r.savePoints.begin(), r.savePoints.end(), r.prefilled)) {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<int32_t> prefix(r.params.prompt.begin(),
                                  r.params.prompt.begin() +
                                      static_cast<std::ptrdiff_t>(r.prefilled));
      // Unless another request saved the same prefix already.
      bool saved = false;
      for (const PrefixTree::Match &match : tree_.matches(prefix))
        saved = saved || (match.id < 0 && match.shared == static_cast<int64_t>(prefix.size()) &&
                          engine_.savedPast(-match.id) == match.shared);
      if (!saved)
        saveHistory(r.conversation, std::move(prefix), true);
    }
    if (r.prefilled == total)
      advance(r, logits.data());
  }

  // One decode step for every request past its prompt.
  std::vector<Request *> decoding;
  for (const std::shared_ptr<Request> &request : running)
    if (!request->done && request->prefilled == request->params.prompt.size() &&
        !request->generated.empty())
      decoding.push_back(request.get());
  const auto prefilled = static_cast<uint64_t>(options_.prefillTokensPerStep - budget);
  if (decoding.empty()) {
    if (prefilled > 0)
      metrics_.step(prefilled, false);
    return;
  }
  metrics_.step(prefilled, true);
  std::sort(decoding.begin(), decoding.end(),
            [](const Request *a, const Request *b) { return a->conversation < b->conversation; });
  bool prefix = options_.batchedDecode && decoding.size() > 1;
  for (size_t i = 0; prefix && i < decoding.size(); ++i)
    prefix = decoding[i]->conversation == static_cast<int64_t>(i);
  if (options_.draftTokens > 0) {
    speculate(decoding, prefix);
    return;
  }
  // One decode_batch call over slots 0 .. the highest decoding one, the
  // slots not decoding now (prefilling, free) as idle rows, which leave them
  // as they were; one that has no room left for the idle row's token keeps
  // the requests to a decode call each.
  const int64_t rows = decoding.back()->conversation + 1;
  bool batched = options_.batchedDecode && decoding.size() > 1;
  std::vector<int32_t> tokens(static_cast<size_t>(rows), 0);
  std::vector<bool> stepped(static_cast<size_t>(rows), false);
  for (const Request *r : decoding) {
    tokens[static_cast<size_t>(r->conversation)] = r->generated.back();
    stepped[static_cast<size_t>(r->conversation)] = true;
  }
  for (int64_t c = 0; batched && c < rows; ++c)
    batched = stepped[static_cast<size_t>(c)] || engine_.pastTokens(c) < engine_.contextLength();
  // Greedy requests that want no logprobs need only each row's best token,
  // which a GPU artifact's greedy kernel picks where the logits are.
  const bool greedy = std::all_of(decoding.begin(), decoding.end(), [](const Request *r) {
    return r->params.sampling.temperature <= 0.0 && r->params.logprobs < 0;
  });
  if (batched && greedy) {
    const std::vector<int32_t> chosen = engine_.decodeBatchGreedy(tokens, stepped);
    for (Request *r : decoding)
      deliver(*r, chosen[static_cast<size_t>(r->conversation)], nullptr);
    return;
  }
  if (batched) {
    const std::vector<float> logits = engine_.decodeBatch(tokens, stepped);
    for (Request *r : decoding)
      advance(*r,
              logits.data() + static_cast<size_t>(r->conversation) * static_cast<size_t>(vocab_));
    return;
  }
  for (Request *r : decoding) {
    const std::vector<float> logits = engine_.decode(r->conversation, r->generated.back());
    advance(*r, logits.data());
  }
}

std::vector<int32_t> Scheduler::draftsOf(Request &r) {
  const int64_t most = engine_.verifyTokens() - 1;
  int64_t limit = r.params.draftTokens >= 0 ? r.params.draftTokens : options_.draftTokens;
  // The call's tokens (the pending one and the drafts) need room in the
  // context, and a reply near max_tokens needs fewer.
  limit = std::min({limit, most, r.params.maxTokens - static_cast<int64_t>(r.generated.size()) - 1,
                    engine_.contextLength() - engine_.pastTokens(r.conversation) - 1});
  if (limit <= 0 || r.generated.size() < r.pausedUntil)
    return {};
  if (!r.drafter)
    r.drafter = std::make_unique<speculate::LookupDrafter>(
        speculate::LookupOptions{options_.ngramMin, options_.ngramMax, static_cast<int>(most)});
  // Catch the drafter up with the prompt, then the tokens generated.
  const size_t known = r.params.prompt.size() + r.generated.size();
  for (; r.drafterSeen < known; ++r.drafterSeen)
    r.drafter->append(r.drafterSeen < r.params.prompt.size()
                          ? r.params.prompt[r.drafterSeen]
                          : r.generated[r.drafterSeen - r.params.prompt.size()]);
  return r.drafter->draft(limit);
}

void Scheduler::speculate(std::vector<Request *> &decoding, bool batched) {
  // A batched verify writes every conversation's rows, padding included;
  // without the entry (too many rows), a verify call each.
  const int64_t rows = engine_.verifyTokens();
  batched = batched && verifyBatch_;
  for (const Request *r : decoding)
    batched = batched && engine_.pastTokens(r->conversation) + rows <= engine_.contextLength();
  const size_t n = decoding.size();
  std::vector<std::vector<int32_t>> drafts(n);
  std::vector<int32_t> pending(n);
  std::vector<speculate::Acceptor> accept(n);
  // The rows a request's yielded tokens were drawn from, for its logprobs.
  std::vector<std::vector<std::vector<float>>> rowsOf(n);
  for (size_t i = 0; i < n; ++i) {
    Request &r = *decoding[i];
    if (!r.sampler)
      r.sampler.emplace(r.params.sampling);
    drafts[i] = draftsOf(r);
    pending[i] = r.generated.back();
    accept[i] = [&r, &rows = rowsOf[i]](const float *logits, int64_t vocab,
                                        const std::vector<int32_t> &d) {
      const speculate::Verdict verdict = speculate::verifySampled(logits, vocab, d, *r.sampler);
      if (r.params.logprobs >= 0)
        for (int64_t row = 0; row <= verdict.accepted; ++row)
          rows.emplace_back(logits + row * vocab, logits + (row + 1) * vocab);
      return verdict;
    };
  }
  std::vector<speculate::Verdict> verdicts;
  int64_t verifyCalls = 0;
  if (batched) {
    verdicts = speculate::verifyBatchStep(engine_, pending, drafts, accept, verifyCalls);
  } else {
    for (size_t i = 0; i < n; ++i)
      verdicts.push_back(speculate::verifyStep(engine_, decoding[i]->conversation, pending[i],
                                               drafts[i], accept[i]));
  }
  for (size_t i = 0; i < n; ++i) {
    Request &r = *decoding[i];
    const speculate::Verdict &verdict = verdicts[i];
    if (!drafts[i].empty()) {
      metrics_.speculation(drafts[i].size(), static_cast<uint64_t>(verdict.accepted));
      // Four verify steps in a row that accept nothing: plain decoding for
      // the next 16 tokens, then drafts again.
      r.misses = verdict.accepted ? 0 : r.misses + 1;
      if (r.misses >= 4) {
        r.pausedUntil = r.generated.size() + 16;
        r.misses = 0;
      }
    }
    std::vector<int32_t> tokens(drafts[i].begin(), drafts[i].begin() + verdict.accepted);
    tokens.push_back(verdict.next);
    for (size_t j = 0; j < tokens.size() && !r.done; ++j)
      deliver(r, tokens[j], rowsOf[i].empty() ? nullptr : rowsOf[i][j].data());
  }
}

void Scheduler::advance(Request &r, const float *logits) {
  if (!r.sampler)
    r.sampler.emplace(r.params.sampling);
  deliver(r, r.sampler->sample(logits, static_cast<size_t>(vocab_)), logits);
}

void Scheduler::deliver(Request &r, int32_t token, const float *logits) {
  TokenEvent event;
  event.id = token;
  if (r.params.logprobs >= 0 && logits)
    logprobs(logits, vocab_, event.id, r.params.logprobs, event);
  const Clock::time_point now = Clock::now();
  if (r.generated.empty()) {
    r.firstToken = now;
    metrics_.timeToFirstToken(seconds(r.arrived, now));
  } else {
    metrics_.timePerOutputToken(seconds(r.lastToken, now));
  }
  r.lastToken = now;
  r.generated.push_back(event.id);
  metrics_.tokens(0, 1);

  std::string reason;
  const bool eos = tokenizer_ && tokenizer_->eos() && event.id == *tokenizer_->eos();
  if (tokenizer_ && !eos) {
    const bool known = event.id < tokenizer_->idLimit() && tokenizer_->hasToken(event.id);
    r.held += r.utf8.push(known ? tokenizer_->tokenBytes(event.id, /*skipSpecialTokens=*/true)
                                : std::string("\xef\xbf\xbd"));
  }
  // A stop text ends the reply before it.
  for (const std::string &stop : r.params.stop)
    if (const size_t at = r.held.find(stop); at != std::string::npos) {
      r.held.resize(at);
      reason = "stop";
    }
  if (reason.empty()) {
    const int64_t used = static_cast<int64_t>(r.params.prompt.size() + r.generated.size());
    if (eos)
      reason = "stop";
    else if (static_cast<int64_t>(r.generated.size()) >= r.params.maxTokens ||
             used >= engine_.contextLength())
      reason = "length";
  }
  if (reason.empty()) {
    const size_t cut = safeCut(r.held, r.params.stop);
    event.text = r.held.substr(0, cut);
    r.held.erase(0, cut);
  } else {
    if (reason == "length")
      r.held += r.utf8.finish();
    event.text = std::move(r.held);
    r.held.clear();
  }
  r.channel.push(std::move(event));
  if (!reason.empty())
    end(r, Finish{reason, "", 200});
}

void Scheduler::end(Request &r, Finish finish) {
  r.done = true;
  metrics_.requestFinished(
      finish.reason.empty() ? (finish.httpStatus == 499 ? "cancelled" : "error") : "ok");
  r.channel.finish(std::move(finish));
}

} // namespace kiln::serve
