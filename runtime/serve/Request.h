// One generation request as the scheduler runs it, and the channel its
// tokens travel by to the HTTP handler that waits for them (kiln-serve).
#pragma once

#include "runtime/engine/Sampler.h"
#include "runtime/speculate/LookupDrafter.h"
#include "runtime/text/Utf8.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace kiln::serve {

using Clock = std::chrono::steady_clock;

// What a request asks for, checked by the API layer.
struct GenerationParams {
  std::vector<int32_t> prompt;
  int64_t maxTokens = 16;
  SamplingOptions sampling;
  std::vector<std::string> stop; // texts that end the reply, not included
  int logprobs = -1;             // -1: none; else the top N (0..20) besides the chosen one
  bool stream = false;
  bool chat = false; // /v1/chat/completions: its response objects
  // Kiln's "draft_tokens": drafts a speculative step checks at most for this
  // request (0: none); -1: the server's --draft-tokens.
  int64_t draftTokens = -1;
};

// One generated token as the client sees it.
struct TokenEvent {
  int32_t id = 0;
  std::string text; // the text it completes (whole characters; may be empty)
  double logprob = 0;
  std::vector<std::pair<int32_t, double>> top; // the top logprobs, most likely first
};

// How a request ended.
struct Finish {
  std::string reason; // "stop", "length", or empty for an error
  std::string error;  // when it failed
  int httpStatus = 200;
};

// Tokens from the scheduler to the handler: pushed as they are sampled,
// taken as the handler writes them; the finish comes last.
class TokenChannel {
public:
  void push(TokenEvent event);
  void finish(Finish finish);
  // Waits for the next event: a token, or nullopt once finished (then
  // finishState() says how). Returns nullopt also on `timeout` with
  // timedOut set.
  std::optional<TokenEvent> next(std::chrono::milliseconds timeout, bool *timedOut);
  Finish finishState();
  // The handler lost its client: the scheduler stops the request.
  void cancel();
  bool cancelled();

private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<TokenEvent> events_;
  std::optional<Finish> finish_;
  bool cancelled_ = false;
};

// A request inside the scheduler.
struct Request {
  uint64_t id = 0;
  GenerationParams params;
  TokenChannel channel;
  Clock::time_point arrived = Clock::now();
  // Scheduler state.
  int64_t conversation = -1;
  size_t prefilled = 0; // prompt tokens in the KV caches
  // Page boundaries where its prefill stops to save the prefix others share
  // (ascending; Scheduler.h), and whether a chunk of it has run since it was
  // admitted (before the first, a saved prefix may still be restored).
  std::vector<size_t> savePoints;
  bool started = false;
  // A running request that will save the prefix this one shares, and where:
  // this one's prefill waits for that save, then restores it.
  std::weak_ptr<Request> awaited;
  size_t awaitedPoint = 0;
  // Paged KV: the pages the request may come to hold (its prompt, its
  // max_tokens and a step's drafts), counted against the pool while it runs.
  int64_t pages = 0;
  std::vector<int32_t> generated;
  std::optional<Sampler> sampler;
  text::Utf8Stream utf8;
  std::string held; // decoded text held back: it may begin a stop text
  Clock::time_point firstToken, lastToken;
  bool done = false;
  // Speculative decoding (kiln-serve --speculate lookup): the drafter, how
  // many of the prompt and generated tokens it has seen, and the fallback:
  // after a few verify steps in a row accept nothing, plain decoding until
  // generated reaches pausedUntil.
  std::unique_ptr<speculate::LookupDrafter> drafter;
  size_t drafterSeen = 0;
  int misses = 0;
  size_t pausedUntil = 0;
};

} // namespace kiln::serve
