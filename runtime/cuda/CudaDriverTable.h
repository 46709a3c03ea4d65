// The CUDA driver as a GPU driver table (runtime/gpu/DriverTable.h): nvptx
// artifacts run by GpuBackend on an NVIDIA GPU through the driver API
// (docs/runtime-abi.md, "Kernels (nvptx target)").
//
// The PTX module is loaded with cuModuleLoadDataEx (the driver compiles it;
// its error log is part of any failure). All work goes to one non-blocking
// stream of the device's primary context. CUDA adds to the common table:
// 2-D copies, occupancy (persistent kernels), events (step clocks and the
// collectives' watchdog), tensor maps (TMA, compute capability 9.0 on), IPC
// (peer memory) and NCCL (NcclCollectives).
#pragma once

#include "runtime/cuda/CudaDriver.h"
#include "runtime/gpu/GpuBackend.h"

#include <memory>
#include <string>

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
std::unique_ptr<gpu::GpuBackend>
createCudaBackend(const Artifact &artifact, int device,
                  const std::string &driverLibrary = cuda::CudaDriver::kLibrary);

namespace cuda {

class CudaDriverTable final : public gpu::DriverTable {
public:
  // Opens device `ordinal` (checked against the driver's count by the
  // caller) and reads its limits; openContext() makes the context.
  CudaDriverTable(std::shared_ptr<const CudaDriver> driver, int ordinal);
  ~CudaDriverTable() override;
  void openContext();

  const CudaDriver &driver() const { return *driver_; }
  int major() const { return major_; }
  int minor() const { return minor_; }

  const char *vendor() const override { return "CUDA"; }
  const char *launchBlockingVariable() const override { return "CUDA_LAUNCH_BLOCKING"; }
  const char *libraryKind() const override { return "the PTX module"; }
  const char *threadLimitReason() const override { return "registers or shared memory"; }
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
  bool hasCopy2D() const override;
  gpu::CallResult copy2D(DeviceAddress to, uint64_t toPitch, DeviceAddress from, uint64_t fromPitch,
                         uint64_t width, uint64_t rows, gpu::Stream stream) override;

  gpu::CallResult loadModule(gpu::Module *module, const void *image, std::string *log) override;
  void unloadModule(gpu::Module module) noexcept override;
  gpu::CallResult function(gpu::Function *function, gpu::Module module, const char *name) override;
  gpu::CallResult maxThreads(int *threads, gpu::Function function) override;
  gpu::CallResult staticSharedBytes(int *bytes, gpu::Function function) override;
  gpu::CallResult allowSharedBytes(gpu::Function function, unsigned bytes) override;
  bool hasOccupancy() const override;
  gpu::CallResult blocksPerMultiprocessor(int *blocks, gpu::Function function, unsigned block,
                                          unsigned sharedBytes) override;

  gpu::CallResult launch(const gpu::KernelNode &kernel, gpu::Stream stream) override;
  bool hasProgrammaticLaunch() const override;
  gpu::CallResult synchronize(gpu::Stream stream) override;
  bool hasQuery() const override;
  gpu::CallResult query(gpu::Stream stream) override;
  gpu::CallResult queryEvent(gpu::Event event) override;
  bool notReady(int status) const override { return status == kErrorNotReady; }

  bool hasEvents() const override;
  gpu::CallResult createEvent(gpu::Event *event, bool timing) override;
  gpu::CallResult recordEvent(gpu::Event event, gpu::Stream stream) override;
  gpu::CallResult waitEvent(gpu::Event event) override;
  gpu::CallResult elapsed(float *milliseconds, gpu::Event start, gpu::Event end) override;
  void destroyEvent(gpu::Event event) noexcept override;

  gpu::CallResult beginCapture(gpu::Stream stream) override;
  gpu::CallResult endCapture(gpu::Stream stream, gpu::Graph *graph) override;
  gpu::CallResult capturedNode(gpu::Stream stream, gpu::GraphNode *node) override;
  gpu::CallResult instantiate(gpu::GraphExec *exec, gpu::Graph graph, std::string *log) override;
  gpu::CallResult launchGraph(gpu::GraphExec exec, gpu::Stream stream) override;
  gpu::CallResult updateKernelNode(gpu::GraphExec exec, gpu::GraphNode node,
                                   const gpu::KernelNode &kernel) override;
  void destroyGraph(gpu::Graph graph, gpu::GraphExec exec) noexcept override;

  std::string tensorMapsUnavailable() const override;
  void checkTensorMap(const TensorMapSpec &spec, int rank, const std::string &where) const override;
  void encodeTensorMap(void *map, const TensorMapSpec &spec, const BufferArgument &buffer,
                       const std::string &where) const override;

  bool hasIpc() const override;
  size_t ipcHandleBytes() const override { return sizeof(IpcMemHandle); }
  gpu::CallResult getIpcHandle(void *handle, DeviceAddress address) override;
  gpu::CallResult openIpcHandle(DeviceAddress *address, const void *handle) override;
  void closeIpcHandle(DeviceAddress address) noexcept override;

  std::unique_ptr<Collectives> connect(gpu::GpuBackend &backend, const RankInfo &rank,
                                       std::vector<CommGroupSpec> groups) override;

private:
  const CudaApi &api() const { return driver_->api(); }

  std::shared_ptr<const CudaDriver> driver_;
  CUdevice handle_ = 0;
  CUcontext context_ = nullptr;
  int major_ = 0, minor_ = 0; // compute capability
};

} // namespace cuda
} // namespace kiln
