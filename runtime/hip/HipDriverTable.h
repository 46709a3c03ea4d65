// The HIP runtime as a GPU driver table (runtime/gpu/DriverTable.h): amdgcn
// artifacts run by GpuBackend on an AMD GPU (docs/runtime-abi.md, "Kernels
// (amdgcn target)").
//
// The code object (hsaco) is loaded with hipModuleLoadData. Blocks are
// whatever the artifact says (1..1024 threads); the device runs them as
// wavefronts of 64. A launch's dynamic shared memory is its dynamic LDS;
// tensor maps, CUDA's, are refused. Uploads return once the host memory has
// been read (HIP may read pageable memory after an asynchronous copy
// returns). A kernel's memory fault is, on AMD GPUs, usually fatal to the
// process (the HSA runtime aborts it) rather than an error the engine can
// report. HIP's events, occupancy, IPC and RCCL are not used yet: step clocks
// use the host's clock, and multi-rank amdgcn artifacts are refused.
//
// Written against HIP 5.2's API (Debian's libamdhip64-dev) and tested
// without a device (test/unit/runtime_hip/, with a stand-in runtime); it has
// not yet run on an AMD GPU.
#pragma once

#include "runtime/gpu/GpuBackend.h"
#include "runtime/hip/HipDriver.h"

#include <memory>
#include <string>

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
std::unique_ptr<gpu::GpuBackend>
createHipBackend(const Artifact &artifact, int device,
                 const std::string &library = hip::HipDriver::kLibrary);

namespace hip {

class HipDriverTable final : public gpu::DriverTable {
public:
  // Opens device `ordinal` (checked against the runtime's count by the
  // caller) and reads its properties; `source` names the artifact in
  // messages.
  HipDriverTable(std::shared_ptr<const HipDriver> driver, int ordinal, const std::string &source);

  const HipDriver &driver() const { return *driver_; }
  const std::string &gcnArchName() const { return gcnArchName_; }
  int warpSize() const { return warpSize_; }

  const char *vendor() const override { return "HIP"; }
  const char *launchBlockingVariable() const override { return "HIP_LAUNCH_BLOCKING"; }
  const char *libraryKind() const override { return "the code object"; }
  const char *threadLimitReason() const override { return "its amdgpu-flat-work-group-size"; }
  [[noreturn]] void fail(gpu::CallResult result, const std::string &context) const override;

  gpu::CallResult makeCurrent() override;
  gpu::CallResult createStream(gpu::Stream *stream) override;
  void destroyStream(gpu::Stream stream) noexcept override;

  gpu::CallResult allocate(DeviceAddress *address, uint64_t bytes) override;
  void free(DeviceAddress address) noexcept override;
  gpu::CallResult upload(DeviceAddress to, const void *from, uint64_t bytes,
                         gpu::Stream stream) override;
  gpu::CallResult download(void *to, DeviceAddress from, uint64_t bytes,
                           gpu::Stream stream) override;
  gpu::CallResult fill(DeviceAddress to, uint8_t value, uint64_t bytes,
                       gpu::Stream stream) override;
  gpu::CallResult copy(DeviceAddress to, DeviceAddress from, uint64_t bytes,
                       gpu::Stream stream) override;

  gpu::CallResult loadModule(gpu::Module *module, const void *image, std::string *log) override;
  void unloadModule(gpu::Module module) noexcept override;
  gpu::CallResult function(gpu::Function *function, gpu::Module module, const char *name) override;
  gpu::CallResult maxThreads(int *threads, gpu::Function function) override;
  gpu::CallResult staticSharedBytes(int *bytes, gpu::Function function) override;
  gpu::CallResult allowSharedBytes(gpu::Function function, unsigned bytes) override;

  gpu::CallResult launch(const gpu::KernelNode &kernel, gpu::Stream stream) override;
  gpu::CallResult synchronize(gpu::Stream stream) override;
  bool notReady(int) const override { return false; }

  gpu::CallResult beginCapture(gpu::Stream stream) override;
  gpu::CallResult endCapture(gpu::Stream stream, gpu::Graph *graph) override;
  gpu::CallResult capturedNode(gpu::Stream stream, gpu::GraphNode *node) override;
  gpu::CallResult instantiate(gpu::GraphExec *exec, gpu::Graph graph, std::string *log) override;
  gpu::CallResult launchGraph(gpu::GraphExec exec, gpu::Stream stream) override;
  gpu::CallResult updateKernelNode(gpu::GraphExec exec, gpu::GraphNode node,
                                   const gpu::KernelNode &kernel) override;
  void destroyGraph(gpu::Graph graph, gpu::GraphExec exec) noexcept override;

  std::string tensorMapsUnavailable() const override {
    return "TensorMap scalars are CUDA tensor maps, for nvptx artifacts; AMD GPUs have none";
  }

private:
  const HipApi &api() const { return driver_->api(); }

  std::shared_ptr<const HipDriver> driver_;
  std::string gcnArchName_; // "gfx942:sramecc+:xnack-"
  int warpSize_ = 0;
};

} // namespace hip
} // namespace kiln
