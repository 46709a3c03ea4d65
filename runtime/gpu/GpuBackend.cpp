#include "runtime/gpu/GpuBackend.h"

#include "runtime/gpu/GpuGraph.h"
#include "runtime/gpu/KernelParams.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace kiln::gpu {
namespace fb = kiln::artifact;

namespace {

// A tensor map of a launch and what it was last encoded from: it is encoded
// and uploaded again only when its buffer's address or sizes change.
struct LaunchTensorMap {
  TensorMapSpec spec;
  DeviceAddress device = 0; // its map in device memory
  bool encoded = false;
  DeviceAddress address = 0;
  int64_t sizes[memref::kMaxRank] = {};
};

// A launch: its kernel and the storage of its parameters.
class GpuLaunch final : public PreparedLaunch {
public:
  GpuLaunch(Function kernel, const LaunchSpec &spec, unsigned resident)
      : function(kernel), block(spec.block), sharedBytes(spec.sharedBytes), where(spec.where),
        params(spec.ranks, spec.scalarKinds.size()), maxGrid(resident) {}

  Function function;
  unsigned block;
  unsigned sharedBytes; // dynamic shared memory of every call
  std::string where;
  KernelParams params;
  unsigned maxGrid; // persistent kernels: the blocks resident at once; else 0
  // It waits for other ranks' stores (peer exchange): watched as a
  // collective, under this name; empty if not.
  std::string exchange;
  // Its tensor maps, in one allocation of kTensorMapBytes each.
  std::vector<LaunchTensorMap> maps;
  DeviceMemory mapMemory;
};

// "tensor_maps[1] (over buffers[0])", for messages.
std::string mapName(size_t index, const TensorMapSpec &spec) {
  return "tensor_maps[" + std::to_string(index) + "] (over buffers[" + std::to_string(spec.buffer) +
         "])";
}

// A loader's log on one line: lines joined with "; ".
std::string oneLine(const std::string &log) {
  std::string line;
  for (const char c : log) {
    if (c == '\0')
      break;
    if (c == '\n' || c == '\r') {
      if (!line.empty() && line.back() != ' ')
        line += "; ";
    } else {
      line += c;
    }
  }
  while (!line.empty() && (line.back() == ' ' || line.back() == ';'))
    line.pop_back();
  return line;
}

// " (<log>)" for a non-empty log.
std::string logSuffix(const std::string &log) {
  const std::string line = oneLine(log);
  return line.empty() ? std::string() : " (" + line + ")";
}

} // namespace

GpuBackend::GpuBackend(std::unique_ptr<DriverTable> table, std::string source)
    : table_(std::move(table)), source_(std::move(source)) {
  const std::string context = source_ + ": " + table_->device().name + ", device " +
                              std::to_string(table_->device().ordinal);
  check(table_->makeCurrent(), context);
  check(table_->createStream(&stream_), context);
}

GpuBackend::~GpuBackend() {
  // The collectives' kernels may wait for a peer that is gone: nothing is
  // waited for or freed, the table (the context) included.
  if (abandoned_) {
    (void)table_.release();
    return;
  }
  // Errors are ignored: after a sticky error nothing can be freed anyway.
  table_->makeCurrent();
  if (stream_)
    table_->destroyStream(stream_);
  for (const CollectiveMark &mark : inFlight_)
    if (!mark.recorded)
      spareEvents_.push_back(mark.event);
  for (Event event : spareEvents_)
    table_->destroyEvent(event);
  if (module_)
    table_->unloadModule(module_);
  for (DeviceAddress peer : peerMemory_)
    table_->closeIpcHandle(peer);
}

void GpuBackend::enter() {
  if (!stopped_.empty())
    throw RuntimeError(std::string("an earlier ") + table_->vendor() +
                       " error stopped this engine: " + stopped_);
  check(table_->makeCurrent());
}

void GpuBackend::check(CallResult result, const std::string &context) {
  if (result.ok())
    return;
  try {
    table_->fail(result, context);
  } catch (const RuntimeError &error) {
    if (stopped_.empty())
      stopped_ = error.what();
    throw;
  }
}

DeviceAddress GpuBackend::allocate(uint64_t bytes, const std::string &what) {
  if (bytes == 0)
    return 0;
  enter();
  DeviceAddress address = 0;
  const DeviceLimits &device = table_->device();
  check(table_->allocate(&address, bytes), source_ + ": " + what + " (" + std::to_string(bytes) +
                                               " bytes on " + device.name + ", device " +
                                               std::to_string(device.ordinal) + ")");
  fill(address, 0, bytes);
  return address;
}

