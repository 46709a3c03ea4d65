#include "runtime/serve/RankFollowing.h"

#include "runtime/cpu/RuntimeError.h"
#include "runtime/engine/EngineCall.h"

namespace kiln::serve {

RankLeader::RankLeader(Engine &engine, std::unique_ptr<LeaderChannel> channel)
    : engine_(engine), channel_(std::move(channel)) {
  channel_->acceptFollowers();
  engine_.observeCalls(
      [channel = channel_.get()](const EngineCall &call) { channel->send(encodeCall(call)); });
}

RankLeader::~RankLeader() {
  engine_.observeCalls(nullptr);
  try {
    channel_->send(std::string());
  } catch (const std::exception &) {
    // A follower already gone: the launcher reports it.
  }
}

uint64_t followRank0(Engine &engine, FollowerChannel &channel) {
  uint64_t calls = 0;
  for (;;) {
    std::optional<std::string> message = channel.receive();
    if (!message)
      throw RuntimeError("rank 0 went away without a stop (it failed or was killed)");
    if (message->empty())
      return calls;
    const EngineCall call = decodeCall(*message);
    try {
      replay(engine, call);
    } catch (const std::exception &error) {
      throw RuntimeError("rank " + std::to_string(engine.rank()) + ": rank 0's " + describe(call) +
                         " failed here: " + error.what());
    }
    ++calls;
  }
}

} // namespace kiln::serve
