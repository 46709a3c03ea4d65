// The collectives a multi-rank artifact's steps run (docs/runtime-abi.md,
// Collective): sums and concatenations of f32 buffers among the ranks of a
// comm group. A backend provides them over its own memory: HostCollectives
// for the CPU (processes of one machine, through shared memory),
// NcclCollectives for CUDA (NCCL on the backend's stream).
//
// Every rank issues the same collectives in the same order (the artifact's
// steps). A collective that cannot complete (a rank died, left or stalls
// past the timeout) throws CollectiveError naming it, on every rank that
// waits for it, within the timeout; nothing hangs.
#pragma once

#include "runtime/cpu/RuntimeError.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

// An address in the backend's memory (Backend.h's DeviceAddress).
using CommAddress = uint64_t;

// A partition of the world into groups of `size` ranks: `ranks` lists every
// rank once, group after group, each group in in-group order.
struct CommGroupSpec {
  std::string name;
  int size = 1;
  std::vector<int> ranks;
};

// Where `rank` sits in a partition: its group's members in order and its
// index among them. Throws RuntimeError when the rank is not listed.
struct GroupMembership {
  std::vector<int> members;
  int index = 0;
};
GroupMembership membershipOf(const CommGroupSpec &group, int rank);

class CollectiveError : public RuntimeError {
public:
  using RuntimeError::RuntimeError;
};

class Collectives {
public:
  virtual ~Collectives() = default;

  // `what` names the collective in errors ("all_reduce for
  // 'model.layers.0.self_attn.o_proj' (entry point 'decode', steps[14])").
  // dst[i] = sum over the group of src[i], i < count; the sum runs in
  // in-group order, so every member gets the same bits.
  virtual void allReduce(int group, CommAddress src, CommAddress dst, uint64_t count,
                         const std::string &what) = 0;
  // dst = the members' src, each `count` floats, concatenated in group order.
  virtual void allGather(int group, CommAddress src, CommAddress dst, uint64_t count,
                         const std::string &what) = 0;
  // dst = piece `index` (of `count` floats) of the sum of the members' src.
  virtual void reduceScatter(int group, CommAddress src, CommAddress dst, uint64_t count,
                             const std::string &what) = 0;
};

} // namespace kiln
