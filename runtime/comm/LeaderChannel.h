// Messages from rank 0 to the other ranks of a job on one machine, in
// order. kiln-serve --nproc N sends over it each engine call rank 0 makes,
// so that the other ranks make it too (runtime/serve/RankFollowing.h).
//
// A Unix stream socket in Linux's abstract namespace named after the job's
// rendezvous (KILN_RENDEZVOUS: nothing on disk to clean up, no other job's
// name); each message is a 4-byte length and its bytes. Unlike a collective,
// a follower may wait for the next message without bound (a server idles
// between requests): it learns that rank 0 ended from a message saying so,
// or from the socket closing when rank 0's process is gone.
#pragma once

#include "runtime/comm/RankInfo.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

class LeaderChannel {
public:
  // Rank 0: listens at the job's name. Throws CollectiveError when it
  // cannot (another job's rank 0 listens at the same rendezvous).
  static std::unique_ptr<LeaderChannel> listen(const RankInfo &rank);
  ~LeaderChannel();
  LeaderChannel(const LeaderChannel &) = delete;
  LeaderChannel &operator=(const LeaderChannel &) = delete;

  // Waits for every other rank of the world to connect, up to the rank's
  // timeout; throws CollectiveError naming the ranks missing.
  void acceptFollowers();
  // Sends `message` to every follower, in rank order; throws CollectiveError
  // naming a follower whose connection is gone.
  void send(const std::string &message);

private:
  explicit LeaderChannel(RankInfo rank, int listener);
  RankInfo rank_;
  int listener_ = -1;
  std::vector<int> followers_; // by rank - 1
};

class FollowerChannel {
public:
  // A rank other than 0: connects to rank 0's channel, retrying up to the
  // rank's timeout (rank 0 may not listen yet).
  static std::unique_ptr<FollowerChannel> connect(const RankInfo &rank);
  ~FollowerChannel();
  FollowerChannel(const FollowerChannel &) = delete;
  FollowerChannel &operator=(const FollowerChannel &) = delete;

  // The next message, waiting as long as it takes; nullopt once rank 0
  // closed its end. Throws CollectiveError on a message cut short.
  std::optional<std::string> receive();

private:
  explicit FollowerChannel(int socket) : socket_(socket) {}
  int socket_ = -1;
};

} // namespace kiln
