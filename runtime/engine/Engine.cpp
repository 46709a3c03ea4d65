#include "runtime/engine/Engine.h"

#include "models/muse_spark/Config.h"
#include "runtime/cpu/AlignedBuffer.h"
#include "runtime/cpu/CpuFeatures.h"
#include "runtime/cpu/KernelLibrary.h"
#include "runtime/cpu/MemRef.h"
#include "runtime/cpu/RuntimeError.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/engine/KvCache.h"
#include "runtime/engine/WeightSource.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <variant>

namespace kiln {
namespace fb = kiln::artifact;

namespace {

constexpr int64_t kDefaultContextLength = 4096;

// One buffer argument of a step, resolved to memory once everything is
// allocated.
struct BufferArg {
  fb::BufferKind kind = fb::BufferKind::Arena;
  uint32_t index = 0;
  uint64_t offset = 0;
  std::vector<fb::Dim> dims;
  int64_t slots = -1; // KvCache: replaces dims[0]
  int64_t elementSize = 1;
  uint8_t *address = nullptr; // the buffer's base + offset
};

// The evaluated shape at `tokens` into `sizes`; returns the byte count.
int64_t evaluateArg(const BufferArg &arg, int64_t tokens, int64_t *sizes) {
  int64_t bytes = arg.elementSize;
  for (size_t d = 0; d < arg.dims.size(); ++d) {
    const int64_t size =
        d == 0 && arg.slots >= 0 ? arg.slots : evaluate(arg.dims[d], tokens);
    sizes[d] = size;
    bytes *= size;
  }
  return bytes;
}

struct LaunchPlan {
  KernelFn fn = nullptr;
  std::vector<BufferArg> buffers;
  std::vector<fb::ScalarKind> scalarKinds;
  std::vector<int64_t> scalarConstants;
  int parts = 1; // min(max_parts, threads)
  // Argument storage, filled before each call: one descriptor per buffer,
  // and per part its scalars and its argument array.
  std::vector<memref::DescriptorStorage> descriptors;
  std::vector<int64_t> scalarValues; // parts x scalars
  std::vector<void *> args;          // parts x (buffers + scalars)
};

struct CopyPlan {
  BufferArg source, destination;
};

using StepPlan = std::variant<LaunchPlan, CopyPlan>;

struct EntryPlan {
  std::string name;
  int64_t maxTokens = 1;
  AlignedBuffer arena;
  fb::Dim logitsRows{1, 0, 1};
  std::vector<StepPlan> steps;
};

std::string quoted(const flatbuffers::String *text) {
  return text ? "'" + text->str() + "'" : std::string("(none)");
}

// Why this CPU cannot run the target's kernels, or "".
std::string cpuSupport(const fb::Target &target) {
  std::vector<std::string> unknown, missing;
  if (const auto *features = target.features())
    for (const flatbuffers::String *feature : *features) {
      const std::optional<bool> has = cpuHasFeature(feature->string_view());
      if (!has)
        unknown.push_back(feature->str());
      else if (!*has)
        missing.push_back(feature->str());
    }
  auto list = [](const std::vector<std::string> &names) {
    std::string text;
    for (const std::string &name : names)
      text += (text.empty() ? "" : ", ") + name;
    return text;
  };
  if (!missing.empty())
    return "the CPU lacks " + list(missing);
  if (!unknown.empty())
    return "this runtime does not know the CPU feature(s) " + list(unknown);
  return "";
}

} // namespace

struct Engine::Impl {
  Artifact artifact;
  muse_spark::Config config;
  int64_t vocab = 0;
  int64_t contextLength = 0;
  std::unique_ptr<ThreadPool> pool;
  std::optional<KernelLibrary> library;
  std::vector<KernelFn> kernels;
  std::vector<AlignedBuffer> weights;
  std::vector<uint64_t> weightCapacity; // binding bytes, known before binding
  KvCaches kv;
  AlignedBuffer inputs[2]; // token ids, positions
  AlignedBuffer logits;
  std::vector<EntryPlan> entries;
  EntryPlan *prefillEntry = nullptr;
  EntryPlan *decodeEntry = nullptr;
  int64_t past = 0;

