// The backend of GPU artifacts, NVIDIA's (nvptx) and AMD's (amdgcn), over a
// vendor's DriverTable (docs/runtime-abi.md, "Kernels").
//
// The artifact's kernel library is loaded as one module and every kernel
// resolved. Memory is the device's; all work goes, in order, to one
// non-blocking stream: uploads, fills, launches (MLIR's expanded-descriptor
// parameters, KernelParams.h) and device-to-device copies. Recording captures
// that stream into a graph (GpuGraph.h).
//
// Every vendor error is a RuntimeError naming the call, the error, and for a
// launch its step, kernel and op; after one the backend refuses all further
// work, because the context may be unusable (CUDA errors are sticky; an AMD
// GPU's fault usually ends the process). With the vendor's launch-blocking
// variable (CUDA_LAUNCH_BLOCKING=1, HIP_LAUNCH_BLOCKING=1) nothing is
// recorded, so that a kernel's fault is reported by its own launch.
//
// Multi-rank artifacts connect the vendor's collectives (NCCL), which mark
// each collective with an event: while they are connected, synchronize()
// waits by polling, and a collective not done within the timeout, or one the
// library reports failed, aborts the communicators and throws a
// CollectiveError naming the first such collective.
#pragma once

#include "runtime/engine/Backend.h"
#include "runtime/gpu/DriverTable.h"

#include <memory>
#include <string>
#include <vector>

namespace kiln::gpu {

struct CapturedLaunch;
class Watchdog;

// A collective on the stream, marked by an event recorded after it.
struct CollectiveMark {
  Event event = nullptr;
  std::string what;
  bool recorded = false; // the event belongs to a graph
};

// What the watchdog asks of the collectives it watches.
class WatchedCollectives {
public:
  virtual ~WatchedCollectives() = default;
  virtual double timeoutSeconds() const = 0;
  // The library's asynchronous error, empty while there is none.
  virtual std::string asyncError() const = 0;
  // Aborts the communicators; run on a thread of its own.
  virtual std::function<void()> abortTask() = 0;
};

class GpuBackend final : public Backend {
public:
  // Takes the vendor's table of an opened device; `source` names the
  // artifact in messages. Creates the stream.
  GpuBackend(std::unique_ptr<DriverTable> table, std::string source);
  ~GpuBackend() override;

  std::string description() const override {
    return table_->device().description + (programmatic_ ? ", programmatic launches" : "");
  }

  DeviceAddress allocate(uint64_t bytes, const std::string &what) override;
  void release(DeviceAddress address) noexcept override;
  void upload(DeviceAddress to, const void *from, uint64_t bytes) override;
  void download(void *to, DeviceAddress from, uint64_t bytes) override;
  void fill(DeviceAddress to, uint8_t value, uint64_t bytes) override;
  void copy(DeviceAddress to, DeviceAddress from, uint64_t bytes) override;
  void copy2D(DeviceAddress to, uint64_t toPitch, DeviceAddress from, uint64_t fromPitch,
              uint64_t width, uint64_t rows) override;

  std::unique_ptr<Collectives> connect(const RankInfo &rank, std::vector<CommGroupSpec> groups,
                                       uint64_t capacityBytes) override;
  // The collectives call these: after each collective they issue, and as
  // they go.
  void markCollective(const std::string &what);
  void watch(WatchedCollectives *collectives) { watched_ = collectives; }
  void forget(const WatchedCollectives *collectives);
  // A recording's collectives, in flight again when it is replayed.
  void replayedCollectives(const std::vector<CollectiveMark> &marks);

  // Through IPC: this rank's handle goes to the group by an all-gather; the
  // others' are opened with peer access enabled.
  std::vector<DeviceAddress> sharePeerMemory(Collectives &comm, int group, int index, int size,
                                             DeviceAddress local, uint64_t bytes,
                                             const std::string &what) override;

  // Kernels whose dynamic shared memory (Kernel.shared_bytes) and static
  // shared memory exceed the device's default are allowed it, within the
  // device's limit.
  void loadKernels(const Artifact &artifact) override;
  // Also allocates the device memory of the launch's tensor maps.
  std::unique_ptr<PreparedLaunch> prepare(const LaunchSpec &spec) override;
  void launch(PreparedLaunch &launch, const LaunchCall &call) override;
  void synchronize() override;

  // Encodes the tensor maps of `launch` (one of this backend's) whose
  // buffer's address or sizes differ in `call` from the ones they were last
  // encoded from, and uploads them on the stream, ahead of the launch. While
  // recording, a change is an error: a graph replays the map's address.
  void refreshTensorMaps(PreparedLaunch &launch, const LaunchCall &call);
  // The grid `call` runs `launch` with: the call's, kept to the blocks
  // resident at once for a persistent kernel.
  static unsigned gridOf(const PreparedLaunch &launch, const LaunchCall &call);

  // Events on the stream (the host's clock where the vendor has none).
  std::unique_ptr<StepClock> clock() override;

  bool canRecord() const override;
  std::unique_ptr<Recording> record(const std::function<void()> &steps) override;

  DriverTable &table() const { return *table_; }
  Stream stream() const { return stream_; }
  const std::string &source() const { return source_; }
  // After a collective failed: the stream holds collective kernels that wait
  // for a peer that is gone. Nothing is waited for or freed from then on
  // (freeing would wait for them); the process is expected to exit.
  bool abandoned() const { return abandoned_; }

  // Makes the device current on this thread; throws when an earlier error
  // stopped the backend.
  void enter();
  // Throws "<context>: <call>: <error>" unless `result` is success, and
  // stops the backend: every later call refuses.
  void check(CallResult result, const std::string &context = std::string());

private:
  // The dynamic shared memory `function` may have from now on.
  unsigned allowSharedBytes(Function function, const std::string &name, unsigned bytes);
  void prepareTensorMaps(PreparedLaunch &launch, const LaunchSpec &spec);
  // Polls the stream until its work is done; see the file comment.
  void watchCollectives();

  std::unique_ptr<DriverTable> table_;
  std::string source_; // the artifact, for messages
  Stream stream_ = nullptr;
  Module module_ = nullptr;
  struct LoadedKernel {
    Function function = nullptr;
    std::string name;
    // Its blocks wait for each other (tiling "persistent"): the grid is
    // kept to the blocks resident at once.
    bool persistent = false;
    // It exchanges through peer memory (tiling "exchange": "peer").
    bool exchanges = false;
    // The most dynamic shared memory its launches may ask for.
    unsigned sharedLimit = 0;
  };
  std::vector<LoadedKernel> kernels_;
  // Kernels launched with programmatic stream serialization (loadKernels).
  bool programmatic_ = false;
  // Other ranks' memory opened through IPC, closed as the backend goes.
  std::vector<DeviceAddress> peerMemory_;
  // Set by the first error; every later call refuses with it.
  std::string stopped_;
  // While recording: the launches and collectives captured so far.
  std::vector<CapturedLaunch> *capture_ = nullptr;
  std::vector<CollectiveMark> *captureMarks_ = nullptr;
  // Multi-rank: the collectives watched, those in flight (since the last
  // synchronize), and events to reuse.
  WatchedCollectives *watched_ = nullptr;
  bool abandoned_ = false;
  std::vector<CollectiveMark> inFlight_;
  std::vector<Event> spareEvents_;
};

} // namespace kiln::gpu
