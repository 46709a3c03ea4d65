// Loading an artifact, binding its weights, planning and running its entry
// points; the multi-rank parts are in EngineRanks.cpp, the state in
// EngineImpl.h.
#include "runtime/engine/Engine.h"

#include "runtime/cpu/RuntimeError.h"
#include "runtime/cuda/CudaDriverTable.h"
#include "runtime/engine/CpuBackend.h"
#include "runtime/engine/EngineCall.h"
#include "runtime/engine/EngineImpl.h"

#include "runtime/engine/DeviceGreedy.h"
#include "runtime/engine/DeviceSynthesis.h"
#include "runtime/engine/KvCache.h"
#include "runtime/engine/Sampler.h"
#include "runtime/engine/SyntheticWeights.h"
#include "runtime/engine/WeightSource.h"
#include "runtime/hip/HipDriverTable.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <thread>
#include <variant>

namespace kiln {

namespace {

// Weights are bound in batches of about this many bytes, each handed to the
// backend before the next is bound: a GPU's weights never all sit in host
// memory at once.
constexpr uint64_t kBindBatchBytes = uint64_t{1} << 30;

} // namespace

// The GPU: as asked, else this rank's on its machine.
static int deviceFor(const EngineOptions &options) {
  return options.device >= 0 ? options.device : localRank();
}

void Engine::Impl::createBackend(const EngineOptions &options) {
  if (artifact->target()->kind() == fb::TargetKind::NVPTX)
    backend = createCudaBackend(artifact, deviceFor(options));
  else if (artifact->target()->kind() == fb::TargetKind::AMDGCN)
    backend = createHipBackend(artifact, deviceFor(options));
  else
    backend = CpuBackend::create(artifact, *pool);
}

void Engine::Impl::parseModel(const EngineOptions &options) {
  model = readModelFacts(artifact);
  vocab = model.vocabSize;
  contextLength = options.contextLength;
  if (options.kvPages < 0)
    throw RuntimeError("KV pages " + std::to_string(options.kvPages) +
                       ": expected 0 (every context whole) or more");
  pageCount = options.kvPages;
  poolBytes = options.kvPoolBytes;
  if (pageCount > 0 && poolBytes > 0)
    throw RuntimeError("KV pages (" + std::to_string(pageCount) + ") and a KV pool of " +
                       std::to_string(poolBytes) + " bytes were both asked for: give one");
  if (contextLength == 0)
    contextLength = defaultContextLength(model);
  if (contextLength < 1 || contextLength > model.maxPositions)
    throw RuntimeError("context length " + std::to_string(contextLength) + " is outside 1.." +
                       std::to_string(model.maxPositions) +
                       " (the model's max_position_embeddings)");
}

void Engine::Impl::allocateBuffers() {
  for (const fb::EntryPoint *entry : *artifact->entry_points())
    conversations = std::max<int64_t>(conversations, entry->sequences());
  past.assign(static_cast<size_t>(conversations), 0);
  written.assign(static_cast<size_t>(conversations), 0);
  auto specOf = [](const fb::KvCache *cache) {
    return KvCacheSpec{cache->layer(),      cache->window(),         cache->kv_heads(),
                       cache->head_dim(),   toDType(cache->dtype()), cache->ring(),
                       cache->page_tokens()};
  };
  // A pool given in bytes: the pages that fit, a page being its positions'
  // K and V in every paged layer.
  if (poolBytes > 0) {
    uint64_t pageBytes = 0;
    if (const auto *caches = artifact->kv_caches())
      for (const fb::KvCache *cache : *caches)
        if (const KvCacheSpec spec = specOf(cache); spec.isPaged())
          pageBytes += 2 * kvCacheBufferBytes(spec, spec.pageTokens);
    if (pageBytes == 0)
      fail("a KV pool of " + std::to_string(poolBytes) +
           " bytes was asked for, but the artifact's KV caches are not paged (compile with "
           "kilnc --kv-page-tokens)");
    if (poolBytes / pageBytes < 1 || poolBytes / pageBytes > (uint64_t{1} << 31))
      fail("a KV pool of " + std::to_string(poolBytes) + " bytes holds " +
           std::to_string(poolBytes / pageBytes) + " pages of " + std::to_string(pageBytes) +
           " bytes: expected 1 to 2^31");
    pageCount = static_cast<int64_t>(poolBytes / pageBytes);
  }
  // Saving a conversation copies its rings and shares its pages: every
  // other cache must be a ring.
  bool everyGlobalPaged = true;
  if (const auto *caches = artifact->kv_caches())
    for (const fb::KvCache *cache : *caches) {
      const KvCacheSpec spec = specOf(cache);
      everyGlobalPaged = everyGlobalPaged && (spec.isPaged() || !spec.isGlobal());
      if (spec.isPaged() && !pages.paged()) {
        // The pool: every conversation's whole context unless asked for fewer.
        const int64_t perConversation = (contextLength + spec.pageTokens - 1) / spec.pageTokens;
        pages =
            KvPages(spec.pageTokens, pageCount > 0 ? pageCount : perConversation * conversations,
                    conversations, contextLength);
      }
      // A paged cache is the pool's pages and the scratch page; any other
      // holds every conversation's slots one after another.
      const uint64_t bytes =
          spec.isPaged()
              ? kvCacheBufferBytes(spec, (pages.pages() + 1) * spec.pageTokens)
              : kvCacheBufferBytes(spec, contextLength) * static_cast<uint64_t>(conversations);
      const std::string name = "KV cache of layer " + std::to_string(spec.layer);
      kvPaged.push_back(spec.isPaged());
      kvSlots.push_back(spec.isPaged() ? (pages.pages() + 1) * spec.pageTokens
                                       : kvCacheSlots(spec, contextLength));
      if (!spec.isGlobal())
        rollbackSlack = std::min(rollbackSlack, kvSlots.back() - int64_t{spec.window});
      kv.push_back(DeviceMemory::allocate(*backend, bytes, name + " (K)"));
      kv.push_back(DeviceMemory::allocate(*backend, bytes, name + " (V)"));
    }

  savable = pages.paged() && everyGlobalPaged;
  if (pageCount > 0 && !pages.paged())
    fail("KV pages were asked for (" + std::to_string(pageCount) +
         "), but the artifact's KV caches are not paged (compile with kilnc --kv-page-tokens)");
  // Inputs hold max_tokens i32 (rounded to a cache line); the logits output
  // the most rows any entry point writes.
  int64_t maxTokens = 1, maxRows = 1;
  for (const fb::EntryPoint *entry : *artifact->entry_points()) {
    maxTokens = std::max<int64_t>(maxTokens, int64_t(entry->max_tokens()) *
                                                 std::max<int64_t>(1, entry->token_split()));
    if (entry->logits_rows())
      maxRows = std::max(maxRows, evaluate(*entry->logits_rows(), entry->max_tokens()));
  }
  const uint64_t inputBytes = static_cast<uint64_t>((maxTokens * 4 + 63) / 64 * 64);
  inputs[0] = DeviceMemory::allocate(*backend, inputBytes, "token ids");
  inputs[1] = DeviceMemory::allocate(*backend, inputBytes, "positions");
  if (pages.paged())
    inputs[2] = DeviceMemory::allocate(*backend, pages.table().size() * 4, "KV page table");
  logits = DeviceMemory::allocate(*backend, static_cast<uint64_t>(maxRows * vocab * 4), "logits");
  greedy = DeviceGreedy::create(*backend, artifact, maxRows);
  hostInputs.assign(static_cast<size_t>(2 * maxTokens), 0);

  if (const auto *bindings = artifact->weights())
    for (const fb::WeightBinding *binding : *bindings)
      weightCapacity.push_back(binding->bytes());
}

BufferArg Engine::Impl::planBuffer(const fb::BufferRef &ref, const EntryPlan &entry,
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
         std::to_string(memref::kMinRank) + ".." + std::to_string(memref::kMaxRank) + ")");
  if (arg.kind == fb::BufferKind::KvCache && kvPaged.at(arg.index / 2)) {
    // Every entry sees the whole pool.
    arg.slots = kvSlots.at(arg.index / 2);
  } else if (arg.kind == fb::BufferKind::KvCache) {
    // A batched entry sees every conversation's cache, one after another.
    arg.slots = kvSlots.at(arg.index / 2) * (entry.sequences ? conversations : 1);
    if (!entry.sequences)
      arg.conversationBytes = kv.at(arg.index).size() / static_cast<uint64_t>(conversations);
  }
  if (arg.kind == fb::BufferKind::Input && arg.index == 2) {
    // The page table: every conversation's entries, or the one a call
    // continues.
    const int64_t perConversation = pages.pagesPerConversation();
    arg.slots = perConversation * (entry.sequences ? conversations : 1);
    if (!entry.sequences)
      arg.conversationBytes = static_cast<uint64_t>(perConversation) * 4;
  }
  // An exchange table's offset is its site in the members' memory; the
  // artifact's checks have placed it.
  if (arg.kind == fb::BufferKind::Exchange)
    return arg;
  // Sizes only grow with T: both ends of 1..max_tokens bound every call.
  const uint64_t available = capacity(arg, entry);
  for (int64_t tokens : {int64_t{1}, entry.maxTokens}) {
    int64_t sizes[memref::kMaxRank];
    const uint64_t end = arg.offset + static_cast<uint64_t>(evaluateArg(arg, tokens, sizes));
    if (end > available || end < arg.offset)
      fail(where + ": " + fb::EnumNameBufferKind(arg.kind) + " buffer " +
           std::to_string(arg.index) + " is used up to byte " + std::to_string(end) + " at T=" +
           std::to_string(tokens) + ", past its " + std::to_string(available) + " bytes");
  }
  return arg;
}