void GpuBackend::release(DeviceAddress address) noexcept {
  if (!address || abandoned_)
    return;
  table_->makeCurrent();
  table_->free(address);
}

void GpuBackend::upload(DeviceAddress to, const void *from, uint64_t bytes) {
  if (bytes == 0)
    return;
  if (capture_)
    throw std::logic_error("an upload cannot be recorded");
  enter();
  check(table_->upload(to, from, bytes, stream_), source_);
}

void GpuBackend::download(void *to, DeviceAddress from, uint64_t bytes) {
  synchronize();
  if (bytes == 0)
    return;
  check(table_->download(to, from, bytes, stream_), source_);
}

void GpuBackend::fill(DeviceAddress to, uint8_t value, uint64_t bytes) {
  if (bytes == 0)
    return;
  enter();
  check(table_->fill(to, value, bytes, stream_), source_);
}

void GpuBackend::copy(DeviceAddress to, DeviceAddress from, uint64_t bytes) {
  if (bytes == 0)
    return;
  enter();
  check(table_->copy(to, from, bytes, stream_), source_);
}

void GpuBackend::copy2D(DeviceAddress to, uint64_t toPitch, DeviceAddress from, uint64_t fromPitch,
                        uint64_t width, uint64_t rows) {
  if (!table_->hasCopy2D())
    return Backend::copy2D(to, toPitch, from, fromPitch, width, rows);
  if (width == 0 || rows == 0)
    return;
  enter();
  check(table_->copy2D(to, toPitch, from, fromPitch, width, rows, stream_), source_);
}

// On: on an H200 the proxy's batch-1 decode step is 1.4% faster (six
// alternating pairs, each faster), batch 8 and prefill unchanged, the logits
// bit for bit those of launches in order (docs/gpu-notes.md).
constexpr bool kProgrammaticByDefault = true;

void GpuBackend::loadKernels(const Artifact &artifact) {
  if (artifact.numKernels() == 0)
    return;
  enter();
  // The image (PTX text NUL-terminated, or an ELF code object: the
  // artifact's rules checked it).
  const auto *blob = artifact->library()->blob();
  std::string log;
  const CallResult loaded = table_->loadModule(&module_, blob->data(), &log);
  if (!loaded.ok()) {
    module_ = nullptr;
    check(loaded, source_ + ": loading " + table_->libraryKind() + " for " +
                      describeTarget(*artifact->target()) + " on " + table_->device().loadName +
                      logSuffix(log));
  }
  for (const fb::Kernel *kernel : *artifact->kernels()) {
    LoadedKernel loadedKernel;
    loadedKernel.name = kernel->name()->str();
    check(table_->function(&loadedKernel.function, module_, loadedKernel.name.c_str()),
          source_ + ": kernel '" + loadedKernel.name + "' (not in " + table_->libraryKind() + "?)");
    // The tiling (JSON, as the compiler wrote it beside the kernel) says how
    // it is launched: a persistent kernel, one exchanging with peers.
    loadedKernel.persistent = tilingField(*kernel, "kind") == "persistent";
    loadedKernel.exchanges = tilingField(*kernel, "exchange") == "peer";
    loadedKernel.sharedLimit =
        allowSharedBytes(loadedKernel.function, loadedKernel.name, kernel->shared_bytes());
    kernels_.push_back(std::move(loadedKernel));
  }
  // Each kernel's blocks may start while the one before drains where every
  // kernel waits for its predecessor itself (griddepcontrol.wait at its
  // entry). KILN_PROGRAMMATIC_LAUNCH=1 asks for it, 0 launches the kernels
  // one after another; unset, kProgrammaticByDefault.
  const char *programmatic = std::getenv("KILN_PROGRAMMATIC_LAUNCH");
  const bool wanted =
      programmatic && *programmatic ? std::strcmp(programmatic, "0") != 0 : kProgrammaticByDefault;
  programmatic_ = wanted && artifact->target()->kernels_wait_for_prior_grid() &&
                  table_->hasProgrammaticLaunch();
}

