// The CUDA driver table's collectives: NCCL on the backend's stream, one
// communicator per comm group. Rank 0 publishes the NCCL unique id at the
// rendezvous path; the world communicator is split into the groups
// (ncclCommSplit). Each collective is followed by an event on the stream
// (GpuBackend::markCollective), so that the backend's watchdog, which waits
// for the stream by polling, can name the first collective that did not
// finish within the timeout, or that NCCL reports failed, and abort every
// communicator instead of hanging (runtime/comm/Collectives.h).
#pragma once

#include "runtime/comm/Collectives.h"
#include "runtime/comm/RankInfo.h"
#include "runtime/cuda/NcclLibrary.h"
#include "runtime/gpu/GpuBackend.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kiln::cuda {

class NcclCollectives final : public Collectives, public gpu::WatchedCollectives {
public:
  // Joins the job: the world communicator, its splits, and one small
  // all-reduce on each (NCCL connects lazily; it should while every rank is
  // alive). `backend` must outlive this.
  NcclCollectives(gpu::GpuBackend &backend, const RankInfo &rank,
                  std::vector<CommGroupSpec> groups);
  ~NcclCollectives() override;

  void allReduce(int group, CommAddress src, CommAddress dst, uint64_t count,
                 const std::string &what) override;
  void allGather(int group, CommAddress src, CommAddress dst, uint64_t count,
                 const std::string &what) override;
  void reduceScatter(int group, CommAddress src, CommAddress dst, uint64_t count,
                     const std::string &what) override;

  // An error NCCL reports on any communicator (a peer failed), or empty.
  std::string asyncError() const override;
  // Aborts every communicator (kernels waiting for a dead peer return), as
  // a task that holds what it needs: it may outlive this object. The
  // communicators are not destroyed afterwards.
  std::function<void()> abortTask() override;
  double timeoutSeconds() const override { return rank_.timeoutSeconds; }
  std::string describe() const;

private:
  ncclComm_t comm(int group, const std::string &what) const;
  void check(ncclResult_t result, const char *call, const std::string &what);

  gpu::GpuBackend &backend_;
  std::shared_ptr<const NcclLibrary> nccl_;
  RankInfo rank_;
  ncclComm_t world_ = nullptr;
  std::vector<ncclComm_t> comms_; // per group; world_ where the group is the world
  std::vector<ncclComm_t> owned_; // split communicators
  bool aborted_ = false;
};

} // namespace kiln::cuda