uint64_t Engine::Impl::capacity(const BufferArg &arg, const EntryPlan &entry) const {
  switch (arg.kind) {
  case fb::BufferKind::Arena:
    return entry.arenaBytes;
  case fb::BufferKind::Weight:
    return weightCapacity.at(arg.index);
  case fb::BufferKind::KvCache:
    return kv.at(arg.index).size();
  case fb::BufferKind::Input:
    return inputs[arg.index].size();
  case fb::BufferKind::Output:
    return logits.size();
  case fb::BufferKind::Exchange:
    break;
  }
  return 0;
}

LaunchPlan Engine::Impl::planLaunch(const fb::Launch &launch, const EntryPlan &entry,
                                    const std::string &where) const {
  LaunchPlan plan;
  LaunchSpec spec;
  spec.kernel = launch.kernel();
  if (const auto *kernels = artifact->kernels();
      kernels && launch.kernel() < kernels->size() && kernels->Get(launch.kernel())->name())
    plan.kernel = kernels->Get(launch.kernel())->name()->str();
  if (launch.op())
    plan.op = launch.op()->str();
  spec.where = where;
  const auto *buffers = launch.buffers();
  for (flatbuffers::uoffset_t b = 0; buffers && b < buffers->size(); ++b) {
    plan.buffers.push_back(
        planBuffer(*buffers->Get(b), entry, where + ": buffers[" + std::to_string(b) + "]"));
    spec.ranks.push_back(static_cast<int>(plan.buffers.back().dims.size()));
  }
  if (const auto *scalars = launch.scalars())
    for (const fb::Scalar *scalar : *scalars) {
      plan.scalarKinds.push_back(scalar->kind());
      plan.scalarConstants.push_back(scalar->value());
      plan.readsPast |= scalar->kind() == fb::ScalarKind::PastTokens;
    }
  spec.scalarKinds = plan.scalarKinds;
  // Tensor maps over the launch's buffers (the artifact's checks hold).
  if (const auto *maps = launch.tensor_maps())
    for (const fb::TensorMap *map : *maps) {
      TensorMapSpec tensorMap;
      tensorMap.buffer = map->buffer();
      tensorMap.dtype = toDType(buffers->Get(map->buffer())->dtype());
      if (map->box())
        tensorMap.box.assign(map->box()->begin(), map->box()->end());
      tensorMap.swizzle = map->swizzle();
      spec.tensorMaps.push_back(std::move(tensorMap));
    }
  plan.mapsTensors = !spec.tensorMaps.empty();
  plan.split = entry.split;
  spec.maxParts = launch.max_parts();
  spec.block = launch.block();
  spec.sharedBytes = artifact->kernels()->Get(launch.kernel())->shared_bytes();
  if (launch.grid()) {
    plan.grid = *launch.grid();
    // Dims only grow with T.
    spec.maxGrid = evaluate(*plan.grid, entry.maxTokens);
  }
  plan.arguments.resize(plan.buffers.size());
  plan.scalarValues.resize(plan.scalarKinds.size());
  plan.prepared = backend->prepare(spec);
  return plan;
}