unsigned GpuBackend::allowSharedBytes(Function function, const std::string &name, unsigned bytes) {
  const DeviceLimits &device = table_->device();
  if (bytes == 0)
    return device.defaultSharedBytes;
  const std::string where = source_ + ": kernel '" + name + "'";
  int statics = 0;
  check(table_->staticSharedBytes(&statics, function), where + ": static shared memory");
  // Without asking, static and dynamic shared memory share the default.
  if (uint64_t{bytes} + static_cast<uint64_t>(statics) <= device.defaultSharedBytes)
    return device.defaultSharedBytes;
  if (uint64_t{bytes} + static_cast<uint64_t>(statics) > device.maxSharedBytes)
    throw RuntimeError(where + " needs " + std::to_string(bytes) +
                       " bytes of dynamic shared memory (Kernel.shared_bytes) and " +
                       std::to_string(statics) + " static; " + device.name + ", device " +
                       std::to_string(device.ordinal) + " gives a block at most " +
                       std::to_string(device.maxSharedBytes));
  check(table_->allowSharedBytes(function, bytes),
        where + ": allowing " + std::to_string(bytes) + " bytes of dynamic shared memory");
  return bytes;
}

std::unique_ptr<PreparedLaunch> GpuBackend::prepare(const LaunchSpec &spec) {
  enter();
  const std::string where = source_ + ": " + spec.where;
  for (fb::ScalarKind kind : spec.scalarKinds)
    if (kind == fb::ScalarKind::Part || kind == fb::ScalarKind::Parts)
      throw RuntimeError(where + ": GPU launches take no Part or Parts scalar");
  const LoadedKernel &kernel = kernels_.at(spec.kernel);
  const DeviceLimits &device = table_->device();
  const std::string onDevice = device.name + ", device " + std::to_string(device.ordinal);
  if (spec.block < 1 || spec.block > static_cast<uint32_t>(device.maxThreadsPerBlock))
    throw RuntimeError(where + ": a block of " + std::to_string(spec.block) + " threads; " +
                       onDevice + " allows 1.." + std::to_string(device.maxThreadsPerBlock));
  int kernelMax = 0;
  check(table_->maxThreads(&kernelMax, kernel.function), where);
  if (spec.block > static_cast<uint32_t>(kernelMax))
    throw RuntimeError(where + ": a block of " + std::to_string(spec.block) +
                       " threads, but the compiled kernel takes at most " +
                       std::to_string(kernelMax) + " on " + onDevice + " (" +
                       table_->threadLimitReason() + ")");
  if (spec.maxGrid > device.maxGridX)
    throw RuntimeError(where + ": a grid of " + std::to_string(spec.maxGrid) +
                       " blocks at max_tokens; " + onDevice + " allows at most " +
                       std::to_string(device.maxGridX));
  if (device.maxThreadsAlongX &&
      static_cast<uint64_t>(spec.maxGrid) * spec.block > device.maxThreadsAlongX)
    throw RuntimeError(where + ": a grid of " + std::to_string(spec.maxGrid) + " blocks of " +
                       std::to_string(spec.block) + " threads at max_tokens; " + table_->vendor() +
                       " launches at most " + std::to_string(device.maxThreadsAlongX) +
                       " threads along x");
  if (spec.sharedBytes > kernel.sharedLimit)
    throw RuntimeError(where + ": " + std::to_string(spec.sharedBytes) +
                       " bytes of dynamic shared memory, but kernel '" + kernel.name +
                       "' was loaded for at most " + std::to_string(kernel.sharedLimit) +
                       " (its Kernel.shared_bytes, or the device's default)");
  // A persistent kernel's blocks wait for each other: all of them must be
  // resident at once, so its grid stays within what the multiprocessors
  // hold (its loops stride over the work, whatever the grid).
  unsigned resident = 0;
  if (kernel.persistent) {
    if (!table_->hasOccupancy())
      throw RuntimeError(where + ": the " + table_->vendor() +
                         " API here tells no occupancy, which persistent kernels need");
    int perUnit = 0;
    check(table_->blocksPerMultiprocessor(&perUnit, kernel.function, spec.block, spec.sharedBytes),
          where);
    if (perUnit < 1 || device.multiprocessors < 1)
      throw RuntimeError(where + ": no block of " + std::to_string(spec.block) +
                         " threads of this persistent kernel fits on a multiprocessor of " +
                         onDevice);
    resident = static_cast<unsigned>(perUnit * device.multiprocessors);
  }
  auto launch = std::make_unique<GpuLaunch>(kernel.function, spec, resident);
  if (kernel.exchanges)
    launch->exchange = "peer exchange for '" + kernel.name + "' (" + spec.where + ")";
  prepareTensorMaps(*launch, spec);
  return launch;
}

