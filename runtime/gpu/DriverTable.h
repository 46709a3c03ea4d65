// What GpuBackend asks of a GPU vendor's API: the calls that differ between
// the CUDA driver and the HIP runtime only in their names and argument
// types, each behind one method of a table that the vendor's folder fills
// (runtime/cuda/CudaDriverTable, runtime/hip/HipDriverTable). Everything
// else about running an artifact on a GPU (memory, the kernel library,
// checking and packing launches, recording a graph, the collectives'
// watchdog, tensor maps) is written once, in GpuBackend.
//
// A call returns its vendor status (0 is success) with the name the vendor
// gives it, so that GpuBackend's errors read as the vendor's documentation
// does ("cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
// "hipModuleLaunchKernel: hipErrorLaunchFailure: ..."). What a vendor lacks
// (events, IPC, occupancy, tensor maps on HIP so far) a has*() method says;
// GpuBackend then falls back or refuses with the reason.
#pragma once

#include "runtime/comm/Collectives.h"
#include "runtime/comm/RankInfo.h"
#include "runtime/engine/Backend.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::gpu {

class GpuBackend;

// Handles of the vendor's API (CUmodule, hipStream_t, ...), opaque here.
using Module = void *;
using Function = void *;
using Stream = void *;
using Graph = void *;
using GraphExec = void *;
using GraphNode = void *;
using Event = void *;

// One vendor call's outcome: its status (0 is success) and its name.
struct CallResult {
  int status = 0;
  const char *call = "";
  bool ok() const { return status == 0; }
};

// What the device is and allows, read when it is opened.
struct DeviceLimits {
  int ordinal = 0;
  std::string name;        // "NVIDIA H200", "AMD Instinct MI355X"
  std::string description; // Backend::description()
  // How a failed code object load names the device: "NVIDIA H200",
  // "AMD Instinct MI355X (gfx950:sramecc+:xnack-)".
  std::string loadName;
  int maxThreadsPerBlock = 0;
  int maxGridX = 0;
  // The most threads one launch has along x (blocks times threads); 0 for
  // no bound beyond the grid's.
  uint64_t maxThreadsAlongX = 0;
  int multiprocessors = 0; // SMs or compute units
  // Dynamic shared memory: what any kernel may have without asking, and the
  // most one may have (static included) once allowed.
  unsigned defaultSharedBytes = 0;
  unsigned maxSharedBytes = 0;
};

// A kernel node's launch, as a graph update sets it.
struct KernelNode {
  Function function = nullptr;
  unsigned grid = 1, block = 1;
  unsigned sharedBytes = 0;
  void **params = nullptr;
  // Launched with programmatic stream serialization: its blocks may be
  // scheduled while the kernel before it drains, the kernel waiting for it
  // itself (Target.kernels_wait_for_prior_grid). Only where the table
  // hasProgrammaticLaunch().
  bool programmatic = false;
};

class DriverTable {
public:
  virtual ~DriverTable() = default;

  // "CUDA", "HIP": how messages name the API.
  virtual const char *vendor() const = 0;
  // The environment variable whose value 1 turns recording off, so that a
  // kernel's fault is reported by its own launch ("CUDA_LAUNCH_BLOCKING").
  virtual const char *launchBlockingVariable() const = 0;
  // "<what the code object is>": "the PTX module", "the code object".
  virtual const char *libraryKind() const = 0;
  // Why a kernel may take fewer threads than the device allows: "registers
  // or shared memory", "its amdgpu-flat-work-group-size".
  virtual const char *threadLimitReason() const = 0;
  const DeviceLimits &device() const { return device_; }

  // Throws RuntimeError "<context>: <call>: <error>" for a failed call.
  [[noreturn]] virtual void fail(CallResult result, const std::string &context) const = 0;

  // Makes the device current on the calling thread.
  virtual CallResult makeCurrent() = 0;
  virtual CallResult createStream(Stream *stream) = 0;
  // Waits for the stream's work, then destroys it; errors are ignored.
  virtual void destroyStream(Stream stream) noexcept = 0;

  virtual CallResult allocate(DeviceAddress *address, uint64_t bytes) = 0;
  virtual void free(DeviceAddress address) noexcept = 0;
  // Ordered on `stream`; `from` may be reused once it returns.
  virtual CallResult upload(DeviceAddress to, const void *from, uint64_t bytes, Stream stream) = 0;
  // Once `stream`'s work is done (the backend has waited for it).
  virtual CallResult download(void *to, DeviceAddress from, uint64_t bytes, Stream stream) = 0;
  virtual CallResult fill(DeviceAddress to, uint8_t value, uint64_t bytes, Stream stream) = 0;
  virtual CallResult copy(DeviceAddress to, DeviceAddress from, uint64_t bytes, Stream stream) = 0;
  virtual bool hasCopy2D() const { return false; }
  virtual CallResult copy2D(DeviceAddress to, uint64_t toPitch, DeviceAddress from,
                            uint64_t fromPitch, uint64_t width, uint64_t rows, Stream stream);