void Engine::Impl::planEntries() {
  const auto &entryPoints = *artifact->entry_points();
  entries.resize(entryPoints.size());
  uint64_t arenaBytes = 0;
  for (const fb::EntryPoint *source : entryPoints)
    arenaBytes = std::max<uint64_t>(arenaBytes, source->arena_bytes());
  arena =
      DeviceMemory::allocate(*backend, arenaBytes, "activation arena (the largest entry point's)");
  for (flatbuffers::uoffset_t e = 0; e < entryPoints.size(); ++e) {
    const fb::EntryPoint &source = *entryPoints.Get(e);
    EntryPlan &entry = entries[e];
    entry.name = source.name()->str();
    entry.maxTokens = source.max_tokens();
    entry.sequences = source.sequences();
    entry.rows = std::max<int64_t>(1, source.sequence_rows());
    entry.split = std::max<int64_t>(1, source.token_split());
    // The artifact's checks have held sequences, rows and logits_rows to
    // what these calls rely on (Artifact.cpp, checkEntryShape).
    entry.arenaBytes = source.arena_bytes();
    if (source.logits_rows())
      entry.logitsRows = *source.logits_rows();

    const auto *steps = source.steps();
    for (flatbuffers::uoffset_t s = 0; steps && s < steps->size(); ++s) {
      const fb::StepEntry &step = *steps->Get(s);
      std::string where = "entry point '" + entry.name + "', steps[" + std::to_string(s) + "]";
      if (const fb::Launch *launch = step.step_as_Launch()) {
        where += " (launch of '" + artifact->kernels()->Get(launch->kernel())->name()->str() +
                 "', op " + quoted(launch->op()) + ")";
        entry.steps.emplace_back(planLaunch(*launch, entry, where));
      } else if (const fb::Copy *copy = step.step_as_Copy()) {
        where += " (copy)";
        CopyPlan plan{planBuffer(*copy->source(), entry, where + ": source"),
                      planBuffer(*copy->destination(), entry, where + ": destination")};
        entry.steps.emplace_back(std::move(plan));
      } else if (const fb::Collective *collective = step.step_as_Collective()) {
        entry.steps.emplace_back(planCollective(*collective, entry, where));
      }
    }
  }
  for (EntryPlan &entry : entries) {
    if (entry.name == "prefill")
      prefillEntry = &entry;
    else if (entry.name == "decode")
      decodeEntry = &entry;
    else if (entry.name == "verify_batch" && entry.sequences)
      verifyBatchEntry = &entry;
    else if (entry.sequences)
      batchEntry = &entry;
    else if (entry.split > 1)
      splitEntry = &entry;
    else if (entry.name == "verify")
      verifyEntry = &entry;
  }
}

void Engine::Impl::bindAllWeights(const EngineOptions &options) {
  // This rank's pieces (specs), and the whole model's tensors (modelSpecs:
  // an expert stack split over a group counts every member's experts).
  std::vector<WeightSpec> specs, modelSpecs;
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
      if (binding->slice_group() >= 0) {
        // This rank's piece: its index in the slice's group; of an expert
        // stack, its block of `stack` experts.
        const int index = memberships.at(static_cast<size_t>(binding->slice_group())).index;
        if (spec.sliceDim >= 0)
          spec.sliceIndex = index;
        else
          spec.firstExpert += static_cast<uint32_t>(index) * spec.stack;
      } else {
        // Schema 1.2: one artifact per rank, the piece rank % slice_count.
        spec.sliceIndex = spec.sliceCount > 0 ? artifact->rank() % spec.sliceCount : 0;
      }
      spec.bytes = binding->bytes();
      WeightSpec whole = spec;
      if (binding->slice_group() >= 0 && spec.sliceDim < 0) {
        whole.firstExpert = binding->first_expert();
        whole.stack *= static_cast<uint32_t>(
            memberships.at(static_cast<size_t>(binding->slice_group())).members.size());
      }
      modelSpecs.push_back(std::move(whole));
      specs.push_back(std::move(spec));
    }
  if (specs.empty())
    return;
  const fb::Model &model = *artifact->model();
  std::unique_ptr<WeightSource> source = openWeightSource(
      options.weights, model.config_json() ? model.config_json()->str() : std::string(),
      model.weight_format() ? model.weight_format()->str() : std::string());
  if (options.checkWeights && !dynamic_cast<const SyntheticWeightSource *>(source.get()))
    source = checkFiniteWeights(std::move(source));
  // Every tensor is checked before any is bound.
  checkDecoderTensors(modelSpecs, *source);
  checkWeights(specs, *source);

  // Synthetic weights (the source says so) may be made where they live.
  const auto *synthetic = dynamic_cast<const SyntheticWeightSource *>(source.get());
  const bool gpu = artifact->target()->kind() != fb::TargetKind::X86;
  const bool onDevice = synthetic && (options.synthesis == EngineOptions::Synthesis::Device ||
                                      (options.synthesis == EngineOptions::Synthesis::Auto && gpu &&
                                       hasSynthesisKernels(artifact)));
  if (onDevice) {
    weights =
        synthesizeWeights(*backend, artifact, *synthetic, specs, pool.get(),
                          static_cast<uint32_t>(pool ? pool->numThreads() : 1), options.progress);
    return;
  }

  uint64_t total = 0, done = 0;
  for (const WeightSpec &spec : specs)
    total += spec.bytes;
  BindProgress progress;
  if (options.progress)
    progress = [&](uint64_t batchDone, uint64_t) { options.progress(done + batchDone, total); };
  // Bindings in the order their first tensors lie in the checkpoint: shard
  // by shard, each front to back (synthetic weights: the artifact's order).
  std::vector<size_t> order(specs.size());
  std::vector<std::optional<std::pair<size_t, uint64_t>>> where(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    order[i] = i;
    where[i] = source->storageOrder(tensorNames(specs[i]).front());
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (where[a] && where[b])
      return *where[a] < *where[b];
    return where[a].has_value() && !where[b].has_value();
  });
  weights.resize(specs.size());
  for (size_t first = 0; first < specs.size();) {
    size_t end = first + 1;
    uint64_t batchBytes = specs[order[first]].bytes;
    while (end < specs.size() && batchBytes + specs[order[end]].bytes <= kBindBatchBytes)
      batchBytes += specs[order[end++]].bytes;
    std::vector<WeightSpec> batch;
    for (size_t k = first; k < end; ++k)
      batch.push_back(specs[order[k]]);
    std::vector<AlignedBuffer> bound = bindWeights(batch, *source, pool.get(), progress);
    for (size_t i = 0; i < bound.size(); ++i) {
      const uint64_t size = bound[i].size();
      weights[order[first + i]] = DeviceMemory(
          *backend, backend->adopt(std::move(bound[i]), "weight '" + batch[i].name + "'"), size);
    }
    done += batchBytes;
    first = end;
  }
}

