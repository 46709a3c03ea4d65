// NCCL, loaded at run time: libnccl.so.2 is dlopen'ed (KILN_NCCL_LIBRARY
// names another file) and the entry points the runtime uses are resolved by
// name, so the runtime builds without NCCL and loads it only for multi-rank
// artifacts on NVIDIA GPUs. The types are nccl.h's, declared here by layout
// (test/unit/runtime_cuda checks them against nccl.h where it is installed).
#pragma once

#include "runtime/cpu/RuntimeError.h"

#include <memory>
#include <string>

namespace kiln::cuda {

using ncclResult_t = int;
struct ncclComm;
using ncclComm_t = ncclComm *;
constexpr int kNcclUniqueIdBytes = 128;
struct ncclUniqueId {
  char internal[kNcclUniqueIdBytes];
};
constexpr ncclResult_t kNcclSuccess = 0;
constexpr ncclResult_t kNcclInProgress = 7;
constexpr int kNcclFloat32 = 7; // ncclDataType_t
constexpr int kNcclSum = 0;     // ncclRedOp_t

struct NcclApi {
  ncclResult_t (*ncclGetVersion)(int *version);
  ncclResult_t (*ncclGetUniqueId)(ncclUniqueId *id);
  ncclResult_t (*ncclCommInitRank)(ncclComm_t *comm, int ranks, ncclUniqueId id, int rank);
  // Null before NCCL 2.18: sub-groups then need their own ids.
  ncclResult_t (*ncclCommSplit)(ncclComm_t comm, int color, int key, ncclComm_t *split,
                                void *config);
  ncclResult_t (*ncclCommAbort)(ncclComm_t comm);
  ncclResult_t (*ncclCommDestroy)(ncclComm_t comm);
  ncclResult_t (*ncclCommGetAsyncError)(ncclComm_t comm, ncclResult_t *error);
  const char *(*ncclGetErrorString)(ncclResult_t result);
  ncclResult_t (*ncclAllReduce)(const void *src, void *dst, size_t count, int type, int op,
                                ncclComm_t comm, void *stream);
  ncclResult_t (*ncclAllGather)(const void *src, void *dst, size_t count, int type, ncclComm_t comm,
                                void *stream);
  ncclResult_t (*ncclReduceScatter)(const void *src, void *dst, size_t count, int type, int op,
                                    ncclComm_t comm, void *stream);
};

class NcclLibrary {
public:
  static constexpr const char *kLibrary = "libnccl.so.2";
  // Loads `library` once per process (KILN_NCCL_LIBRARY when set); throws
  // RuntimeError naming what is missing.
  static std::shared_ptr<const NcclLibrary> load();
  ~NcclLibrary();

  const NcclApi &api() const { return api_; }
  // "2.28.3"
  std::string version() const;
  // "ncclAllReduce: unhandled system error (run with NCCL_DEBUG=WARN for details)"
  std::string describe(const char *call, ncclResult_t result) const;

private:
  NcclLibrary() = default;
  void *handle_ = nullptr;
  int version_ = 0;
  NcclApi api_{};
};

} // namespace kiln::cuda
