#include "runtime/cuda/NcclCollectives.h"

#include "runtime/comm/Rendezvous.h"

#include <cstdio>
#include <cstring>

namespace kiln::cuda {

NcclCollectives::NcclCollectives(gpu::GpuBackend &backend, const RankInfo &rank,
                                 std::vector<CommGroupSpec> groups)
    : backend_(backend), nccl_(NcclLibrary::load()), rank_(rank) {
  const NcclApi &api = nccl_->api();
  const std::string joining = "rank " + std::to_string(rank.rank) + ": joining the NCCL job";
  ncclUniqueId id{};
  if (rank.rank == 0) {
    check(api.ncclGetUniqueId(&id), "ncclGetUniqueId", joining);
    publishRendezvous(rank.rendezvous, std::string(id.internal, sizeof(id.internal)));
  } else {
    const std::string bytes = awaitRendezvous(rank.rendezvous, rank.timeoutSeconds, rank.rank);
    if (bytes.size() != sizeof(id.internal))
      throw RuntimeError(joining + ": the rendezvous " + rank.rendezvous + " holds " +
                         std::to_string(bytes.size()) + " bytes, not an NCCL unique id (" +
                         std::to_string(sizeof(id.internal)) + ")");
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }
  backend_.enter();
  check(api.ncclCommInitRank(&world_, rank.world, id, rank.rank), "ncclCommInitRank", joining);
  if (rank.rank == 0)
    std::remove(rank.rendezvous.c_str()); // every rank has joined

  for (const CommGroupSpec &group : groups) {
    bool whole = group.size == rank.world;
    for (int r = 0; whole && r < rank.world; ++r)
      whole = group.ranks[static_cast<size_t>(r)] == r;
    if (whole) {
      comms_.push_back(world_);
      continue;
    }
    if (!api.ncclCommSplit)
      throw RuntimeError(joining + ": comm group '" + group.name + "' needs ncclCommSplit (NCCL " +
                         "2.18 or newer; this is " + nccl_->version() + ")");
    // Every rank calls the split: color = its group, key = its place in it.
    int at = 0;
    while (group.ranks[static_cast<size_t>(at)] != rank.rank)
      ++at;
    ncclComm_t split = nullptr;
    check(api.ncclCommSplit(world_, at / group.size, at % group.size, &split, nullptr),
          "ncclCommSplit", joining + " (comm group '" + group.name + "')");
    owned_.push_back(split);
    comms_.push_back(split);
  }
  // One float through every communicator, so that NCCL connects now.
  DeviceMemory probe = DeviceMemory::allocate(backend_, 64, "NCCL connection probe");
  for (size_t g = 0; g < comms_.size(); ++g)
    allReduce(static_cast<int>(g), probe.address(), probe.address(), 1,
              joining + ": connecting comm group " + std::to_string(g));
  backend_.synchronize();
  backend_.watch(this);
}

NcclCollectives::~NcclCollectives() {
  const NcclApi &api = nccl_->api();
  backend_.forget(this);
  if (aborted_ || backend_.abandoned())
    return; // the abort task owns the communicators now
  try {
    backend_.enter();
  } catch (const RuntimeError &) {
    return; // the backend stopped on an error: nothing is waited for
  }
  for (ncclComm_t c : owned_)
    api.ncclCommDestroy(c);
  if (world_)
    api.ncclCommDestroy(world_);
}

std::string NcclCollectives::describe() const {
  return "NCCL " + nccl_->version() + ", rank " + std::to_string(rank_.rank) + " of " +
         std::to_string(rank_.world);
}

void NcclCollectives::check(ncclResult_t result, const char *call, const std::string &what) {
  if (result != kNcclSuccess && result != kNcclInProgress)
    throw CollectiveError(what + ": " + nccl_->describe(call, result));
}

ncclComm_t NcclCollectives::comm(int group, const std::string &what) const {
  if (group < 0 || static_cast<size_t>(group) >= comms_.size())
    throw RuntimeError(what + ": no comm group " + std::to_string(group));
  return comms_[static_cast<size_t>(group)];
}

void NcclCollectives::allReduce(int group, CommAddress src, CommAddress dst, uint64_t count,
                                const std::string &what) {
  backend_.enter();
  check(nccl_->api().ncclAllReduce(reinterpret_cast<const void *>(src),
                                   reinterpret_cast<void *>(dst), count, kNcclFloat32, kNcclSum,
                                   comm(group, what), backend_.stream()),
        "ncclAllReduce", what);
  backend_.markCollective(what);
}

void NcclCollectives::allGather(int group, CommAddress src, CommAddress dst, uint64_t count,
                                const std::string &what) {
  backend_.enter();
  check(nccl_->api().ncclAllGather(reinterpret_cast<const void *>(src),
                                   reinterpret_cast<void *>(dst), count, kNcclFloat32,
                                   comm(group, what), backend_.stream()),
        "ncclAllGather", what);
  backend_.markCollective(what);
}

void NcclCollectives::reduceScatter(int group, CommAddress src, CommAddress dst, uint64_t count,
                                    const std::string &what) {
  backend_.enter();
  check(nccl_->api().ncclReduceScatter(reinterpret_cast<const void *>(src),
                                       reinterpret_cast<void *>(dst), count, kNcclFloat32, kNcclSum,
                                       comm(group, what), backend_.stream()),
        "ncclReduceScatter", what);
  backend_.markCollective(what);
}

std::string NcclCollectives::asyncError() const {
  const NcclApi &api = nccl_->api();
  std::vector<ncclComm_t> all = owned_;
  all.push_back(world_);
  for (ncclComm_t c : all) {
    ncclResult_t error = kNcclSuccess;
    if (c && api.ncclCommGetAsyncError(c, &error) == kNcclSuccess && error != kNcclSuccess &&
        error != kNcclInProgress)
      return nccl_->describe("ncclCommGetAsyncError", error);
  }
  return std::string();
}

std::function<void()> NcclCollectives::abortTask() {
  aborted_ = true;
  std::vector<ncclComm_t> comms = owned_;
  if (world_)
    comms.push_back(world_);
  owned_.clear();
  world_ = nullptr;
  return [nccl = nccl_, comms] {
    for (ncclComm_t c : comms)
      nccl->api().ncclCommAbort(c);
  };
}

} // namespace kiln::cuda