void GpuBackend::prepareTensorMaps(PreparedLaunch &prepared, const LaunchSpec &spec) {
  auto &launch = static_cast<GpuLaunch &>(prepared);
  const bool scalars = std::find(spec.scalarKinds.begin(), spec.scalarKinds.end(),
                                 fb::ScalarKind::TensorMap) != spec.scalarKinds.end();
  if (spec.tensorMaps.empty() && !scalars)
    return;
  const std::string where = source_ + ": " + spec.where;
  const std::string unavailable = table_->tensorMapsUnavailable();
  if (!unavailable.empty())
    throw RuntimeError(where + ": " + unavailable);
  if (spec.tensorMaps.empty())
    throw RuntimeError(where + ": TensorMap scalars, but the launch has no tensor_maps");
  for (size_t m = 0; m < spec.tensorMaps.size(); ++m) {
    const TensorMapSpec &map = spec.tensorMaps[m];
    if (map.buffer >= spec.ranks.size())
      throw RuntimeError(where + ": " + mapName(m, map) + ": the launch has " +
                         std::to_string(spec.ranks.size()) + " buffers");
    table_->checkTensorMap(map, spec.ranks[map.buffer], where + ": " + mapName(m, map));
  }
  launch.mapMemory = DeviceMemory::allocate(*this, kTensorMapBytes * spec.tensorMaps.size(),
                                            spec.where + ": tensor maps");
  std::vector<uint64_t> addresses;
  for (size_t m = 0; m < spec.tensorMaps.size(); ++m) {
    LaunchTensorMap map;
    map.spec = spec.tensorMaps[m];
    map.device = launch.mapMemory.address() + m * kTensorMapBytes;
    addresses.push_back(map.device);
    launch.maps.push_back(std::move(map));
  }
  launch.params.mapTensorMaps(spec.scalarKinds, std::move(addresses));
}

void GpuBackend::refreshTensorMaps(PreparedLaunch &prepared, const LaunchCall &call) {
  auto &launch = static_cast<GpuLaunch &>(prepared);
  for (size_t m = 0; m < launch.maps.size(); ++m) {
    LaunchTensorMap &map = launch.maps[m];
    const BufferArgument &buffer = call.buffers[map.spec.buffer];
    if (map.encoded && map.address == buffer.address &&
        std::equal(buffer.sizes, buffer.sizes + buffer.rank, map.sizes))
      continue;
    const std::string where = source_ + ": " + launch.where + ": " + mapName(m, map.spec);
    enter();
    // A recorded step keeps the map's address, not its contents: the map
    // must hold at every replay what the recorded call saw.
    if (capture_)
      throw RuntimeError(where + ": its buffer's address or sizes changed while the decode "
                                 "step was being recorded as a graph (a map is encoded "
                                 "before a recording, never during one)");
    alignas(64) uint8_t encoded[kTensorMapBytes] = {};
    // A map the driver refuses leaves the context as it was: no stop.
    table_->encodeTensorMap(encoded, map.spec, buffer, where);
    // Ordered before the launch on the stream; the driver has read
    // `encoded` (pageable memory) when the call returns.
    check(table_->upload(map.device, encoded, kTensorMapBytes, stream_), where);
    map.encoded = true;
    map.address = buffer.address;
    std::copy(buffer.sizes, buffer.sizes + buffer.rank, map.sizes);
  }
}

void GpuBackend::launch(PreparedLaunch &prepared, const LaunchCall &call) {
  auto &launch = static_cast<GpuLaunch &>(prepared);
  enter();
  refreshTensorMaps(prepared, call);
  launch.params.pack(call.buffers, call.scalars);
  const KernelNode node{launch.function,    gridOf(prepared, call),   launch.block,
                        launch.sharedBytes, launch.params.pointers(), programmatic_};
  check(table_->launch(node, stream_), source_ + ": " + launch.where);
  if (capture_) {
    GraphNode captured = nullptr;
    check(table_->capturedNode(stream_, &captured), source_);
    // In a stream's capture the last operation is the one node that the
    // next depends on.
    if (!captured)
      throw RuntimeError(source_ + ": recording the decode step: the stream "
                                   "capture lost track of a launch");
    capture_->push_back(CapturedLaunch{&prepared, captured, node.function, node.grid, node.block,
                                       node.sharedBytes, launch.where, launch.params});
  }
  // A kernel that waits for the other ranks stalls as a collective would
  // when one of them dies: the watchdog names it.
  if (!launch.exchange.empty() && watched_)
    markCollective(launch.exchange);
}

