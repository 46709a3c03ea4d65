// What the engine asks of the device that runs an artifact's kernels: memory
// in the device's address space, the kernel library, launches and copies, and
// where the device can, recording the steps of a call once to replay them.
// CpuBackend runs x86 kernels in this process's memory; GpuBackend
// (runtime/gpu/) runs PTX kernels on an NVIDIA GPU and code objects on an AMD
// GPU, over the vendor's driver table (runtime/cuda/, runtime/hip/).
//
// Work is ordered: every upload, fill, launch and copy takes effect after the
// ones issued before it. download() and synchronize() wait for all of it; a
// backend may run work asynchronously until then. Errors are RuntimeErrors;
// after one a GPU backend may refuse everything (CUDA errors are sticky).
#pragma once

#include "runtime/artifact/Artifact.h"
#include "runtime/comm/Collectives.h"
#include "runtime/comm/RankInfo.h"
#include "runtime/cpu/AlignedBuffer.h"
#include "runtime/cpu/MemRef.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

// An address in a backend's memory: a host pointer for the CPU, a device
// address (CUdeviceptr) for CUDA. Only its backend dereferences it; 0 is no
// memory (an allocation of 0 bytes).
using DeviceAddress = uint64_t;

// One buffer argument of one call of a launch: the buffer's address plus
// BufferRef.offset, and its evaluated sizes (row-major, contiguous).
struct BufferArgument {
  DeviceAddress address = 0;
  int rank = 0;
  int64_t sizes[memref::kMaxRank] = {};
};

// A tensor map over one buffer argument of a launch (schema 1.5's
// Launch.tensor_maps; CUDA only): the GPU backend encodes it from the
// buffer's address and sizes at each call.
struct TensorMapSpec {
  uint32_t buffer = 0;       // index into the launch's buffer arguments
  DType dtype = DType::BF16; // that buffer's elements
  std::vector<uint32_t> box; // elements, innermost dimension first
  uint32_t swizzle = 0;      // the shared-memory swizzle span: 0, 32, 64, 128 bytes
};

// A launch as planned, prepared once by the backend before any call.
struct LaunchSpec {
  uint32_t kernel = 0; // index into the artifact's kernels
  // "entry point 'decode', steps[3] (launch of 'kiln_x', op 'model.y')": how
  // errors name the launch.
  std::string where;
  std::vector<int> ranks; // of the buffer arguments, in order
  std::vector<artifact::ScalarKind> scalarKinds;
  uint32_t maxParts = 1;                 // CPU: how many parts the launch may be split into
  uint32_t block = 0;                    // GPU: threads per block
  int64_t maxGrid = 0;                   // GPU: the most blocks any call launches
  uint32_t sharedBytes = 0;              // GPU: dynamic shared memory (Kernel.shared_bytes)
  std::vector<TensorMapSpec> tensorMaps; // what TensorMap scalars index
};

// The arguments of one call of a launch.
struct LaunchCall {
  const BufferArgument *buffers = nullptr; // one per LaunchSpec::ranks
  // One per LaunchSpec::scalarKinds; Part and Parts are the backend's to set.
  // A TensorMap scalar is its index in LaunchSpec::tensorMaps: the backend
  // passes the address of the map it encoded over this call's buffer.
  const int64_t *scalars = nullptr;
  int64_t grid = 1; // GPU: blocks along x, at least 1
};

// A launch a backend has prepared: its kernel and argument storage.
class PreparedLaunch {
public:
  virtual ~PreparedLaunch() = default;
};

// The steps of one call, recorded by Backend::record and replayed as a whole
// (a CUDA graph). Buffer contents are read at replay; launch arguments are
// fixed at recording, except where update() changes them.
class Recording {
public:
  virtual ~Recording() = default;
  // Sets the arguments the recorded launch of `launch` takes at the next
  // replays; nothing is touched when they are what it already takes.
  virtual void update(PreparedLaunch &launch, const LaunchCall &call) = 0;
  // Runs the recorded steps, ordered like any other work.
  virtual void replay() = 0;
};

// Timestamps between the steps of a call, for profiles.
class StepClock {
public:
  virtual ~StepClock() = default;
  // A timestamp once the work issued so far is done.
  virtual void mark() = 0;
  // Waits for the work, then the milliseconds between consecutive marks.
  virtual std::vector<double> intervals() = 0;
};

class Backend {
public:
  virtual ~Backend() = default;

  // The device, for messages: "CPU (16 threads)", "NVIDIA H200 (compute
  // capability 9.0, 139.8 GiB, device 0)".
  virtual std::string description() const = 0;

  // `bytes` of zeroed memory; `what` names it in errors.
  virtual DeviceAddress allocate(uint64_t bytes, const std::string &what) = 0;
  // Frees memory allocate() or adopt() returned (0: nothing).
  virtual void release(DeviceAddress address) noexcept = 0;
  // Memory holding the bytes of `host`, which the backend may keep (the
  // CPU's does, without a copy) or upload and free.
  virtual DeviceAddress adopt(AlignedBuffer host, const std::string &what) {
    const DeviceAddress address = allocate(host.size(), what);
    if (!host.empty())
      upload(address, host.data(), host.size());
    return address;
  }
  virtual void upload(DeviceAddress to, const void *from, uint64_t bytes) = 0;
  // Waits for the work issued so far, then copies.
  virtual void download(void *to, DeviceAddress from, uint64_t bytes) = 0;
  virtual void fill(DeviceAddress to, uint8_t value, uint64_t bytes) = 0;
  // Device to device; the ranges do not overlap.
  virtual void copy(DeviceAddress to, DeviceAddress from, uint64_t bytes) = 0;
  // `rows` rows of `width` bytes, each `fromPitch` bytes after the last in
  // the source and `toPitch` in the destination. By default a copy a row.
  virtual void copy2D(DeviceAddress to, uint64_t toPitch, DeviceAddress from, uint64_t fromPitch,
                      uint64_t width, uint64_t rows) {
    for (uint64_t r = 0; r < rows; ++r)
      copy(to + r * toPitch, from + r * fromPitch, width);
  }