  // The kernel library's image; `log` gets what the loader said, if anything.
  virtual CallResult loadModule(Module *module, const void *image, std::string *log) = 0;
  virtual void unloadModule(Module module) noexcept = 0;
  virtual CallResult function(Function *function, Module module, const char *name) = 0;
  virtual CallResult maxThreads(int *threads, Function function) = 0;
  // Static shared memory of `function` (0 where the vendor has none to say).
  virtual CallResult staticSharedBytes(int *bytes, Function function) = 0;
  // Lets `function` have `bytes` of dynamic shared memory (within
  // DeviceLimits::maxSharedBytes).
  virtual CallResult allowSharedBytes(Function function, unsigned bytes) = 0;
  // Occupancy, for persistent kernels, whose blocks must all be resident.
  virtual bool hasOccupancy() const { return false; }
  virtual CallResult blocksPerMultiprocessor(int *blocks, Function function, unsigned block,
                                             unsigned sharedBytes);

  virtual CallResult launch(const KernelNode &kernel, Stream stream) = 0;
  // Whether launch() honours KernelNode::programmatic, in a graph's capture
  // too.
  virtual bool hasProgrammaticLaunch() const { return false; }
  virtual CallResult synchronize(Stream stream) = 0;
  // Whether `stream` has work left, without waiting (the watchdog's poll):
  // a status that notReady() tells apart.
  virtual bool hasQuery() const { return false; }
  virtual CallResult query(Stream stream);
  virtual CallResult queryEvent(Event event);
  virtual bool notReady(int status) const = 0;

  // Events: a step clock's timestamps and the collectives' marks.
  virtual bool hasEvents() const { return false; }
  virtual CallResult createEvent(Event *event, bool timing);
  virtual CallResult recordEvent(Event event, Stream stream);
  virtual CallResult waitEvent(Event event);
  virtual CallResult elapsed(float *milliseconds, Event start, Event end);
  virtual void destroyEvent(Event event) noexcept;

  // Graphs: a stream captured, instantiated, its kernel nodes updated.
  virtual CallResult beginCapture(Stream stream) = 0;
  virtual CallResult endCapture(Stream stream, Graph *graph) = 0;
  // The node the last captured operation made, or null in `node` when the
  // stream is not capturing or has no single last node.
  virtual CallResult capturedNode(Stream stream, GraphNode *node) = 0;
  virtual CallResult instantiate(GraphExec *exec, Graph graph, std::string *log) = 0;
  virtual CallResult launchGraph(GraphExec exec, Stream stream) = 0;
  virtual CallResult updateKernelNode(GraphExec exec, GraphNode node, const KernelNode &kernel) = 0;
  virtual void destroyGraph(Graph graph, GraphExec exec) noexcept = 0;

  // Tensor maps (CUDA's TMA descriptors): the reason a launch's maps cannot
  // be had on this device, empty where they can.
  virtual std::string tensorMapsUnavailable() const = 0;
  // Throws RuntimeError "<where>: ..." for a map the kernel cannot take.
  virtual void checkTensorMap(const TensorMapSpec &spec, int rank, const std::string &where) const;
  // Encodes `spec` over `buffer` into `map` (kTensorMapBytes); throws
  // RuntimeError "<where>: ..." without stopping the backend.
  virtual void encodeTensorMap(void *map, const TensorMapSpec &spec, const BufferArgument &buffer,
                               const std::string &where) const;

  // Peer memory through IPC handles of ipcHandleBytes().
  virtual bool hasIpc() const { return false; }
  virtual size_t ipcHandleBytes() const { return 0; }
  virtual CallResult getIpcHandle(void *handle, DeviceAddress address);
  virtual CallResult openIpcHandle(DeviceAddress *address, const void *handle);
  virtual void closeIpcHandle(DeviceAddress address) noexcept;

  // The vendor's collectives (NCCL) on `backend`'s stream, or null where
  // the vendor has none here.
  virtual std::unique_ptr<Collectives> connect(GpuBackend &backend, const RankInfo &rank,
                                               std::vector<CommGroupSpec> groups);

protected:
  DeviceLimits device_;
};

// "139.8 GiB": a device's memory in its description.
std::string gibibytes(uint64_t bytes);

// The bytes of one tensor map in device memory (a CUtensorMap).
constexpr uint64_t kTensorMapBytes = 128;

} // namespace kiln::gpu