unsigned GpuBackend::gridOf(const PreparedLaunch &prepared, const LaunchCall &call) {
  const auto &launch = static_cast<const GpuLaunch &>(prepared);
  const auto grid = static_cast<unsigned>(call.grid);
  return launch.maxGrid ? std::min(grid, launch.maxGrid) : grid;
}

std::vector<DeviceAddress> GpuBackend::sharePeerMemory(Collectives &comm, int group, int index,
                                                       int size, DeviceAddress local,
                                                       uint64_t bytes, const std::string &what) {
  enter();
  if (!table_->hasIpc())
    return Backend::sharePeerMemory(comm, group, index, size, local, bytes, what);
  std::vector<uint8_t> mine(table_->ipcHandleBytes());
  check(table_->getIpcHandle(mine.data(), local), what + " (" + std::to_string(bytes) + " bytes)");
  // The handles travel by the group's own all-gather (4-byte words).
  const uint64_t handleBytes = mine.size();
  const DeviceAddress staging = allocate(handleBytes * (size + 1), what + ": IPC handles");
  std::vector<uint8_t> handles(handleBytes * static_cast<size_t>(size));
  try {
    upload(staging, mine.data(), handleBytes);
    comm.allGather(group, staging, staging + handleBytes, handleBytes / 4,
                   "all_gather of IPC handles for " + what);
    synchronize();
    download(handles.data(), staging + handleBytes, handles.size());
  } catch (...) {
    release(staging);
    throw;
  }
  release(staging);
  std::vector<DeviceAddress> addresses(static_cast<size_t>(size));
  for (int m = 0; m < size; ++m) {
    if (m == index) {
      addresses[m] = local;
      continue;
    }
    DeviceAddress peer = 0;
    check(table_->openIpcHandle(&peer, handles.data() + handleBytes * m),
          what + ": member " + std::to_string(m) + "'s memory on device " +
              std::to_string(table_->device().ordinal) +
              " (the GPUs need peer access, such as NVLink; or rebuild with kilnc "
              "--moe-exchange=collective)");
    peerMemory_.push_back(peer);
    addresses[m] = peer;
  }
  return addresses;
}

std::unique_ptr<Collectives> GpuBackend::connect(const RankInfo &rank,
                                                 std::vector<CommGroupSpec> groups,
                                                 uint64_t capacityBytes) {
  std::unique_ptr<Collectives> collectives = table_->connect(*this, rank, std::move(groups));
  if (!collectives)
    return Backend::connect(rank, {}, capacityBytes);
  return collectives;
}

void GpuBackend::forget(const WatchedCollectives *collectives) {
  if (watched_ == collectives)
    watched_ = nullptr;
}

void GpuBackend::markCollective(const std::string &what) {
  if (!table_->hasEvents())
    return;
  CollectiveMark mark;
  mark.what = what;
  mark.recorded = captureMarks_ != nullptr;
  if (!mark.recorded && !spareEvents_.empty()) {
    mark.event = spareEvents_.back();
    spareEvents_.pop_back();
  } else {
    check(table_->createEvent(&mark.event, /*timing=*/false), what);
  }
  check(table_->recordEvent(mark.event, stream_), what);
  (captureMarks_ ? *captureMarks_ : inFlight_).push_back(std::move(mark));
}

void GpuBackend::replayedCollectives(const std::vector<CollectiveMark> &marks) {
  inFlight_.insert(inFlight_.end(), marks.begin(), marks.end());
}