  explicit Impl(Artifact loaded) : artifact(std::move(loaded)) {}

  [[noreturn]] void fail(const std::string &reason) const {
    throw RuntimeError(artifact.source() + ": " + reason);
  }

  void checkTargetAndLayout();
  void parseModel(const EngineOptions &options);
  void loadKernels();
  void allocateBuffers();
  void planEntries();
  BufferArg planBuffer(const fb::BufferRef &ref, const EntryPlan &entry,
                       const std::string &where) const;
  uint64_t capacity(const BufferArg &arg, const EntryPlan &entry) const;
  void bindAllWeights(const EngineOptions &options);
  void resolveAddresses();

  void run(EntryPlan &entry, const int32_t *tokens, int64_t count);
  void runLaunch(LaunchPlan &launch, int64_t tokens);
  std::vector<float> lastLogits(const EntryPlan &entry, int64_t tokens) const;
  void checkTokens(const int32_t *tokens, int64_t count) const;
};

void Engine::Impl::checkTargetAndLayout() {
  checkTarget(artifact, fb::TargetKind::X86, cpuSupport);
  const fb::Layout &layout = *artifact->layout();
  if (layout.world() > 1)
    fail("artifact is rank " + std::to_string(artifact->rank()) + " of " +
         std::to_string(layout.world()) + " (tp " +
         std::to_string(layout.tp()) + ", ep " + std::to_string(layout.ep()) +
         "): multi-rank artifacts need the NCCL runtime");
  std::vector<std::string> features;
  if (const auto *list = artifact->target()->features())
    for (const flatbuffers::String *feature : *list)
      features.push_back(feature->str());
  if (needsAmx(features)) {
    if (!cpuHasAmx())
      fail("the kernels need AMX, which this CPU lacks");
    requestAmx();
  }
}

void Engine::Impl::parseModel(const EngineOptions &options) {
  const fb::Model &model = *artifact->model();
  try {
    config = muse_spark::parseConfig(
        model.config_json() ? model.config_json()->str() : std::string(),
        artifact.source() + ": model.config_json");
  } catch (const muse_spark::ConfigError &error) {
    throw RuntimeError(error.what());
  }
  vocab = config.vocabSize;
  contextLength = options.contextLength;
  if (contextLength == 0)
    contextLength = defaultContextLength(config);
  if (contextLength < 1 || contextLength > config.maxPositionEmbeddings)
    throw RuntimeError("context length " + std::to_string(contextLength) +
                       " is outside 1.." +
                       std::to_string(config.maxPositionEmbeddings) +
                       " (the model's max_position_embeddings)");
}

void Engine::Impl::loadKernels() {
  const auto *blob = artifact->library()->blob();
  if (artifact.numKernels() == 0)
    return;
  library.emplace(
      KernelLibrary::load(blob->data(), blob->size(), artifact.source()));
  for (const fb::Kernel *kernel : *artifact->kernels())
    kernels.push_back(library->resolve(kernel->name()->str())); // the symbol
}

void Engine::Impl::allocateBuffers() {
  std::vector<KvCacheSpec> specs;
  if (const auto *caches = artifact->kv_caches())
    for (const fb::KvCache *cache : *caches)
      specs.push_back({cache->layer(), cache->window(), cache->kv_heads(),
                       cache->head_dim(), toDType(cache->dtype())});
  kv = KvCaches(std::move(specs), contextLength);

  // Inputs hold max_tokens i32 (rounded to a cache line); the logits output
  // the most rows any entry point writes.
  int64_t maxTokens = 1, maxRows = 1;
  for (const fb::EntryPoint *entry : *artifact->entry_points()) {
    maxTokens = std::max<int64_t>(maxTokens, entry->max_tokens());
    if (entry->logits_rows())
      maxRows = std::max(maxRows,
                         evaluate(*entry->logits_rows(), entry->max_tokens()));
  }
  const size_t inputBytes = static_cast<size_t>((maxTokens * 4 + 63) / 64 * 64);
  inputs[0] = AlignedBuffer(inputBytes, "token ids");
  inputs[1] = AlignedBuffer(inputBytes, "positions");
  logits = AlignedBuffer(static_cast<size_t>(maxRows * vocab * 4), "logits");

  if (const auto *bindings = artifact->weights())
    for (const fb::WeightBinding *binding : *bindings)
      weightCapacity.push_back(binding->bytes());
}

BufferArg Engine::Impl::planBuffer(const fb::BufferRef &ref,
                                   const EntryPlan &entry,
                                   const std::string &where) const {
  BufferArg arg;
  arg.kind = ref.kind();
  arg.index = ref.index();
  arg.offset = ref.offset();
  arg.elementSize = dtypeSize(toDType(ref.dtype()));
  if (const auto *shape = ref.shape())
    for (const fb::Dim *dim : *shape)
      arg.dims.push_back(*dim);
  const int rank = static_cast<int>(arg.dims.size());
  if (rank < memref::kMinRank || rank > memref::kMaxRank)
    fail(where + ": rank " + std::to_string(rank) + " (kernels take ranks " +
         std::to_string(memref::kMinRank) + ".." +
         std::to_string(memref::kMaxRank) + ")");
  if (arg.kind == fb::BufferKind::KvCache)
    arg.slots = kv.slots(arg.index / 2);
  if (arg.kind == fb::BufferKind::Output && rank == 2) {
    const int64_t width = evaluate(arg.dims[1], entry.maxTokens);
    if (width != vocab)
      fail(where + ": logits of width " + std::to_string(width) +
           ", but the vocabulary has " + std::to_string(vocab) + " tokens");
  }
  // Sizes only grow with T: both ends of 1..max_tokens bound every call.
  const uint64_t available = capacity(arg, entry);
  for (int64_t tokens : {int64_t{1}, entry.maxTokens}) {
    int64_t sizes[memref::kMaxRank];
    const uint64_t end =
        arg.offset + static_cast<uint64_t>(evaluateArg(arg, tokens, sizes));
    if (end > available || end < arg.offset)
      fail(where + ": " + fb::EnumNameBufferKind(arg.kind) + " buffer " +
           std::to_string(arg.index) + " is used up to byte " +
           std::to_string(end) + " at T=" + std::to_string(tokens) +
           ", past its " + std::to_string(available) + " bytes");
  }
  return arg;
}

uint64_t Engine::Impl::capacity(const BufferArg &arg,
                                const EntryPlan &entry) const {
  switch (arg.kind) {
  case fb::BufferKind::Arena:
    return entry.arena.size();
  case fb::BufferKind::Weight:
    return weightCapacity.at(arg.index);
  case fb::BufferKind::KvCache:
    return kv.bufferBytes(arg.index);
  case fb::BufferKind::Input:
    return inputs[arg.index].size();
  case fb::BufferKind::Output:
    return logits.size();
  }
  return 0;
}

void Engine::Impl::planEntries() {
  const int threads = pool->numThreads();
  const auto &entryPoints = *artifact->entry_points();
  entries.resize(entryPoints.size());
  for (flatbuffers::uoffset_t e = 0; e < entryPoints.size(); ++e) {
    const fb::EntryPoint &source = *entryPoints.Get(e);
    EntryPlan &entry = entries[e];
    entry.name = source.name()->str();
    entry.maxTokens = source.max_tokens();
    entry.arena = AlignedBuffer(source.arena_bytes(),
                                "arena of entry point '" + entry.name + "'");
    if (source.logits_rows())
      entry.logitsRows = *source.logits_rows();
    const int64_t rowsAtMax = evaluate(entry.logitsRows, entry.maxTokens);
    if (evaluate(entry.logitsRows, 1) < 1 ||
        (rowsAtMax != 1 && rowsAtMax < entry.maxTokens))
      fail("entry point '" + entry.name +
           "': logits_rows must be 1 (last token) or at least T");

    const auto *steps = source.steps();
    for (flatbuffers::uoffset_t s = 0; steps && s < steps->size(); ++s) {
      const fb::StepEntry &step = *steps->Get(s);
      std::string where =
          "entry point '" + entry.name + "', steps[" + std::to_string(s) + "]";
      if (const fb::Launch *launch = step.step_as_Launch()) {
        where += " (launch of '" +
                 artifact->kernels()->Get(launch->kernel())->name()->str() +
                 "', op " + quoted(launch->op()) + ")";
        LaunchPlan plan;
        plan.fn = kernels.at(launch->kernel());
        plan.parts = static_cast<int>(std::min<uint32_t>(
            launch->max_parts(), static_cast<uint32_t>(threads)));
        plan.parts = std::max(plan.parts, 1);
        const auto *buffers = launch->buffers();
        for (flatbuffers::uoffset_t b = 0; buffers && b < buffers->size(); ++b)
          plan.buffers.push_back(
              planBuffer(*buffers->Get(b), entry,
                         where + ": buffers[" + std::to_string(b) + "]"));
        if (const auto *scalars = launch->scalars())
          for (const fb::Scalar *scalar : *scalars) {
            plan.scalarKinds.push_back(scalar->kind());
            plan.scalarConstants.push_back(scalar->value());
          }
        entry.steps.emplace_back(std::move(plan));
      } else if (const fb::Copy *copy = step.step_as_Copy()) {
        where += " (copy)";
        CopyPlan plan{
            planBuffer(*copy->source(), entry, where + ": source"),
            planBuffer(*copy->destination(), entry, where + ": destination")};
        entry.steps.emplace_back(std::move(plan));
      } else {
        fail(where + ": a collective: multi-rank artifacts need the NCCL "
                     "runtime");
      }
    }
  }
  for (EntryPlan &entry : entries) {
    if (entry.name == "prefill")
      prefillEntry = &entry;
    else if (entry.name == "decode")
      decodeEntry = &entry;
  }
  if (!prefillEntry && !decodeEntry)
    fail("no entry point 'prefill' or 'decode'");
}

void Engine::Impl::bindAllWeights(const EngineOptions &options) {
  std::vector<WeightSpec> specs;
  if (const auto *bindings = artifact->weights())
    for (const fb::WeightBinding *binding : *bindings) {
      WeightSpec spec;
      spec.name = binding->name()->str();
      spec.stack = binding->stack();
      spec.firstExpert = binding->first_expert();
      if (binding->shape())
        spec.shape.assign(binding->shape()->begin(), binding->shape()->end());
      spec.dtype = toDType(binding->dtype());
      spec.transform = static_cast<WeightTransform>(binding->transform());
      spec.sliceDim = binding->slice_dim();
      spec.sliceCount = binding->slice_count();
      // The schema has no piece index: with one artifact per rank, the
      // rank's coordinate in its TP group is taken as rank % slice_count.
      spec.sliceIndex =
          spec.sliceCount > 0 ? artifact->rank() % spec.sliceCount : 0;
      spec.bytes = binding->bytes();
      specs.push_back(std::move(spec));
    }
  if (specs.empty())
    return;
  const fb::Model &model = *artifact->model();
  std::unique_ptr<WeightSource> source = openWeightSource(
      options.weights,
      model.config_json() ? model.config_json()->str() : std::string(),
      model.weight_format() ? model.weight_format()->str() : std::string());
  weights = bindWeights(specs, *source, pool.get(), options.progress);
}

void Engine::Impl::resolveAddresses() {
  for (EntryPlan &entry : entries) {
    auto resolve = [&](BufferArg &arg) {
      uint8_t *base = nullptr;
      switch (arg.kind) {
      case fb::BufferKind::Arena:
        base = entry.arena.data();
        break;
      case fb::BufferKind::Weight:
        base = weights.at(arg.index).data();
        break;
      case fb::BufferKind::KvCache:
        base = kv.buffer(arg.index);
        break;
      case fb::BufferKind::Input:
        base = inputs[arg.index].data();
        break;
      case fb::BufferKind::Output:
        base = logits.data();
        break;
      }
      arg.address = base ? base + arg.offset : nullptr;
    };
    for (StepPlan &step : entry.steps) {
      if (auto *copy = std::get_if<CopyPlan>(&step)) {
        resolve(copy->source);
        resolve(copy->destination);
        continue;
      }
      LaunchPlan &launch = std::get<LaunchPlan>(step);
      for (BufferArg &arg : launch.buffers)
        resolve(arg);
      // The argument arrays point into storage that no longer moves.
      const size_t numBuffers = launch.buffers.size();
      const size_t numScalars = launch.scalarKinds.size();
      launch.descriptors.resize(numBuffers);
      launch.scalarValues.assign(launch.parts * numScalars, 0);
      launch.args.assign(launch.parts * (numBuffers + numScalars), nullptr);
      for (int part = 0; part < launch.parts; ++part) {
        void **args = &launch.args[part * (numBuffers + numScalars)];
        for (size_t b = 0; b < numBuffers; ++b)
          args[b] = launch.descriptors[b].bytes;
        for (size_t s = 0; s < numScalars; ++s)
          args[numBuffers + s] = &launch.scalarValues[part * numScalars + s];
      }
    }
  }
}

void Engine::Impl::runLaunch(LaunchPlan &launch, int64_t tokens) {
  for (size_t b = 0; b < launch.buffers.size(); ++b) {
    const BufferArg &arg = launch.buffers[b];
    int64_t sizes[memref::kMaxRank];
    evaluateArg(arg, tokens, sizes);
    memref::buildDescriptor(launch.descriptors[b], arg.address, sizes,
                            static_cast<int>(arg.dims.size()));
  }
  const size_t numScalars = launch.scalarKinds.size();
  for (int part = 0; part < launch.parts; ++part)
    for (size_t s = 0; s < numScalars; ++s) {
      int64_t value = 0;
      switch (launch.scalarKinds[s]) {
      case fb::ScalarKind::Constant:
        value = launch.scalarConstants[s];
        break;
      case fb::ScalarKind::Tokens: // T + value: "tokens:-1" is the last row
        value = tokens + launch.scalarConstants[s];
        break;
      case fb::ScalarKind::PastTokens:
        value = past + launch.scalarConstants[s];
        break;
      case fb::ScalarKind::Part:
        value = part;
        break;
      case fb::ScalarKind::Parts:
        value = launch.parts;
        break;
      }
      launch.scalarValues[part * numScalars + s] = value;
    }
  const size_t stride = launch.buffers.size() + numScalars;
  if (launch.parts == 1) {
    launch.fn(launch.args.data());
    return;
  }
  pool->run(launch.parts,
            [&](int part) { launch.fn(launch.args.data() + part * stride); });
}

void Engine::Impl::run(EntryPlan &entry, const int32_t *tokens, int64_t count) {
  if (past + count > contextLength)
    throw RuntimeError("the context is full: " + std::to_string(past) +
                       " tokens + " + std::to_string(count) + " new exceed " +
                       std::to_string(contextLength) +
                       " (raise the context length)");
  auto *ids = reinterpret_cast<int32_t *>(inputs[0].data());
  auto *positions = reinterpret_cast<int32_t *>(inputs[1].data());
  for (int64_t t = 0; t < count; ++t) {
    ids[t] = tokens[t];
    positions[t] = static_cast<int32_t>(past + t);
  }
  for (StepPlan &step : entry.steps) {
    if (auto *launch = std::get_if<LaunchPlan>(&step)) {
      runLaunch(*launch, count);
      continue;
    }
    CopyPlan &copy = std::get<CopyPlan>(step);
    int64_t sizes[memref::kMaxRank];
    const int64_t bytes = evaluateArg(copy.source, count, sizes);
    if (bytes != evaluateArg(copy.destination, count, sizes))
      fail("entry point '" + entry.name +
           "': a copy's source and destination differ in size at T=" +
           std::to_string(count));
    if (bytes > 0)
      std::memmove(copy.destination.address, copy.source.address,
                   static_cast<size_t>(bytes));
  }
  past += count;
}

std::vector<float> Engine::Impl::lastLogits(const EntryPlan &entry,
                                            int64_t tokens) const {
  const int64_t rows = evaluate(entry.logitsRows, tokens);
  const int64_t row = rows == 1 ? 0 : tokens - 1;
  const auto *data = reinterpret_cast<const float *>(logits.data());
  return std::vector<float>(data + row * vocab, data + (row + 1) * vocab);
}

void Engine::Impl::checkTokens(const int32_t *tokens, int64_t count) const {
  for (int64_t t = 0; t < count; ++t)
    if (tokens[t] < 0 || tokens[t] >= vocab)
      throw RuntimeError("token id " + std::to_string(tokens[t]) +
                         " is outside the vocabulary 0.." +
                         std::to_string(vocab - 1));
}

int64_t defaultContextLength(const muse_spark::Config &config) {
  return std::min<int64_t>(kDefaultContextLength, config.maxPositionEmbeddings);
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

std::unique_ptr<Engine> Engine::load(const std::string &artifactPath,
                                     const EngineOptions &options) {
  return create(Artifact::load(artifactPath), options);
}

std::unique_ptr<Engine> Engine::create(Artifact artifact,
                                       const EngineOptions &options) {
  auto impl = std::make_unique<Impl>(std::move(artifact));
  // Cheap checks first, weights (the slow part) last.
  impl->checkTargetAndLayout();
  impl->parseModel(options);
  impl->loadKernels();
  impl->pool = std::make_unique<ThreadPool>(options.threads);
  impl->allocateBuffers();
  impl->planEntries();
  impl->bindAllWeights(options);
  impl->resolveAddresses();
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

std::vector<float> Engine::prefill(const std::vector<int32_t> &tokens) {
  Impl &impl = *impl_;
  if (tokens.empty())
    throw RuntimeError("prefill needs at least one token");
  impl.checkTokens(tokens.data(), static_cast<int64_t>(tokens.size()));
  const int64_t total = static_cast<int64_t>(tokens.size());
  if (impl.past + total > impl.contextLength)
    throw RuntimeError("the prompt's " + std::to_string(total) +
                       " tokens do not fit the context (" +
                       std::to_string(impl.past) + " of " +
                       std::to_string(impl.contextLength) + " used)");
  EntryPlan &entry = impl.prefillEntry ? *impl.prefillEntry : *impl.decodeEntry;
  int64_t done = 0, chunk = 0;
  while (done < total) {
    chunk = std::min(entry.maxTokens, total - done);
    impl.run(entry, tokens.data() + done, chunk);
    done += chunk;
  }
  return impl.lastLogits(entry, chunk);
}

std::vector<float> Engine::decode(int32_t token) {
  Impl &impl = *impl_;
  impl.checkTokens(&token, 1);
  EntryPlan &entry = impl.decodeEntry ? *impl.decodeEntry : *impl.prefillEntry;
  impl.run(entry, &token, 1);
  return impl.lastLogits(entry, 1);
}

int64_t Engine::pastTokens() const { return impl_->past; }

void Engine::reset() {
  impl_->past = 0;
  impl_->kv.clear();
}

const Artifact &Engine::artifact() const { return impl_->artifact; }
int64_t Engine::vocabSize() const { return impl_->vocab; }
int64_t Engine::contextLength() const { return impl_->contextLength; }
int Engine::numThreads() const { return impl_->pool->numThreads(); }

uint64_t Engine::weightBytes() const {
  uint64_t bytes = 0;
  for (const AlignedBuffer &weight : impl_->weights)
    bytes += weight.size();
  return bytes;
}

uint64_t Engine::kvCacheBytes() const { return impl_->kv.totalBytes(); }

uint64_t Engine::arenaBytes() const {
  uint64_t bytes = 0;
  for (const EntryPlan &entry : impl_->entries)
    bytes += entry.arena.size();
  return bytes;
}

} // namespace kiln
