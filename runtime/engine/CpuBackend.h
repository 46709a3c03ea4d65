// The backend of x86 artifacts: kernels from the artifact's ELF library run
// in this process, on its memory (docs/runtime-abi.md, "Kernels (x86
// target)"). Each buffer argument is a pointer to a memref descriptor, each
// scalar a pointer to an int64_t; a launch of max_parts > 1 runs as
// min(max_parts, threads) parts on the thread pool, each with its own Part
// and Parts scalars. Work runs when issued: synchronize() has nothing to wait
// for.
#pragma once

#include "runtime/cpu/KernelLibrary.h"
#include "runtime/engine/Backend.h"

#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

namespace kiln {

class ThreadPool;

class CpuBackend final : public Backend {
public:
  // Refuses an artifact this machine cannot run (another target kind, a CPU
  // feature it lacks or does not know) and asks Linux for AMX when the
  // kernels need it. Parts run on `pool`, which must outlive the backend.
  static std::unique_ptr<CpuBackend> create(const Artifact &artifact, ThreadPool &pool);

  std::string description() const override;

  DeviceAddress allocate(uint64_t bytes, const std::string &what) override;
  void release(DeviceAddress address) noexcept override;
  DeviceAddress adopt(AlignedBuffer host, const std::string &what) override;
  void upload(DeviceAddress to, const void *from, uint64_t bytes) override;
  void download(void *to, DeviceAddress from, uint64_t bytes) override;
  void fill(DeviceAddress to, uint8_t value, uint64_t bytes) override;
  void copy(DeviceAddress to, DeviceAddress from, uint64_t bytes) override;

  void loadKernels(const Artifact &artifact) override;
  std::unique_ptr<PreparedLaunch> prepare(const LaunchSpec &spec) override;
  void launch(PreparedLaunch &launch, const LaunchCall &call) override;
  void synchronize() override {}
  // Processes of this machine, through shared memory (HostCollectives).
  std::unique_ptr<Collectives> connect(const RankInfo &rank, std::vector<CommGroupSpec> groups,
                                       uint64_t capacityBytes) override;

private:
  explicit CpuBackend(ThreadPool &pool) : pool_(pool) {}

  ThreadPool &pool_;
  std::optional<KernelLibrary> library_;
  std::vector<KernelFn> kernels_;
  std::unordered_map<DeviceAddress, AlignedBuffer> memory_;
};

} // namespace kiln