void Engine::Impl::resolveAddresses() {
  for (EntryPlan &entry : entries) {
    auto resolve = [&](BufferArg &arg) {
      DeviceAddress base = 0;
      switch (arg.kind) {
      case fb::BufferKind::Arena:
        base = arena.address();
        break;
      case fb::BufferKind::Weight:
        base = weights.at(arg.index).address();
        break;
      case fb::BufferKind::KvCache:
        base = kv.at(arg.index).address();
        break;
      case fb::BufferKind::Input:
        base = inputs[arg.index].address();
        break;
      case fb::BufferKind::Output:
        base = logits.address();
        break;
      case fb::BufferKind::Exchange:
        arg.address = exchangeTable(arg.index, arg.offset);
        return;
      }
      arg.address = base ? base + arg.offset : 0;
    };
    for (StepPlan &step : entry.steps) {
      if (auto *copy = std::get_if<CopyPlan>(&step)) {
        resolve(copy->source);
        resolve(copy->destination);
      } else if (auto *collective = std::get_if<CollectivePlan>(&step)) {
        resolve(collective->source);
        resolve(collective->destination);
      } else {
        for (BufferArg &arg : std::get<LaunchPlan>(step).buffers)
          resolve(arg);
      }
    }
  }
}

LaunchCall Engine::Impl::evaluateLaunch(LaunchPlan &launch, int64_t tokens) const {
  for (size_t b = 0; b < launch.buffers.size(); ++b) {
    const BufferArg &arg = launch.buffers[b];
    BufferArgument &argument = launch.arguments[b];
    argument.address = arg.address + static_cast<uint64_t>(current) * arg.conversationBytes;
    argument.rank = static_cast<int>(arg.dims.size());
    evaluateArg(arg, tokens, argument.sizes);
  }
  for (size_t s = 0; s < launch.scalarKinds.size(); ++s) {
    int64_t value = 0; // Part and Parts: the backend's
    switch (launch.scalarKinds[s]) {
    case fb::ScalarKind::Constant:
      value = launch.scalarConstants[s];
      break;
    case fb::ScalarKind::Tokens: // T + value: "tokens:-1" is the last row
      value = tokens + launch.scalarConstants[s];
      break;
    case fb::ScalarKind::PastTokens:
      value = past[current] + launch.scalarConstants[s];
      break;
    case fb::ScalarKind::SequenceTokens: // the whole sequence's rows
      value = tokens * launch.split + launch.scalarConstants[s];
      break;
    case fb::ScalarKind::GroupIndex:
      value = memberships.at(static_cast<size_t>(launch.scalarConstants[s])).index;
      break;
    case fb::ScalarKind::TensorMap: // its map's index: the backend passes the map
      value = launch.scalarConstants[s];
      break;
    case fb::ScalarKind::Part:
    case fb::ScalarKind::Parts:
      break;
    }
    launch.scalarValues[s] = value;
  }
  LaunchCall call;
  call.buffers = launch.arguments.data();
  call.scalars = launch.scalarValues.data();
  call.grid = launch.grid ? evaluate(*launch.grid, tokens) : 1;
  return call;
}

void Engine::Impl::runSteps(EntryPlan &entry, int64_t tokens, StepClock *clock) {
  if (clock)
    clock->mark();
  for (StepPlan &step : entry.steps) {
    if (auto *launch = std::get_if<LaunchPlan>(&step)) {
      const LaunchCall call = evaluateLaunch(*launch, tokens);
      if (call.grid > 0) // a GPU launch of no blocks is skipped
        backend->launch(*launch->prepared, call);
      if (clock)
        clock->mark();
      continue;
    }
    if (auto *collective = std::get_if<CollectivePlan>(&step)) {
      runCollective(*collective, tokens);
      if (clock)
        clock->mark();
      continue;
    }
    CopyPlan &copy = std::get<CopyPlan>(step);
    int64_t sizes[memref::kMaxRank];
    const int64_t bytes = evaluateArg(copy.source, tokens, sizes);
    if (bytes != evaluateArg(copy.destination, tokens, sizes))
      fail("entry point '" + entry.name +
           "': a copy's source and destination differ in size at T=" + std::to_string(tokens));
    if (bytes > 0)
      backend->copy(copy.destination.address, copy.source.address, static_cast<uint64_t>(bytes));
  }
}

void Engine::Impl::updateRecording(EntryPlan &entry, int64_t tokens) {
  // Between recorded calls only the PastTokens scalars change (and the
  // inputs, uploaded before each replay), and tensor maps that a call of
  // another conversation re-encoded.
  for (StepPlan &step : entry.steps)
    if (auto *launch = std::get_if<LaunchPlan>(&step);
        launch && (launch->readsPast || launch->mapsTensors)) {
      const LaunchCall call = evaluateLaunch(*launch, tokens);
      if (call.grid > 0) // skipped launches were not recorded
        entry.recording->update(*launch->prepared, call);
    }
}

