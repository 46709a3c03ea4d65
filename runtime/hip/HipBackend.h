// The backend of amdgcn artifacts: code objects (hsaco) on an AMD GPU through
// the HIP runtime (docs/runtime-abi.md, "Kernels (amdgcn target)").
//
// The artifact's code object is loaded with hipModuleLoadData and every
// kernel resolved. Memory is device memory from hipMalloc; all work goes, in
// order, to one non-blocking stream of the device: uploads, fills, launches
// (the same expanded-descriptor parameters as on NVIDIA GPUs, packed by
// runtime/cuda/KernelParams.h) and device-to-device copies. Recording
// captures that stream into a HIP graph (HipGraph.h). Blocks are whatever
// the artifact says (1..1024 threads); the device runs them as wavefronts of
// 64. A launch's dynamic shared memory (LaunchSpec::sharedBytes; artifacts
// give it to nvptx kernels only so far) is its dynamic LDS; TensorMap
// scalars, CUDA's, are refused.
//
// Every HIP error is a RuntimeError naming the call, the error, and for a
// launch its step, kernel and op; after one the backend refuses all further
// work. A kernel's memory fault is, on AMD GPUs, usually fatal to the process
// (the HSA runtime aborts it) rather than an error the engine can report.
// With HIP_LAUNCH_BLOCKING=1 in the environment nothing is recorded.
//
// Written against HIP 5.2's API (Debian's libamdhip64-dev) and tested
// without a device (test/unit/runtime_hip/, with a stand-in runtime); it has
// not yet run on an AMD GPU.
#pragma once

#include "runtime/cuda/KernelParams.h"
#include "runtime/engine/Backend.h"
#include "runtime/hip/HipDriver.h"

#include <memory>
#include <string>
#include <vector>

namespace kiln {

// The backend for `artifact` on HIP device `device`, with its kernels not yet
// loaded. Checks, in order: the amdgcn rules (checkAmdgcnArtifact), the HIP
// runtime (`library`; the default is loaded once per process) and its
// devices, and the target chip against the device's gcnArchName. Throws
// RuntimeError with a one-line reason: "<source>: no HIP runtime
// (libamdhip64.so): this artifact is for amdgcn gfx950", "<source>: artifact
// is for amdgcn gfx950, which this machine cannot run: device 0 (AMD Instinct
// MI300X) is gfx942:sramecc+:xnack-; gfx950 code runs only on gfx950
// devices".
std::unique_ptr<Backend> createHipBackend(const Artifact &artifact, int device,
                                          const std::string &library = hip::HipDriver::kLibrary);

namespace hip {

struct CapturedLaunch;

// What the backend knows of its device.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;        // "AMD Instinct MI300X"
  std::string gcnArchName; // "gfx942:sramecc+:xnack-"
  int computeUnits = 0;
  int warpSize = 0;
  int maxThreadsPerBlock = 0;
  int maxGridX = 0;
  uint64_t memoryBytes = 0;
  uint64_t sharedBytesPerBlock = 0; // LDS a workgroup may have
};

// A launch the backend prepared: its kernel, block and the storage of its
// parameters. The parameters are those of every GPU target, packed by
// cuda::KernelParams.
class HipLaunch final : public PreparedLaunch {
public:
  HipLaunch(hipFunction_t kernel, unsigned threads, std::string step, const LaunchSpec &spec);

  // Packs `call`'s arguments and returns the kernelParams array
  // hipModuleLaunchKernel takes: one pointer per parameter, to its 8 bytes.
  // Valid until the next call.
  void **arguments(const LaunchCall &call);

  hipFunction_t function;
  unsigned block;
  unsigned sharedBytes; // dynamic LDS of every call (Kernel.shared_bytes)
  std::string where;
  cuda::KernelParams params;
};

class HipBackend final : public Backend {
public:
  static std::unique_ptr<HipBackend> create(const Artifact &artifact, int device,
                                            const std::string &library = HipDriver::kLibrary);
  ~HipBackend() override;

  std::string description() const override;

  DeviceAddress allocate(uint64_t bytes, const std::string &what) override;
  void release(DeviceAddress address) noexcept override;
  // Returns once `from` has been read (HIP may read pageable host memory
  // after an asynchronous copy returns).
  void upload(DeviceAddress to, const void *from, uint64_t bytes) override;
  void download(void *to, DeviceAddress from, uint64_t bytes) override;
  void fill(DeviceAddress to, uint8_t value, uint64_t bytes) override;
  void copy(DeviceAddress to, DeviceAddress from, uint64_t bytes) override;

  void loadKernels(const Artifact &artifact) override;
  std::unique_ptr<PreparedLaunch> prepare(const LaunchSpec &spec) override;
  void launch(PreparedLaunch &launch, const LaunchCall &call) override;
  void synchronize() override;

  bool canRecord() const override;
  std::unique_ptr<Recording> record(const std::function<void()> &steps) override;

  const DeviceInfo &device() const { return device_; }
  const HipDriver &driver() const { return *driver_; }
  hipStream_t stream() const { return stream_; }

  // Makes the backend's device current on this thread; throws when an
  // earlier error stopped the backend.
  void enter();
  // Throws "<context>: <call>: <error>" unless `result` is success, and
  // stops the backend: every later call refuses.
  void check(hipError_t result, std::string_view call, const std::string &context = std::string());

private:
  HipBackend(std::shared_ptr<const HipDriver> driver, std::string source)
      : driver_(std::move(driver)), source_(std::move(source)) {}
  void openDevice(int ordinal);
  hipGraphNode_t capturedNode();

  std::shared_ptr<const HipDriver> driver_;
  std::string source_; // the artifact, for messages
  DeviceInfo device_;
  hipStream_t stream_ = nullptr;
  hipModule_t module_ = nullptr;
  std::vector<hipFunction_t> functions_;
  // Set by the first error; every later call refuses with it.
  std::string stopped_;
  // While recording: the launches captured so far.
  std::vector<CapturedLaunch> *capture_ = nullptr;
};

} // namespace hip
} // namespace kiln
