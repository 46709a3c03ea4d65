#include "runtime/serve/Metrics.h"

#include <sstream>
#include <utility>

namespace kiln::serve {

Histogram::Histogram()
    : Histogram({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10}) {}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}

void Histogram::observe(double value) {
  for (size_t b = 0; b < bounds_.size(); ++b)
    if (value <= bounds_[b])
      ++counts_[b];
  ++count_;
  sum_ += value;
}

std::string Histogram::text(const std::string &name, const std::string &help) const {
  std::ostringstream out;
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
  for (size_t b = 0; b < bounds_.size(); ++b)
    out << name << "_bucket{le=\"" << bounds_[b] << "\"} " << counts_[b] << "\n";
  out << name << "_bucket{le=\"+Inf\"} " << count_ << "\n"
      << name << "_sum " << sum_ << "\n"
      << name << "_count " << count_ << "\n";
  return out.str();
}

void Metrics::requestFinished(const std::string &status) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (status == "ok")
    ++ok_;
  else if (status == "rejected")
    ++rejected_;
  else if (status == "cancelled")
    ++cancelled_;
  else
    ++failed_;
}

void Metrics::tokens(uint64_t prompt, uint64_t generated) {
  std::lock_guard<std::mutex> lock(mutex_);
  promptTokens_ += prompt;
  generatedTokens_ += generated;
}

void Metrics::speculation(uint64_t drafted, uint64_t accepted) {
  std::lock_guard<std::mutex> lock(mutex_);
  draftTokens_ += drafted;
  acceptedDrafts_ += accepted;
}

void Metrics::prefixReuse(uint64_t tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  reusedTokens_ += tokens;
}

void Metrics::prefixEvicted() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++evictions_;
}

void Metrics::historySaved() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++saves_;
}

void Metrics::historyRestored() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++restores_;
}

void Metrics::timeToFirstToken(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ttft_.observe(seconds);
}

void Metrics::step(uint64_t promptTokens, bool decoded) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++steps_;
  mixedSteps_ += promptTokens > 0 && decoded;
  if (promptTokens > 0)
    stepPrompt_.observe(static_cast<double>(promptTokens));
}

void Metrics::timePerOutputToken(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  tpot_.observe(seconds);
}

std::string Metrics::text(const MetricsSnapshot &now) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream out;
  // One sample of a metric with its HELP and TYPE lines.
  const auto metric = [&](const char *type, const char *name, const char *help, auto value) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
        << name << " " << value << "\n";
  };
  const auto gauge = [&](const char *name, const char *help, auto value) {
    metric("gauge", name, help, value);
  };
  const auto counter = [&](const char *name, const char *help, uint64_t value) {
    metric("counter", name, help, value);
  };
  gauge("kiln_requests_waiting", "Requests queued for a conversation slot.", now.waiting);
  gauge("kiln_requests_running", "Requests holding a conversation slot (prefill or decode).",
        now.running);
  gauge("kiln_kv_slots_used", "Conversation slots (KV caches) in use.", now.slotsUsed);
  gauge("kiln_kv_slots_free", "Conversation slots (KV caches) free.", now.slotsFree);
  gauge("kiln_kv_pages_used",
        "Pages of the paged KV caches' pool that conversations hold (0 unpaged).", now.pagesUsed);
  gauge("kiln_kv_pages_held",
        "Pages that the slots' caches and the saved histories hold, counted from their page "
        "lists (each step while idle, every 32nd while requests run): kiln_kv_pages_used when "
        "idle unless pages were lost (0 unpaged).",
        now.pagesHeld);
  gauge("kiln_kv_pages_free", "Pages of the paged KV caches' pool free (0 unpaged).",
        now.pagesFree);
  gauge("kiln_saved_histories",
        "Histories kept beside the slots (their KV pages and a copy of their sliding windows).",
        now.savedHistories);
  out << "# HELP kiln_requests_total Requests finished, by outcome.\n"
      << "# TYPE kiln_requests_total counter\n"
      << "kiln_requests_total{status=\"ok\"} " << ok_ << "\n"
      << "kiln_requests_total{status=\"error\"} " << failed_ << "\n"
      << "kiln_requests_total{status=\"rejected\"} " << rejected_ << "\n"
      << "kiln_requests_total{status=\"cancelled\"} " << cancelled_ << "\n";
  counter("kiln_prompt_tokens_total", "Prompt tokens prefilled.", promptTokens_);
  counter("kiln_prefix_reused_tokens_total",
          "Prompt tokens found cached (a slot's, a saved history's) and not prefilled.",
          reusedTokens_);
  counter("kiln_prefix_evictions_total",
          "Cached histories forgotten to free KV pages for running requests.", evictions_);
  gauge("kiln_prefix_hit_ratio",
        "Prompt tokens found cached over the prompt tokens of every request admitted (found and "
        "prefilled).",
        reusedTokens_ + promptTokens_
            ? static_cast<double>(reusedTokens_) / double(reusedTokens_ + promptTokens_)
            : 0.0);
  counter("kiln_saved_histories_total", "Histories saved beside the slots.", saves_);
  counter("kiln_restored_histories_total", "Saved histories a request continued in a slot.",
          restores_);
  counter("kiln_generation_tokens_total", "Tokens generated.", generatedTokens_);
  counter("kiln_spec_draft_tokens_total", "Drafted tokens speculative steps checked.",
          draftTokens_);
  counter("kiln_spec_accepted_tokens_total", "Drafted tokens the model accepted.", acceptedDrafts_);
  counter("kiln_steps_total", "Scheduler steps that prefilled or decoded.", steps_);
  counter("kiln_steps_prefill_and_decode_total",
          "Steps that prefilled prompt chunks and decoded the running requests together.",
          mixedSteps_);
  out << stepPrompt_.text("kiln_step_prompt_tokens",
                          "Prompt tokens a step prefilled (at most --prefill-tokens-per-step).");
  out << ttft_.text("kiln_time_to_first_token_seconds",
                    "From a request's arrival to its first token.");
  out << tpot_.text("kiln_time_per_output_token_seconds",
                    "Between consecutive tokens of a request.");
  return out.str();
}

} // namespace kiln::serve