void Engine::Impl::run(EntryPlan &entry, const int32_t *tokens, int64_t count, bool decodeCall,
                       StepClock *clock, const std::vector<bool> *stepped) {
  if (alone)
    fail("rank " + std::to_string(rank.rank) + " of " + std::to_string(rank.world) +
         " was loaded alone (EngineOptions::loadAlone): it runs only in its job");
  int32_t *ids = hostInputs.data();
  int32_t *positions = ids + count;
  if (entry.sequences) {
    // Token t is row t % rows of conversation t / rows.
    const int64_t rows = entry.rows;
    for (int64_t c = 0; c < count / rows; ++c)
      if (past[c] + rows > contextLength)
        throw RuntimeError("the context of conversation " + std::to_string(c) + " is full (" +
                           std::to_string(past[c]) + " tokens of " + std::to_string(contextLength) +
                           (rows > 1 ? ", a call of " + std::to_string(rows) + " rows" : "") +
                           "; raise the context length)");
    for (int64_t t = 0; t < count; ++t) {
      ids[t] = tokens[t];
      positions[t] = static_cast<int32_t>(past[t / rows] + t % rows);
    }
  } else {
    // A split entry's call of T takes split * T tokens, all in the inputs.
    const int64_t n = count * entry.split;
    positions = ids + n;
    const int64_t before = past[current];
    if (before + n > contextLength)
      throw RuntimeError("the context is full: " + std::to_string(before) + " tokens + " +
                         std::to_string(n) + " new exceed " + std::to_string(contextLength) +
                         " (raise the context length)");
    for (int64_t t = 0; t < n; ++t) {
      ids[t] = tokens[t];
      positions[t] = static_cast<int32_t>(before + t);
    }
  }
  // The pages the call writes, all taken or none (a full pool throws here,
  // before anything ran).
  if (pages.paged()) {
    if (entry.sequences) {
      // An idle row takes no page but writes at its past like the others,
      // so a shared page there is copied for it too.
      int64_t need = 0;
      for (int64_t c = 0; c < count / entry.rows; ++c) {
        need += writesSharedPage(c) ? 1 : 0;
        if (!stepped || (*stepped)[static_cast<size_t>(c)])
          need += pages.lacking(c, past[c] + entry.rows);
      }
      if (need > pages.freePages())
        pagesFull(need);
      for (int64_t c = 0; c < count / entry.rows; ++c) {
        if (!stepped || (*stepped)[static_cast<size_t>(c)])
          reservePages(c, past[c] + entry.rows);
        else if (writesSharedPage(c))
          copyWritePage(c);
      }
    } else {
      reservePages(current, past[current] + count * entry.split);
    }
    copyPageTable();
  }
  const uint64_t inputBytes = static_cast<uint64_t>(count * entry.split) * 4;
  backend->upload(inputs[0].address(), ids, inputBytes);
  backend->upload(inputs[1].address(), positions, inputBytes);
  // A recorded step keeps the addresses and T it was recorded with:
  // conversation 0's caches at T = 1, or a full batch.
  const bool recordable = decodeCall && backend->canRecord() &&
                          (entry.sequences ? count == entry.maxTokens : count == 1 && current == 0);
  if (clock) {
    runSteps(entry, count, clock);
    if (!recordable)
      entry.decodeCalls = 0;
  } else if (recordable) {
    if (entry.recording) {
      updateRecording(entry, count);
      entry.recording->replay();
    } else if (entry.decodeCalls > 0) {
      entry.recording = backend->record([&] { runSteps(entry, count); });
      entry.recording->replay();
    } else {
      runSteps(entry, count);
    }
    ++entry.decodeCalls;
  } else {
    runSteps(entry, count);
    entry.decodeCalls = 0;
  }
  backend->synchronize();
  if (entry.sequences) {
    // An idle row leaves its conversation as it was (Engine.h says why its
    // write needs no mark in `written`).
    for (int64_t c = 0; c < count / entry.rows; ++c)
      if (!stepped || (*stepped)[static_cast<size_t>(c)])
        written[c] = std::max(written[c], past[c] += entry.rows);
  } else {
    past[current] += count * entry.split;
    written[current] = std::max(written[current], past[current]);
  }
}

void Engine::Impl::reservePages(int64_t conversation, int64_t positions) {
  const bool copy = writesSharedPage(conversation);
  const int64_t need = pages.lacking(conversation, positions) + (copy ? 1 : 0);
  if (need > pages.freePages())
    pagesFull(need);
  if (copy)
    copyWritePage(conversation);
  pages.reserve(conversation, positions);
}

void Engine::Impl::pagesFull(int64_t need) const {
  throw RuntimeError("the KV cache's page pool is full: the call needs " + std::to_string(need) +
                     " more pages of " + std::to_string(pages.pageTokens()) + " positions, " +
                     std::to_string(pages.freePages()) + " of " + std::to_string(pages.pages()) +
                     " are free (free a conversation, or give the engine more pages)");
}

void Engine::Impl::copyPageTable() {
  if (!pages.changed())
    return;
  backend->upload(inputs[2].address(), pages.table().data(), pages.table().size() * 4);
  pages.markCopied();
}

std::vector<float> Engine::Impl::lastLogits(const EntryPlan &entry, int64_t tokens) {
  const int64_t rows = evaluate(entry.logitsRows, tokens);
  return logitRows(rows == 1 ? 0 : tokens - 1, 1);
}

std::vector<float> Engine::Impl::logitRows(int64_t first, int64_t count) {
  std::vector<float> result(static_cast<size_t>(count * vocab));
  backend->download(result.data(), logits.address() + static_cast<uint64_t>(first * vocab * 4),
                    result.size() * 4);
  return result;
}

void Engine::Impl::checkTokens(const int32_t *tokens, int64_t count) const {
  for (int64_t t = 0; t < count; ++t)
    if (tokens[t] < 0 || tokens[t] >= vocab)
      throw RuntimeError("token id " + std::to_string(tokens[t]) +
                         " is outside the vocabulary 0.." + std::to_string(vocab - 1));
}

