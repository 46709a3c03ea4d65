// The backend of nvptx artifacts: PTX kernels on an NVIDIA GPU through the
// CUDA driver API (docs/runtime-abi.md, "Kernels (nvptx target)").
//
// The artifact's PTX module is loaded with cuModuleLoadDataEx (the driver
// compiles it; its error log is part of any failure) and every kernel
// resolved. Memory is device memory from cuMemAlloc; all work goes, in order,
// to one non-blocking stream of the device's primary context: uploads, fills,
// launches (MLIR's expanded-descriptor parameters, KernelParams.h) and
// device-to-device copies. Recording captures that stream into a CUDA graph
// (CudaGraph.h).
//
// Every CUDA error is a RuntimeError naming the call, the error, and for a
// launch its step, kernel and op; after one the backend refuses all further
// work, because the context may be unusable (CUDA errors are sticky). With
// CUDA_LAUNCH_BLOCKING=1 in the environment nothing is recorded, so that a
// kernel's fault is reported by its own launch.
#pragma once

#include "runtime/cuda/CudaDriver.h"
#include "runtime/engine/Backend.h"

#include <memory>
#include <string>
#include <vector>

namespace kiln {

// The backend for `artifact` on CUDA device `device`, with its kernels not
// yet loaded. Checks, in order: the nvptx rules (checkNvptxArtifact), the
// driver (`driverLibrary`; the default is loaded once per process), the
// device, and the target chip against the device's compute capability.
// Throws RuntimeError with a one-line reason: "<source>: no CUDA driver
// (libcuda.so.1): this artifact is for nvptx sm_90", "<source>: artifact is
// for nvptx sm_100a, which this machine cannot run: device 0 (NVIDIA H200) has
// compute capability 9.0; sm_100a needs compute capability 10.0 exactly
// (arch-specific PTX)".
std::unique_ptr<Backend>
createCudaBackend(const Artifact &artifact, int device,
                  const std::string &driverLibrary = cuda::CudaDriver::kLibrary);

namespace cuda {

struct CapturedLaunch;
class NcclCollectives;

// The grid `call` runs `launch` (a CudaBackend's) with: the call's, kept to
// the blocks resident at once for a persistent kernel.
unsigned launchGrid(const PreparedLaunch &launch, const LaunchCall &call);

// A collective on the stream, marked by an event recorded after it.
struct CollectiveMark {
  CUevent event = nullptr;
  std::string what;
  bool recorded = false; // the event belongs to a CUDA graph
};

// What the backend knows of its device.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int major = 0, minor = 0; // compute capability
  int maxThreadsPerBlock = 0;
  int maxGridX = 0;
  uint64_t memoryBytes = 0;
};

class CudaBackend final : public Backend {
public:
  static std::unique_ptr<CudaBackend>
  create(const Artifact &artifact, int device,
         const std::string &driverLibrary = CudaDriver::kLibrary);
  ~CudaBackend() override;

  std::string description() const override;

  DeviceAddress allocate(uint64_t bytes, const std::string &what) override;
  void release(DeviceAddress address) noexcept override;
  void upload(DeviceAddress to, const void *from, uint64_t bytes) override;
  void download(void *to, DeviceAddress from, uint64_t bytes) override;
  void fill(DeviceAddress to, uint8_t value, uint64_t bytes) override;
  void copy(DeviceAddress to, DeviceAddress from, uint64_t bytes) override;
  void copy2D(DeviceAddress to, uint64_t toPitch, DeviceAddress from, uint64_t fromPitch,
              uint64_t width, uint64_t rows) override;

