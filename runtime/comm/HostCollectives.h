// Collectives among processes of one machine through a shared memory file:
// the CPU backend's (x86 artifacts under kiln-run --nproc N). Rank 0 creates
// the file at the rendezvous path; every rank maps it. Each rank owns a data
// slot and an arrival counter: a collective copies its input into its slot,
// waits for its group at a barrier, computes its result from the members'
// slots (sums in group order: every member gets the same bits), and waits at
// a second barrier before a slot may be reused.
//
// A barrier fails, on every rank that waits at it, when a member's process
// is gone, a member left (destroyed its HostCollectives, say after an error),
// another rank failed, or the timeout passes; the first failure is written
// into the file for the others to report.
#pragma once

#include "runtime/comm/Collectives.h"
#include "runtime/comm/RankInfo.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace kiln {

class HostCollectives final : public Collectives {
public:
  // Joins the job: waits (up to the timeout) until every rank has mapped
  // the file. `capacityBytes` bounds the input of any one collective; every
  // rank must pass the same value and groups.
  HostCollectives(const RankInfo &rank, std::vector<CommGroupSpec> groups, uint64_t capacityBytes);
  ~HostCollectives() override;
  HostCollectives(const HostCollectives &) = delete;
  HostCollectives &operator=(const HostCollectives &) = delete;

  void allReduce(int group, CommAddress src, CommAddress dst, uint64_t count,
                 const std::string &what) override;
  void allGather(int group, CommAddress src, CommAddress dst, uint64_t count,
                 const std::string &what) override;
  void reduceScatter(int group, CommAddress src, CommAddress dst, uint64_t count,
                     const std::string &what) override;

private:
  struct Shared;
  // Copies `bytes` of `src` into this rank's slot and waits for the group.
  const GroupMembership &enter(int group, CommAddress src, uint64_t bytes, const std::string &what);
  // Waits until the group has read the slots.
  void leave(const GroupMembership &members, const std::string &what);
  // Waits until every member's arrival count reaches `epoch`.
  void barrier(const std::vector<int> &members, uint64_t epoch, const std::string &what);
  [[noreturn]] void fail(const std::string &what, const std::string &reason);
  const float *slot(int rank) const;

  RankInfo rank_;
  std::vector<GroupMembership> groups_;
  uint64_t capacity_ = 0;
  uint64_t epoch_ = 0;
  Shared *shared_ = nullptr;
  uint64_t mappedBytes_ = 0;
};

} // namespace kiln
