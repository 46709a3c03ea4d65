// kiln-serve's counters and histograms, written in Prometheus' text format
// for /metrics.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::serve {

// A histogram over fixed buckets (upper bounds, ascending).
class Histogram {
public:
  // Seconds: a millisecond to ten seconds.
  Histogram();
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // "<name>_bucket{le=...} N" lines, _sum and _count.
  std::string text(const std::string &name, const std::string &help) const;

private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  double sum_ = 0;
};

struct MetricsSnapshot {
  int64_t waiting = 0, running = 0;
  int64_t slotsUsed = 0, slotsFree = 0;
  int64_t pagesUsed = 0, pagesFree = 0; // paged KV caches (0 and 0 unpaged)
  // The pages that the slots and the saved histories the scheduler keeps
  // hold, counted from their page lists: pagesUsed unless a page was lost.
  int64_t pagesHeld = 0;
  int64_t savedHistories = 0; // Engine::save copies the scheduler keeps
};

class Metrics {
public:
  void requestFinished(const std::string &status);
  void tokens(uint64_t prompt, uint64_t generated);
  void timeToFirstToken(double seconds);
  void timePerOutputToken(double seconds);
  // A scheduler step: the prompt tokens it prefilled and whether it ran a
  // decode step too (chunked prefill interleaved with decoding).
  void step(uint64_t promptTokens, bool decoded);
  // A speculative step's drafts and how many of them were accepted.
  void speculation(uint64_t drafted, uint64_t accepted);
  // Prompt tokens a request found in its slot's caches (prefix reuse).
  void prefixReuse(uint64_t tokens);
  // A cached history forgotten to give its KV pages to running requests.
  void prefixEvicted();
  // A history saved (a slot's that another request takes, or a prompt's
  // prefix others share) and one restored into a slot.
  void historySaved();
  void historyRestored();
  std::string text(const MetricsSnapshot &now);

private:
  std::mutex mutex_;
  uint64_t ok_ = 0, failed_ = 0, rejected_ = 0, cancelled_ = 0;
  uint64_t promptTokens_ = 0, generatedTokens_ = 0;
  uint64_t draftTokens_ = 0, acceptedDrafts_ = 0, reusedTokens_ = 0, evictions_ = 0;
  uint64_t saves_ = 0, restores_ = 0;
  uint64_t steps_ = 0, mixedSteps_ = 0;
  Histogram ttft_, tpot_;
  Histogram stepPrompt_{{16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768}};
};

} // namespace kiln::serve