  // NCCL (NcclCollectives). While it is connected, synchronize() waits for
  // the stream by polling: a collective not done within the timeout, or
  // one NCCL reports failed, aborts the communicators and throws a
  // CollectiveError naming the first such collective.
  std::unique_ptr<Collectives> connect(const RankInfo &rank, std::vector<CommGroupSpec> groups,
                                       uint64_t capacityBytes) override;
  // Called by NcclCollectives after it issues a collective.
  void markCollective(const std::string &what);
  // Called as `collectives` goes.
  void forgetCollectives(const NcclCollectives *collectives);
  // A recording's collectives, in flight again when it is replayed.
  void replayedCollectives(const std::vector<CollectiveMark> &marks);

  // Through CUDA IPC: this rank's handle goes to the group by an
  // all-gather; the others' are opened with peer access enabled.
  std::vector<DeviceAddress> sharePeerMemory(Collectives &comm, int group, int index, int size,
                                             DeviceAddress local, uint64_t bytes,
                                             const std::string &what) override;

  // Kernels whose dynamic shared memory (Kernel.shared_bytes) and static
  // shared memory exceed 48 KiB are allowed it (cuFuncSetAttribute) within
  // the device's opt-in limit.
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

  // CUDA events on the backend's stream (the host's clock if the driver
  // lacks them).
  std::unique_ptr<StepClock> clock() override;

  bool canRecord() const override;
  std::unique_ptr<Recording> record(const std::function<void()> &steps) override;

  const DeviceInfo &device() const { return device_; }
  // After a collective failed: the stream holds NCCL kernels that wait for a
  // peer that is gone. Nothing is waited for or freed from then on (freeing
  // would wait for them); the process is expected to exit.
  bool abandoned() const { return abandoned_; }
  const CudaDriver &driver() const { return *driver_; }
  CUstream stream() const { return stream_; }

  // Makes the backend's context current on this thread; throws when an
  // earlier error stopped the backend.
  void enter();
  // Throws "<context>: <call>: <error>" unless `result` is success, and
  // stops the backend: every later call refuses.
  void check(CUresult result, std::string_view call, const std::string &context = std::string());

private:
  CudaBackend(std::shared_ptr<const CudaDriver> driver, std::string source)
      : driver_(std::move(driver)), source_(std::move(source)) {}
  void openDevice(int ordinal);
  void openContext();
  // The dynamic shared memory `function` may have from now on: 48 KiB, or
  // `bytes` when it needs more (opted in).
  unsigned allowSharedBytes(CUfunction function, const std::string &name, unsigned bytes);
  // The device memory of a prepared launch's tensor maps, and where its
  // TensorMap scalars point.
  void prepareTensorMaps(PreparedLaunch &launch, const LaunchSpec &spec);
  CUgraphNode capturedNode();
  // Polls the stream until its work is done; see connect().
  void watchCollectives();

  std::shared_ptr<const CudaDriver> driver_;
  std::string source_; // the artifact, for messages
  DeviceInfo device_;
  CUdevice handle_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  CUmodule module_ = nullptr;
  std::vector<CUfunction> functions_;
  std::vector<std::string> kernelNames_;
  // Kernels whose blocks wait for each other (tiling "persistent"): their
  // grid is kept to the blocks that are resident at once.
  std::vector<bool> persistent_;
  // Kernels that exchange through peer memory (tiling "exchange": "peer").
  std::vector<bool> exchanges_;
  // The most dynamic shared memory each kernel's launches may ask for.
  std::vector<unsigned> sharedLimits_;
  // Other ranks' memory opened through IPC, closed as the backend goes.
  std::vector<CUdeviceptr> peerMemory_;
  // Set by the first error; every later call refuses with it.
  std::string stopped_;
  // While recording: the launches captured so far.
  std::vector<CapturedLaunch> *capture_ = nullptr;
  // Multi-rank: the collectives, those in flight (since the last
  // synchronize), events to reuse, and while recording the marks captured.
  NcclCollectives *nccl_ = nullptr;
  bool abandoned_ = false;
  std::vector<CollectiveMark> inFlight_;
  std::vector<CUevent> spareEvents_;
  std::vector<CollectiveMark> *captureMarks_ = nullptr;
};

} // namespace cuda
} // namespace kiln