void GpuBackend::watchCollectives() {
  if (!watched_ || inFlight_.empty() || !table_->hasQuery())
    return;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(watched_->timeoutSeconds());
  auto lastCheck = start;
  for (uint64_t polls = 0;; ++polls) {
    if (!table_->notReady(table_->query(stream_).status))
      return; // done, or a kernel's error for synchronize to report
    const auto now = Clock::now();
    std::string reason;
    if (now - lastCheck > std::chrono::milliseconds(20)) {
      lastCheck = now;
      reason = watched_->asyncError();
      if (reason.empty() && now > deadline) {
        char text[96];
        std::snprintf(text, sizeof(text),
                      "timed out after %g s (a rank died or stalls; "
                      "KILN_COMM_TIMEOUT)",
                      watched_->timeoutSeconds());
        reason = text;
      }
    }
    if (!reason.empty()) {
      // The first collective whose event has not fired. A recorded step's
      // events still hold the previous replay's state, so there the stuck
      // one cannot be told apart: the step's collectives are named whole.
      std::string stuck;
      size_t replayed = 0;
      for (const CollectiveMark &mark : inFlight_) {
        replayed += mark.recorded;
        if (!mark.recorded && table_->notReady(table_->queryEvent(mark.event).status)) {
          stuck = mark.what;
          break;
        }
      }
      if (stuck.empty())
        stuck = replayed
                    ? "one of the " + std::to_string(replayed) +
                          " collectives of a recorded step (the first: " + inFlight_.front().what +
                          ")"
                    : "the step's collectives";
      // The library's abort waits for the graphs that hold its work, whose
      // kernels wait for the lost peer: it runs on a thread of its own, and
      // this backend waits for and frees nothing more.
      abandoned_ = true;
      std::thread(watched_->abortTask()).detach();
      stopped_ = stuck + ": " + reason + " (the communicators are being aborted)";
      throw CollectiveError(stopped_);
    }
    if (polls > 64)
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void GpuBackend::synchronize() {
  enter();
  watchCollectives();
  for (CollectiveMark &mark : inFlight_)
    if (!mark.recorded)
      spareEvents_.push_back(mark.event);
  inFlight_.clear();
  check(table_->synchronize(stream_),
        source_ + ": waiting for the kernels (a kernel failed; with " +
            table_->launchBlockingVariable() + "=1 its launch is named)");
}

namespace {

class EventClock final : public StepClock {
public:
  explicit EventClock(GpuBackend &backend) : backend_(backend) {}
  ~EventClock() override {
    for (Event event : events_)
      backend_.table().destroyEvent(event);
  }
  void mark() override {
    backend_.enter();
    Event event = nullptr;
    backend_.check(backend_.table().createEvent(&event, /*timing=*/true));
    events_.push_back(event);
    backend_.check(backend_.table().recordEvent(event, backend_.stream()));
  }
  std::vector<double> intervals() override {
    backend_.enter();
    std::vector<double> result;
    if (events_.empty())
      return result;
    backend_.check(backend_.table().waitEvent(events_.back()),
                   "timing the kernels (a kernel failed)");
    for (size_t i = 1; i < events_.size(); ++i) {
      float ms = 0;
      backend_.check(backend_.table().elapsed(&ms, events_[i - 1], events_[i]));
      result.push_back(ms);
    }
    return result;
  }

private:
  GpuBackend &backend_;
  std::vector<Event> events_;
};

} // namespace

std::unique_ptr<StepClock> GpuBackend::clock() {
  if (!table_->hasEvents())
    return Backend::clock();
  return std::make_unique<EventClock>(*this);
}

bool GpuBackend::canRecord() const {
  const char *value = std::getenv(table_->launchBlockingVariable());
  return !(value && std::strcmp(value, "1") == 0);
}

std::unique_ptr<Recording> GpuBackend::record(const std::function<void()> &steps) {
  enter();
  const std::string context = source_ + ": recording the decode step";
  check(table_->beginCapture(stream_), context);
  std::vector<CapturedLaunch> launches;
  std::vector<CollectiveMark> marks;
  capture_ = &launches;
  captureMarks_ = &marks;
  try {
    steps();
  } catch (...) {
    capture_ = nullptr;
    captureMarks_ = nullptr;
    Graph partial = nullptr;
    table_->endCapture(stream_, &partial);
    if (partial)
      table_->destroyGraph(partial, nullptr);
    throw;
  }
  capture_ = nullptr;
  captureMarks_ = nullptr;
  Graph graph = nullptr;
  check(table_->endCapture(stream_, &graph), context);
  GraphExec exec = nullptr;
  std::string log;
  const CallResult instantiated = table_->instantiate(&exec, graph, &log);
  if (!instantiated.ok()) {
    table_->destroyGraph(graph, nullptr);
    check(instantiated, context + logSuffix(log));
  }
  return std::make_unique<GpuGraph>(*this, graph, exec, std::move(launches), std::move(marks));
}

} // namespace kiln::gpu
