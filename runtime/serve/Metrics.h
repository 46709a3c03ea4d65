// kiln-serve's counters and histograms, written in Prometheus' text format
// for /metrics.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>

namespace kiln::serve {

// A histogram of seconds over fixed buckets.
class Histogram {
public:
  static constexpr std::array<double, 12> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                     0.1,   0.25,   0.5,   1,    2.5,   10};
  void observe(double seconds);
  // "<name>_bucket{le=...} N" lines, _sum and _count.
  std::string text(const std::string &name, const std::string &help) const;

private:
  std::array<uint64_t, kBounds.size()> counts_{};
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
  Histogram ttft_, tpot_;
};

} // namespace kiln::serve
