#include "runtime/comm/HostCollectives.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace kiln {
namespace {

constexpr uint64_t kMagic = 0x4b494c4e434f4d31; // "KILNCOM1"
constexpr uint64_t kHeaderBytes = 4096;

enum RankState : int32_t { Absent = 0, Joined = 1, Left = 2 };

struct alignas(64) RankSlot {
  std::atomic<uint64_t> arrived;
  std::atomic<int32_t> state;
  std::atomic<int32_t> pid;
};

struct Header {
  std::atomic<uint64_t> magic;
  uint64_t world;
  uint64_t capacity;
  std::atomic<int32_t> failed; // 0, or 1 + the rank that failed first
  char reason[1024];
};
static_assert(sizeof(Header) <= kHeaderBytes);

uint64_t roundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g s", s);
  return text;
}

} // namespace

// The file: the header, a RankSlot per rank, then a data slot per rank.
struct HostCollectives::Shared {
  Header header;
};

static RankSlot *rankSlots(void *base) {
  return reinterpret_cast<RankSlot *>(static_cast<char *>(base) + kHeaderBytes);
}

static uint64_t slotsBytes(uint64_t world) { return roundUp(world * sizeof(RankSlot), 4096); }

HostCollectives::HostCollectives(const RankInfo &rank, std::vector<CommGroupSpec> groups,
                                 uint64_t capacityBytes)
    : rank_(rank), capacity_(roundUp(std::max<uint64_t>(capacityBytes, 64), 64)) {
  for (const CommGroupSpec &group : groups) {
    if (group.ranks.size() != static_cast<size_t>(rank.world))
      throw RuntimeError("comm group '" + group.name + "' lists " +
                         std::to_string(group.ranks.size()) + " ranks; the job has " +
                         std::to_string(rank.world));
    groups_.push_back(membershipOf(group, rank.rank));
  }
  const uint64_t world = static_cast<uint64_t>(rank.world);
  mappedBytes_ = kHeaderBytes + slotsBytes(world) + world * capacity_;
  const std::string &path = rank.rendezvous;
  const std::string who = "rank " + std::to_string(rank.rank) + ": rendezvous " + path;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(rank.timeoutSeconds);

  int fd = -1;
  if (rank.rank == 0) {
    // Built whole under a temporary name, then renamed into place.
    const std::string temporary = path + ".tmp." + std::to_string(getpid());
    fd = ::open(temporary.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
      throw RuntimeError(who + ": cannot create " + temporary + ": " + std::strerror(errno));
    if (::ftruncate(fd, static_cast<off_t>(mappedBytes_)) != 0) {
      const std::string reason = std::strerror(errno);
      ::close(fd);
      ::unlink(temporary.c_str());
      throw RuntimeError(who + ": cannot size it to " + std::to_string(mappedBytes_) +
                         " bytes: " + reason);
    }
    void *base = ::mmap(nullptr, mappedBytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      ::close(fd);
      ::unlink(temporary.c_str());
      throw RuntimeError(who + ": cannot map it: " + std::strerror(errno));
    }
    shared_ = static_cast<Shared *>(base);
    shared_->header.world = world;
    shared_->header.capacity = capacity_;
    shared_->header.magic.store(kMagic, std::memory_order_release);
    if (std::rename(temporary.c_str(), path.c_str()) != 0) {
      const std::string reason = std::strerror(errno);
      ::unlink(temporary.c_str());
      throw RuntimeError(who + ": cannot rename " + temporary + ": " + reason);
    }
  } else {
    for (;;) {
      fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
      if (fd >= 0)
        break;
      if (std::chrono::steady_clock::now() > deadline)
        throw CollectiveError(who + ": rank 0 did not create it within " +
                              seconds(rank.timeoutSeconds) +
                              " (is rank 0 running, with the same KILN_RENDEZVOUS?)");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    struct stat info {};
    if (::fstat(fd, &info) != 0 || static_cast<uint64_t>(info.st_size) < kHeaderBytes) {
      ::close(fd);
      throw RuntimeError(who + ": not a Kiln collectives file");
    }
    void *base = ::mmap(nullptr, static_cast<size_t>(info.st_size), PROT_READ | PROT_WRITE,
                        MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      ::close(fd);
      throw RuntimeError(who + ": cannot map it: " + std::strerror(errno));
    }
    shared_ = static_cast<Shared *>(base);
    const Header &h = shared_->header;
    if (h.magic.load(std::memory_order_acquire) != kMagic || h.world != world ||
        h.capacity != capacity_ || static_cast<uint64_t>(info.st_size) != mappedBytes_) {
      ::munmap(base, static_cast<size_t>(info.st_size));
      ::close(fd);
      throw RuntimeError(who + ": made by another job (" + std::to_string(h.world) + " ranks, " +
                         std::to_string(h.capacity) +
                         "-byte slots; this rank "
                         "expects " +
                         std::to_string(world) + " and " + std::to_string(capacity_) +
                         "): every rank must run the same artifact with a fresh KILN_RENDEZVOUS");
    }
  }
  ::close(fd);

  RankSlot &mine = rankSlots(shared_)[rank.rank];
  mine.arrived.store(0, std::memory_order_relaxed);
  mine.pid.store(static_cast<int32_t>(getpid()), std::memory_order_relaxed);
  if (mine.state.exchange(Joined, std::memory_order_acq_rel) != Absent)
    fail("joining the job", "another process joined as rank " + std::to_string(rank.rank) +
                                " already (two processes with the same KILN_RANK?)");
  std::vector<int> everyone(static_cast<size_t>(rank.world));
  for (int r = 0; r < rank.world; ++r)
    everyone[static_cast<size_t>(r)] = r;
  barrier(everyone, 0, "joining the job");
  if (rank.rank == 0)
    ::unlink(path.c_str()); // every rank has it mapped; leave nothing behind
}

HostCollectives::~HostCollectives() {
  if (!shared_)
    return;
  rankSlots(shared_)[rank_.rank].state.store(Left, std::memory_order_release);
  ::munmap(shared_, mappedBytes_);
}

const float *HostCollectives::slot(int rank) const {
  const char *base = reinterpret_cast<const char *>(shared_) + kHeaderBytes +
                     slotsBytes(static_cast<uint64_t>(rank_.world));
  return reinterpret_cast<const float *>(base + static_cast<uint64_t>(rank) * capacity_);
}

void HostCollectives::fail(const std::string &what, const std::string &reason) {
  Header &h = shared_->header;
  int32_t expected = 0;
  const std::string message = what + ": " + reason;
  if (h.failed.compare_exchange_strong(expected, rank_.rank + 1, std::memory_order_acq_rel)) {
    const std::string shared = "rank " + std::to_string(rank_.rank) + " failed in " + message;
    std::strncpy(h.reason, shared.c_str(), sizeof(h.reason) - 1);
    h.reason[sizeof(h.reason) - 1] = '\0';
  }
  throw CollectiveError(message);
}

void HostCollectives::barrier(const std::vector<int> &members, uint64_t epoch,
                              const std::string &what) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(rank_.timeoutSeconds);
  auto lastLivenessCheck = start;
  RankSlot *slots = rankSlots(shared_);
  for (uint64_t spins = 0;; ++spins) {
    // A member that arrived and then left (its run is over) has arrived.
    auto arrived = [&](int m) {
      return slots[m].state.load(std::memory_order_acquire) != Absent &&
             slots[m].arrived.load(std::memory_order_acquire) >= epoch;
    };
    bool all = true;
    for (int m : members)
      if (!arrived(m)) {
        all = false;
        break;
      }
    if (all)
      return;
    if (shared_->header.failed.load(std::memory_order_acquire))
      throw CollectiveError(what + ": aborted, because " + std::string(shared_->header.reason));
    const auto now = std::chrono::steady_clock::now();
    if (now - lastLivenessCheck > std::chrono::milliseconds(20)) {
      lastLivenessCheck = now;
      for (int m : members) {
        if (arrived(m))
          continue;
        const int32_t state = slots[m].state.load(std::memory_order_acquire);
        const int32_t pid = slots[m].pid.load(std::memory_order_acquire);
        if (state == Left)
          fail(what, "rank " + std::to_string(m) + " left the job before it");
        if (state == Joined && pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH)
          fail(what, "rank " + std::to_string(m) + " (pid " + std::to_string(pid) + ") died");
      }
      if (now > deadline) {
        std::string late;
        for (int m : members)
          if (!arrived(m))
            late += (late.empty() ? "" : ", ") + std::to_string(m);
        fail(what, "timed out after " + seconds(rank_.timeoutSeconds) + " waiting for rank" +
                       (late.find(',') == std::string::npos ? " " : "s ") + late +
                       " (KILN_COMM_TIMEOUT)");
      }
    }
    if (spins < 256)
      continue;
    if (spins < 4096)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

const GroupMembership &HostCollectives::enter(int group, CommAddress src, uint64_t bytes,
                                              const std::string &what) {
  if (group < 0 || static_cast<size_t>(group) >= groups_.size())
    throw RuntimeError(what + ": no comm group " + std::to_string(group));
  if (bytes > capacity_)
    throw RuntimeError(what + ": " + std::to_string(bytes) + " bytes, past the " +
                       std::to_string(capacity_) + "-byte slots the job was set up with");
  std::memcpy(const_cast<float *>(slot(rank_.rank)), reinterpret_cast<const void *>(src), bytes);
  const GroupMembership &membership = groups_[static_cast<size_t>(group)];
  rankSlots(shared_)[rank_.rank].arrived.store(++epoch_, std::memory_order_release);
  barrier(membership.members, epoch_, what);
  return membership;
}

void HostCollectives::leave(const GroupMembership &membership, const std::string &what) {
  rankSlots(shared_)[rank_.rank].arrived.store(++epoch_, std::memory_order_release);
  barrier(membership.members, epoch_, what);
}

void HostCollectives::allReduce(int group, CommAddress src, CommAddress dst, uint64_t count,
                                const std::string &what) {
  const GroupMembership &g = enter(group, src, count * sizeof(float), what);
  float *out = reinterpret_cast<float *>(dst);
  for (uint64_t i = 0; i < count; ++i) {
    float sum = slot(g.members[0])[i];
    for (size_t m = 1; m < g.members.size(); ++m)
      sum += slot(g.members[m])[i];
    out[i] = sum;
  }
  leave(g, what);
}

void HostCollectives::allGather(int group, CommAddress src, CommAddress dst, uint64_t count,
                                const std::string &what) {
  const GroupMembership &g = enter(group, src, count * sizeof(float), what);
  float *out = reinterpret_cast<float *>(dst);
  for (size_t m = 0; m < g.members.size(); ++m)
    std::memcpy(out + m * count, slot(g.members[m]), count * sizeof(float));
  leave(g, what);
}

void HostCollectives::reduceScatter(int group, CommAddress src, CommAddress dst, uint64_t count,
                                    const std::string &what) {
  const uint64_t members =
      group >= 0 && static_cast<size_t>(group) < groups_.size() ? groups_[group].members.size() : 0;
  const GroupMembership &g = enter(group, src, count * members * sizeof(float), what);
  float *out = reinterpret_cast<float *>(dst);
  const uint64_t first = static_cast<uint64_t>(g.index) * count;
  for (uint64_t i = 0; i < count; ++i) {
    float sum = slot(g.members[0])[first + i];
    for (size_t m = 1; m < g.members.size(); ++m)
      sum += slot(g.members[m])[first + i];
    out[i] = sum;
  }
  leave(g, what);
}

} // namespace kiln