  // Multi-rank artifacts: joins the job `rank` names and returns the
  // collectives among its ranks over this backend's memory, ordered with
  // the rest of its work. `capacityBytes` bounds any one collective's input.
  virtual std::unique_ptr<Collectives>
  connect(const RankInfo &rank, std::vector<CommGroupSpec> groups, uint64_t capacityBytes);

  // Peer exchange (schema 1.4's Exchange buffers): makes this rank's
  // `local` memory (allocate()d, `bytes`) reachable by the other members of
  // comm group `group` of `comm`, and returns every member's address of
  // theirs as this device sees it, in group order (this rank's is `local`).
  // A collective of the group: every member calls it at the same point.
  virtual std::vector<DeviceAddress> sharePeerMemory(Collectives &comm, int group, int index,
                                                     int size, DeviceAddress local, uint64_t bytes,
                                                     const std::string &what);

  // Loads the artifact's kernel library and resolves every kernel; a missing
  // one is an error here, before any launch.
  virtual void loadKernels(const Artifact &artifact) = 0;
  // Checks the launch against the device (its block and grid against the
  // limits) and prepares its argument storage.
  virtual std::unique_ptr<PreparedLaunch> prepare(const LaunchSpec &spec) = 0;
  virtual void launch(PreparedLaunch &launch, const LaunchCall &call) = 0;
  // Waits for the work issued so far; reports errors it raised.
  virtual void synchronize() = 0;

  // A clock for profiles: by default the host's, waiting for the device at
  // every mark; GPU backends time on the device instead (CUDA events).
  virtual std::unique_ptr<StepClock> clock();

  // Whether record() works.
  virtual bool canRecord() const { return false; }
  // Records the launches and copies `steps` issues, without running them.
  virtual std::unique_ptr<Recording> record(const std::function<void()> &steps);
};

namespace detail {
class HostStepClock final : public StepClock {
public:
  explicit HostStepClock(Backend &backend) : backend_(backend) {}
  void mark() override {
    backend_.synchronize();
    marks_.push_back(std::chrono::steady_clock::now());
  }
  std::vector<double> intervals() override {
    std::vector<double> result;
    for (size_t i = 1; i < marks_.size(); ++i)
      result.push_back(
          std::chrono::duration<double, std::milli>(marks_[i] - marks_[i - 1]).count());
    return result;
  }

private:
  Backend &backend_;
  std::vector<std::chrono::steady_clock::time_point> marks_;
};
} // namespace detail

inline std::unique_ptr<StepClock> Backend::clock() {
  return std::make_unique<detail::HostStepClock>(*this);
}

inline std::unique_ptr<Collectives> Backend::connect(const RankInfo &, std::vector<CommGroupSpec>,
                                                     uint64_t) {
  throw RuntimeError(description() + " runs single-rank artifacts only");
}

inline std::vector<DeviceAddress> Backend::sharePeerMemory(Collectives &, int, int, int,
                                                           DeviceAddress, uint64_t,
                                                           const std::string &what) {
  throw RuntimeError(what + ": " + description() +
                     " cannot share memory with other ranks' kernels (the artifact's MegaMoE "
                     "exchanges through peer memory: rebuild it with kilnc --moe-exchange="
                     "collective)");
}

inline std::unique_ptr<Recording> Backend::record(const std::function<void()> & /*steps*/) {
  throw std::logic_error("this backend cannot record steps");
}

// Memory of a backend, released when this goes. The backend must outlive it.
class DeviceMemory {
public:
  DeviceMemory() = default;
  DeviceMemory(Backend &backend, DeviceAddress address, uint64_t size)
      : backend_(&backend), address_(address), size_(size) {}
  // allocate()d memory.
  static DeviceMemory allocate(Backend &backend, uint64_t bytes, const std::string &what) {
    return DeviceMemory(backend, backend.allocate(bytes, what), bytes);
  }
  DeviceMemory(DeviceMemory &&other) noexcept
      : backend_(std::exchange(other.backend_, nullptr)),
        address_(std::exchange(other.address_, 0)), size_(std::exchange(other.size_, 0)) {}
  DeviceMemory &operator=(DeviceMemory &&other) noexcept {
    if (this != &other) {
      reset();
      backend_ = std::exchange(other.backend_, nullptr);
      address_ = std::exchange(other.address_, 0);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  DeviceMemory(const DeviceMemory &) = delete;
  DeviceMemory &operator=(const DeviceMemory &) = delete;
  ~DeviceMemory() { reset(); }

  DeviceAddress address() const { return address_; }
  uint64_t size() const { return size_; }

private:
  void reset() noexcept {
    if (backend_ && address_)
      backend_->release(address_);
    backend_ = nullptr;
    address_ = 0;
    size_ = 0;
  }

  Backend *backend_ = nullptr;
  DeviceAddress address_ = 0;
  uint64_t size_ = 0;
};

} // namespace kiln
