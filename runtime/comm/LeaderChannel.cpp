#include "runtime/comm/LeaderChannel.h"

#include "runtime/comm/Collectives.h"

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <functional>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

namespace kiln {
namespace {

// The abstract-namespace address of a job's channel: a leading NUL, then a
// name derived from the rendezvous path (hashed where the path is too long).
sockaddr_un addressOf(const RankInfo &rank, socklen_t &length) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::string name = "kiln-leader:" + rank.rendezvous;
  if (name.size() + 1 > sizeof(address.sun_path)) {
    char hashed[40];
    std::snprintf(hashed, sizeof(hashed), "kiln-leader#%016zx",
                  std::hash<std::string>{}(rank.rendezvous));
    name = hashed;
  }
  std::memcpy(address.sun_path + 1, name.data(), name.size());
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return address;
}

std::string lastError() { return std::strerror(errno); }

// Writes all of `bytes`; false when the peer is gone.
bool writeAll(int socket, const char *bytes, size_t size) {
  while (size > 0) {
    const ssize_t wrote = ::send(socket, bytes, size, MSG_NOSIGNAL);
    if (wrote < 0 && errno == EINTR)
      continue;
    if (wrote <= 0)
      return false;
    bytes += wrote;
    size -= static_cast<size_t>(wrote);
  }
  return true;
}

// Reads exactly `size` bytes: 1, or 0 at a clean end before the first byte,
// or -1 when the stream ends part way.
int readAll(int socket, char *bytes, size_t size) {
  size_t got = 0;
  while (got < size) {
    const ssize_t read = ::recv(socket, bytes + got, size - got, 0);
    if (read < 0 && errno == EINTR)
      continue;
    if (read <= 0)
      return got == 0 ? 0 : -1;
    got += static_cast<size_t>(read);
  }
  return 1;
}

} // namespace

LeaderChannel::LeaderChannel(RankInfo rank, int listener)
    : rank_(std::move(rank)), listener_(listener),
      followers_(static_cast<size_t>(rank_.world - 1), -1) {}

LeaderChannel::~LeaderChannel() {
  for (int socket : followers_)
    if (socket >= 0)
      ::close(socket);
  if (listener_ >= 0)
    ::close(listener_);
}

std::unique_ptr<LeaderChannel> LeaderChannel::listen(const RankInfo &rank) {
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0)
    throw CollectiveError("rank 0: cannot open the followers' socket: " + lastError());
  socklen_t length = 0;
  const sockaddr_un address = addressOf(rank, length);
  if (::bind(listener, reinterpret_cast<const sockaddr *>(&address), length) != 0 ||
      ::listen(listener, rank.world) != 0) {
    const std::string why = lastError();
    ::close(listener);
    throw CollectiveError("rank 0: cannot listen for the other ranks at rendezvous " +
                          rank.rendezvous + ": " + why +
                          " (another job with the same KILN_RENDEZVOUS?)");
  }
  return std::unique_ptr<LeaderChannel>(new LeaderChannel(rank, listener));
}

void LeaderChannel::acceptFollowers() {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(rank_.timeoutSeconds);
  for (int joined = 0; joined < rank_.world - 1;) {
    pollfd waiting{listener_, POLLIN, 0};
    const int ready = ::poll(&waiting, 1, 100);
    if (ready < 0 && errno != EINTR)
      throw CollectiveError("rank 0: waiting for the other ranks: " + lastError());
    if (ready <= 0) {
      if (std::chrono::steady_clock::now() <= deadline)
        continue;
      std::string missing;
      for (size_t r = 0; r < followers_.size(); ++r)
        if (followers_[r] < 0)
          missing += (missing.empty() ? "" : ", ") + std::to_string(r + 1);
      throw CollectiveError("rank 0: rank(s) " + missing + " did not connect within " +
                            std::to_string(static_cast<int>(rank_.timeoutSeconds)) +
                            " s (KILN_COMM_TIMEOUT)");
    }
    const int socket = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (socket < 0)
      continue;
    // A follower says which rank it is first.
    int32_t who = -1;
    if (readAll(socket, reinterpret_cast<char *>(&who), sizeof(who)) != 1 || who < 1 ||
        who >= rank_.world || followers_[static_cast<size_t>(who - 1)] >= 0) {
      ::close(socket);
      throw CollectiveError("rank 0: a connection to the followers' socket said it was rank " +
                            std::to_string(who) + " (expected one of 1.." +
                            std::to_string(rank_.world - 1) + ", each once)");
    }
    followers_[static_cast<size_t>(who - 1)] = socket;
    ++joined;
  }
  ::close(listener_);
  listener_ = -1;
}

void LeaderChannel::send(const std::string &message) {
  const uint32_t size = static_cast<uint32_t>(message.size());
  for (size_t r = 0; r < followers_.size(); ++r)
    if (!writeAll(followers_[r], reinterpret_cast<const char *>(&size), sizeof(size)) ||
        !writeAll(followers_[r], message.data(), message.size()))
      throw CollectiveError("rank 0: rank " + std::to_string(r + 1) +
                            " is gone (its connection closed)");
}

FollowerChannel::~FollowerChannel() {
  if (socket_ >= 0)
    ::close(socket_);
}

std::unique_ptr<FollowerChannel> FollowerChannel::connect(const RankInfo &rank) {
  socklen_t length = 0;
  const sockaddr_un address = addressOf(rank, length);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(rank.timeoutSeconds);
  for (;;) {
    const int socket = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (socket < 0)
      throw CollectiveError("rank " + std::to_string(rank.rank) +
                            ": cannot open a socket: " + lastError());
    if (::connect(socket, reinterpret_cast<const sockaddr *>(&address), length) == 0) {
      const int32_t who = rank.rank;
      if (!writeAll(socket, reinterpret_cast<const char *>(&who), sizeof(who))) {
        ::close(socket);
        throw CollectiveError("rank " + std::to_string(rank.rank) +
                              ": rank 0 closed the connection at once");
      }
      return std::unique_ptr<FollowerChannel>(new FollowerChannel(socket));
    }
    ::close(socket);
    if (std::chrono::steady_clock::now() > deadline)
      throw CollectiveError("rank " + std::to_string(rank.rank) +
                            ": rank 0 did not listen at rendezvous " + rank.rendezvous +
                            " within " + std::to_string(static_cast<int>(rank.timeoutSeconds)) +
                            " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::optional<std::string> FollowerChannel::receive() {
  uint32_t size = 0;
  const int head = readAll(socket_, reinterpret_cast<char *>(&size), sizeof(size));
  if (head == 0)
    return std::nullopt;
  std::string message(size, '\0');
  if (head < 0 || (size > 0 && readAll(socket_, message.data(), size) != 1))
    throw CollectiveError("a message from rank 0 was cut short (rank 0 died?)");
  return message;
}

} // namespace kiln
