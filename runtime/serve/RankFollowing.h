// kiln-serve --nproc N serves a multi-rank artifact: rank 0 runs the HTTP
// server and the scheduler; every other rank follows it, making each engine
// call rank 0 makes, in the same order with the same tokens, so that the
// collectives inside the calls meet. Rank 0 hands each call to the followers
// before it runs (Engine::observeCalls, EngineCall over a LeaderChannel);
// only rank 0 samples, the followers' results are thrown away (every rank
// computes the same logits). An empty message says rank 0 is done.
#pragma once

#include "runtime/comm/LeaderChannel.h"
#include "runtime/engine/Engine.h"

#include <memory>

namespace kiln::serve {

// Rank 0's side: waits for the followers to connect, then hands them every
// call of `engine` until it is destroyed, when it tells them to stop.
class RankLeader {
public:
  RankLeader(Engine &engine, std::unique_ptr<LeaderChannel> channel);
  ~RankLeader();
  RankLeader(const RankLeader &) = delete;
  RankLeader &operator=(const RankLeader &) = delete;

private:
  Engine &engine_;
  std::unique_ptr<LeaderChannel> channel_;
};

// A follower's side: makes rank 0's calls on `engine` until rank 0 says
// stop. Throws when a call fails here (the job cannot go on: the ranks'
// collectives would no longer meet) or when rank 0 went away without a word.
// Returns the calls made.
uint64_t followRank0(Engine &engine, FollowerChannel &channel);

} // namespace kiln::serve