// Threads for the pool: as asked, else the machine's shared by the ranks
// started on it (KILN_LOCAL_WORLD_SIZE): CPU ranks that oversubscribe the
// cores stall each other at every collective.
static int threadsFor(const EngineOptions &options) {
  if (options.threads > 0)
    return options.threads;
  const int ranks = localWorldSize();
  const int hardware = static_cast<int>(std::thread::hardware_concurrency());
  return ranks > 1 ? std::max(1, hardware / ranks) : 0;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

std::unique_ptr<Engine> Engine::load(const std::string &artifactPath,
                                     const EngineOptions &options) {
  return create(Artifact::load(artifactPath), options);
}

std::unique_ptr<Engine> Engine::create(Artifact artifact, const EngineOptions &options) {
  auto impl = std::make_unique<Impl>(std::move(artifact));
  // Cheap checks first, weights (the slow part) last.
  impl->pool = std::make_unique<ThreadPool>(threadsFor(options));
  impl->createBackend(options);
  impl->joinLayout(options);
  impl->parseModel(options);
  impl->backend->loadKernels(impl->artifact);
  impl->allocateBuffers();
  impl->planEntries();
  impl->connectRanks();
  impl->bindAllWeights(options);
  impl->resolveAddresses();
  impl->backend->synchronize();
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

std::vector<float> Engine::prefill(const std::vector<int32_t> &tokens) {
  return prefill(0, tokens);
}

std::vector<float> Engine::decode(int32_t token) { return decode(0, token); }

void Engine::Impl::checkConversation(int64_t conversation) const {
  if (conversation < 0 || conversation >= conversations)
    throw RuntimeError("conversation " + std::to_string(conversation) + " is outside 0.." +
                       std::to_string(conversations - 1) +
                       (conversations == 1 ? " (the artifact has no decode_batch entry: "
                                             "compile with kilnc --decode-batch N)"
                                           : ""));
}

void Engine::Impl::select(int64_t conversation) {
  checkConversation(conversation);
  current = conversation;
}

std::vector<float> Engine::prefill(int64_t conversation, const std::vector<int32_t> &tokens) {
  Impl &impl = *impl_;
  if (impl.observer)
    impl.observer(EngineCall{EngineCall::Kind::Prefill, conversation, 0, tokens, {}, {}});
  impl.select(conversation);
  if (tokens.empty())
    throw RuntimeError("prefill needs at least one token");
  impl.checkTokens(tokens.data(), static_cast<int64_t>(tokens.size()));
  const int64_t total = static_cast<int64_t>(tokens.size());
  const int64_t used = impl.past[conversation];
  if (used + total > impl.contextLength)
    throw RuntimeError("the prompt's " + std::to_string(total) +
                       " tokens do not fit the context (" + std::to_string(used) + " of " +
                       std::to_string(impl.contextLength) + " used)");
  // The whole prompt's pages before its first chunk: a prompt the pool
  // cannot hold changes nothing.
  if (impl.pages.paged())
    impl.reservePages(conversation, used + total);
  EntryPlan &whole = impl.prefillEntry ? *impl.prefillEntry : *impl.decodeEntry;
  EntryPlan *entry = &whole;
  int64_t done = 0, chunk = 0;
  while (done < total) {
    // Sequence parallelism takes chunks of a multiple of its split; the
    // rest goes through the whole-sequence prefill.
    EntryPlan *split = impl.splitEntry;
    if (split && total - done >= split->split) {
      const int64_t local = std::min(split->maxTokens, (total - done) / split->split);
      impl.run(*split, tokens.data() + done, local, false);
      entry = split;
      chunk = local;
      done += local * split->split;
      continue;
    }
    entry = &whole;
    chunk = std::min(whole.maxTokens, total - done);
    impl.run(whole, tokens.data() + done, chunk, false);
    done += chunk;
  }
  return impl.lastLogits(*entry, chunk);
}

std::vector<float> Engine::decode(int64_t conversation, int32_t token) {
  Impl &impl = *impl_;
  if (impl.observer)
    impl.observer(EngineCall{EngineCall::Kind::Decode, conversation, 0, {token}, {}, {}});
  return impl.lastLogits(impl.runDecode(conversation, token), 1);
}

EntryPlan &Engine::Impl::runDecode(int64_t conversation, int32_t token) {
  select(conversation);
  checkTokens(&token, 1);
  EntryPlan &entry = decodeEntry ? *decodeEntry : *prefillEntry;
  run(entry, &token, 1, true);
  return entry;
}

int32_t Engine::decodeGreedy(int64_t conversation, int32_t token) {
  Impl &impl = *impl_;
  if (impl.observer)
    impl.observer(EngineCall{EngineCall::Kind::DecodeGreedy, conversation, 0, {token}, {}, {}});
  impl.runDecode(conversation, token);
  return impl.chooseGreedy(1)[0];
}

std::vector<float> Engine::decodeBatch(const std::vector<int32_t> &tokens) {
  Impl &impl = *impl_;
  if (impl.observer)
    impl.observer(EngineCall{EngineCall::Kind::DecodeBatch, 0, 0, tokens, {}, {}});
  impl.runBatch(tokens, nullptr);
  return impl.logitRows(0, static_cast<int64_t>(tokens.size()));
}

std::vector<int32_t> Engine::decodeBatchGreedy(const std::vector<int32_t> &tokens) {
  Impl &impl = *impl_;
  if (impl.observer)
    impl.observer(EngineCall{EngineCall::Kind::DecodeBatchGreedy, 0, 0, tokens, {}, {}});
  impl.runBatch(tokens, nullptr);
  return impl.chooseGreedy(static_cast<int64_t>(tokens.size()));
}

std::vector<int32_t> Engine::decodeBatchGreedy(const std::vector<int32_t> &tokens,
                                               const std::vector<bool> &stepped) {
  Impl &impl = *impl_;
  if (impl.observer)
    impl.observer(EngineCall{EngineCall::Kind::DecodeBatchGreedy, 0, 0, tokens, stepped, {}});
  impl.checkStepFlags(tokens, stepped);
  impl.runBatch(tokens, nullptr, &stepped);
  return impl.chooseGreedy(static_cast<int64_t>(tokens.size()));
}

std::vector<int32_t> Engine::Impl::chooseGreedy(int64_t count) {
  if (greedy)
    return greedy->choose(logits.address(), count, vocab);
  const std::vector<float> rows = logitRows(0, count);
  std::vector<int32_t> chosen(static_cast<size_t>(count));
  for (int64_t c = 0; c < count; ++c)
    chosen[size_t(c)] = argmax(rows.data() + c * vocab, static_cast<size_t>(vocab));
  return chosen;
}

std::vector<float> Engine::decodeBatch(const std::vector<int32_t> &tokens,
                                       const std::vector<bool> &stepped) {
  Impl &impl = *impl_;
  if (impl.observer)
    impl.observer(EngineCall{EngineCall::Kind::DecodeBatch, 0, 0, tokens, stepped, {}});
  impl.checkStepFlags(tokens, stepped);
  impl.runBatch(tokens, nullptr, &stepped);
  return impl.logitRows(0, static_cast<int64_t>(tokens.size()));
}

void Engine::Impl::checkStepFlags(const std::vector<int32_t> &tokens,
                                  const std::vector<bool> &stepped) const {
  if (stepped.size() != tokens.size())
    throw RuntimeError("decodeBatch: " + std::to_string(stepped.size()) + " step flags for " +
                       std::to_string(tokens.size()) + " tokens (one a conversation)");
}

void Engine::Impl::runBatch(const std::vector<int32_t> &tokens, StepClock *clock,
                            const std::vector<bool> *stepped) {
  if (!batchEntry)
    fail("the artifact has no decode_batch entry (compile with kilnc --decode-batch N)");
  const auto count = static_cast<int64_t>(tokens.size());
  if (count < 1 || count > batchEntry->maxTokens)
    throw RuntimeError("decodeBatch takes 1 to " + std::to_string(batchEntry->maxTokens) +
                       " tokens (one per conversation), not " + std::to_string(count));
  checkTokens(tokens.data(), count);
  current = 0;
  run(*batchEntry, tokens.data(), count, true, clock, stepped);
}

int64_t Engine::conversations() const { return impl_->conversations; }

namespace {

// The launches and collectives of `entry` in order, each with its interval
// from `clock`; a collective's kernel is "collective:<kind>".
std::vector<Engine::StepTime> launchTimes(const EntryPlan &entry, StepClock &clock) {
  const std::vector<double> intervals = clock.intervals();
  std::vector<Engine::StepTime> times;
  size_t next = 0;
  for (const StepPlan &step : entry.steps) {
    if (std::holds_alternative<CopyPlan>(step))
      continue;
    if (next >= intervals.size())
      break;
    if (const auto *launch = std::get_if<LaunchPlan>(&step)) {
      times.push_back({launch->kernel, launch->op, intervals[next++]});
    } else {
      const auto &collective = std::get<CollectivePlan>(step);
      const std::string kind = collective.what.substr(0, collective.what.find(' '));
      const size_t open = collective.what.find('\''), close = collective.what.find('\'', open + 1);
      times.push_back({"collective:" + kind,
                       open == std::string::npos
                           ? std::string()
                           : collective.what.substr(open + 1, close - open - 1),
                       intervals[next++]});
    }
  }
  return times;
}

} // namespace

std::vector<Engine::StepTime> Engine::profileDecode(int32_t token) {
  Impl &impl = *impl_;
  impl.checkTokens(&token, 1);
  impl.current = 0;
  EntryPlan &entry = impl.decodeEntry ? *impl.decodeEntry : *impl.prefillEntry;
  std::unique_ptr<StepClock> clock = impl.backend->clock();
  impl.run(entry, &token, 1, true, clock.get());
  return launchTimes(entry, *clock);
}

std::vector<Engine::StepTime> Engine::profilePrefill(const std::vector<int32_t> &tokens) {
  Impl &impl = *impl_;
  EntryPlan &entry = impl.prefillEntry ? *impl.prefillEntry : *impl.decodeEntry;
  const auto count = static_cast<int64_t>(tokens.size());
  if (count < 1 || count > entry.maxTokens)
    throw RuntimeError("profilePrefill takes 1 to " + std::to_string(entry.maxTokens) +
                       " tokens (one prefill call), not " + std::to_string(count));
  impl.current = 0;
  if (impl.past[0] + count > impl.contextLength)
    throw RuntimeError("the " + std::to_string(count) + " tokens do not fit the context");
  impl.checkTokens(tokens.data(), count);
  std::unique_ptr<StepClock> clock = impl.backend->clock();
  impl.run(entry, tokens.data(), count, false, clock.get());
  return launchTimes(entry, *clock);
}

std::vector<Engine::StepTime> Engine::profileDecodeBatch(const std::vector<int32_t> &tokens) {
  std::unique_ptr<StepClock> clock = impl_->backend->clock();
  impl_->runBatch(tokens, clock.get());
  return launchTimes(*impl_->batchEntry, *clock);
}

std::vector<float> Engine::verify(int64_t conversation, const std::vector<int32_t> &tokens) {
  Impl &impl = *impl_;
  if (impl.observer)
    impl.observer(EngineCall{EngineCall::Kind::Verify, conversation, 0, tokens, {}, {}});
  impl.select(conversation);
  if (!impl.verifyEntry)
    throw RuntimeError("the artifact has no verify entry point (compile it with kilnc "
                       "--verify-tokens N)");
  EntryPlan &entry = *impl.verifyEntry;
  const auto count = static_cast<int64_t>(tokens.size());
  if (count < 1 || count > entry.maxTokens)
    throw RuntimeError("a verify call takes 1 to " + std::to_string(entry.maxTokens) +
                       " tokens, got " + std::to_string(count));
  impl.checkTokens(tokens.data(), count);
  impl.run(entry, tokens.data(), count, false);
  return impl.logitRows(0, count);
}

std::vector<float> Engine::verifyBatch(const std::vector<std::vector<int32_t>> &tokens) {
  Impl &impl = *impl_;
  if (impl.observer) {
    EngineCall call{EngineCall::Kind::VerifyBatch, 0, 0, {}, {}, {}};
    for (const std::vector<int32_t> &row : tokens) {
      call.tokens.insert(call.tokens.end(), row.begin(), row.end());
      call.rowLengths.push_back(static_cast<uint32_t>(row.size()));
    }
    impl.observer(call);
  }
  if (!impl.verifyBatchEntry)
    throw RuntimeError("the artifact has no verify_batch entry point (compile it with kilnc "
                       "--verify-tokens N --decode-batch M)");
  EntryPlan &entry = *impl.verifyBatchEntry;
  const auto count = static_cast<int64_t>(tokens.size());
  if (count < 1 || count > entry.sequences)
    throw RuntimeError("verifyBatch takes 1 to " + std::to_string(entry.sequences) +
                       " conversations, not " + std::to_string(count));
  // Each conversation's rows, padded with its last token: the padding's K/V
  // go past its tokens and are dropped below.
  std::vector<int32_t> ids(static_cast<size_t>(count * entry.rows));
  for (int64_t c = 0; c < count; ++c) {
    const std::vector<int32_t> &mine = tokens[static_cast<size_t>(c)];
    if (mine.empty() || static_cast<int64_t>(mine.size()) > entry.rows)
      throw RuntimeError("verifyBatch: conversation " + std::to_string(c) + " has " +
                         std::to_string(mine.size()) + " tokens; a call takes 1 to " +
                         std::to_string(entry.rows) + " of each");
    impl.checkTokens(mine.data(), static_cast<int64_t>(mine.size()));
    for (int64_t j = 0; j < entry.rows; ++j)
      ids[static_cast<size_t>(c * entry.rows + j)] =
          mine[std::min(static_cast<size_t>(j), mine.size() - 1)];
  }
  impl.current = 0;
  impl.run(entry, ids.data(), count * entry.rows, false);
  for (int64_t c = 0; c < count; ++c)
    impl.past[c] -= entry.rows - static_cast<int64_t>(tokens[static_cast<size_t>(c)].size());
  return impl.logitRows(0, count * entry.rows);
}

int64_t Engine::verifyTokens() const {
  return impl_->verifyEntry ? impl_->verifyEntry->maxTokens : 0;
}

bool Engine::canRollback(int64_t conversation, int64_t keep) const {
  const Impl &impl = *impl_;
  impl.checkConversation(conversation);
  return keep >= 0 && keep <= impl.past[conversation] &&
         impl.written[conversation] - keep <= impl.rollbackSlack;
}

void Engine::observeCalls(std::function<void(const EngineCall &)> observer) {
  impl_->observer = std::move(observer);
}

void Engine::rollback(int64_t conversation, int64_t keep) {
  Impl &impl = *impl_;
  if (impl.observer)
    impl.observer(EngineCall{EngineCall::Kind::Rollback, conversation, keep, {}, {}, {}});
  if (!canRollback(conversation, keep)) {
    // Why not, by the two conditions canRollback checks.
    const std::string what = "rollback of conversation " + std::to_string(conversation) + " to " +
                             std::to_string(keep) + " tokens: ";
    const int64_t past = impl.past[conversation];
    if (keep < 0 || keep > past)
      throw RuntimeError(what + "it holds " + std::to_string(past));
    // Positions from keep on were written over ring slots that held earlier
    // ones: the window before keep must not be among them.
    throw RuntimeError(what + "positions up to " + std::to_string(impl.written[conversation]) +
                       " were written, and the sliding layers' rings keep " +
                       std::to_string(impl.rollbackSlack) +
                       " positions beyond their windows (compile with a larger kilnc "
                       "--verify-tokens)");
  }
  impl.past[conversation] = keep;
  if (impl.pages.paged())
    impl.pages.release(conversation, keep);
}

int64_t Engine::pastTokens(int64_t conversation) const {
  impl_->checkConversation(conversation);
  return impl_->past[conversation];
}

void Engine::reset() {
  Impl &impl = *impl_;
  if (impl.observer)
    impl.observer(EngineCall{EngineCall::Kind::Reset, 0, 0, {}, {}, {}});
  std::fill(impl.past.begin(), impl.past.end(), 0);
  std::fill(impl.written.begin(), impl.written.end(), 0);
  if (impl.pages.paged())
    for (int64_t c = 0; c < impl.conversations; ++c)
      impl.pages.release(c, 0);
  // The saved conversations' pages are zeroed too: they go.
  for (auto &[number, one] : impl.saved)
    impl.pages.drop(one.pages);
  impl.saved.clear();
  for (const DeviceMemory &buffer : impl.kv)
    impl.backend->fill(buffer.address(), 0, buffer.size());
  impl.backend->synchronize();
}

void Engine::forget(int64_t conversation) {
  if (impl_->observer)
    impl_->observer(EngineCall{EngineCall::Kind::Forget, conversation, 0, {}, {}, {}});
  impl_->checkConversation(conversation);
  impl_->past[conversation] = 0;
  impl_->written[conversation] = 0;
  if (impl_->pages.paged())
    impl_->pages.release(conversation, 0);
}

const Artifact &Engine::artifact() const { return impl_->artifact; }
int64_t Engine::vocabSize() const { return impl_->vocab; }
int64_t Engine::contextLength() const { return impl_->contextLength; }
int Engine::numThreads() const { return impl_->pool->numThreads(); }
std::string Engine::device() const { return impl_->backend->description(); }

uint64_t Engine::weightBytes() const {
  uint64_t bytes = 0;
  for (const DeviceMemory &weight : impl_->weights)
    bytes += weight.size();
  return bytes;
}

uint64_t Engine::kvCacheBytes() const {
  uint64_t bytes = 0;
  for (const DeviceMemory &buffer : impl_->kv)
    bytes += buffer.size();
  return bytes;
}

int64_t Engine::kvPageTokens() const { return impl_->pages.pageTokens(); }
int64_t Engine::kvPages() const { return impl_->pages.pages(); }
int64_t Engine::freeKvPages() const { return impl_->pages.freePages(); }
int64_t Engine::heldKvPages(int64_t conversation) const {
  impl_->checkConversation(conversation);
  return impl_->pages.paged() ? impl_->pages.held(conversation) : 0;
}

int Engine::rank() const { return impl_->rank.rank; }
int Engine::worldSize() const { return impl_->rank.world; }

uint64_t Engine::arenaBytes() const { return impl_->arena.size(); }

} // namespace kiln
