#include "runtime/engine/Engine.h"

#include "models/muse_spark/Config.h"
#include "runtime/cpu/RuntimeError.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/engine/Backend.h"
#include "runtime/engine/CpuBackend.h"
#include "runtime/engine/KvCache.h"
#include "runtime/engine/WeightSource.h"
#include "runtime/hip/HipBackend.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <thread>
#include <variant>

namespace kiln {
namespace fb = kiln::artifact;

namespace {

constexpr int64_t kDefaultContextLength = 4096;
// Weights are bound in batches of about this many bytes, each handed to the
// backend before the next is bound: a GPU's weights never all sit in host
// memory at once.
constexpr uint64_t kBindBatchBytes = uint64_t{1} << 30;

// One buffer argument of a step, resolved to memory once everything is
// allocated.
struct BufferArg {
  fb::BufferKind kind = fb::BufferKind::Arena;
  uint32_t index = 0;
  uint64_t offset = 0;
  std::vector<fb::Dim> dims;
  int64_t slots = -1; // KvCache: replaces dims[0]
  // KvCache in a one-conversation entry: the bytes of one conversation's
  // cache; a call for conversation c adds c times this to the address.
  uint64_t conversationBytes = 0;
  int64_t elementSize = 1;
  DeviceAddress address = 0; // the buffer's base + offset
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
  std::unique_ptr<PreparedLaunch> prepared;
  std::string kernel, op; // names, for profiles
  std::vector<BufferArg> buffers;
  std::vector<fb::ScalarKind> scalarKinds;
  std::vector<int64_t> scalarConstants;
  std::optional<fb::Dim> grid; // GPU launches
  bool readsPast = false;      // has a PastTokens scalar
  int64_t split = 1;           // its entry's token split (SequenceTokens)
  // The arguments of the current call.
  std::vector<BufferArgument> arguments;
  std::vector<int64_t> scalarValues;
};

struct CopyPlan {
  BufferArg source, destination;
};

struct CollectivePlan {
  fb::CollectiveKind kind = fb::CollectiveKind::AllReduce;
  BufferArg source, destination;
  int group = 0;
  int axis = 0;
  int groupSize = 1;
  std::string what; // "all_reduce for 'op' (entry point 'decode', steps[3])"
};

using StepPlan = std::variant<LaunchPlan, CopyPlan, CollectivePlan>;

struct EntryPlan {
  std::string name;
  int64_t maxTokens = 1;
  int64_t sequences = 0; // EntryPoint.sequences: token t continues conversation t
  // EntryPoint.token_split: the ranks that share a call's tokens (sequence
  // parallelism); a call of T takes split * T tokens.
  int64_t split = 1;
  uint64_t arenaBytes = 0; // its planned arena (in the engine's shared one)
  fb::Dim logitsRows{1, 0, 1};
  std::vector<StepPlan> steps;
  // Decode calls on a backend that records: the first runs the steps, the
  // second records and replays them, later ones replay.
  int64_t decodeCalls = 0;
  std::unique_ptr<Recording> recording;
};

std::string quoted(const flatbuffers::String *text) {
  return text ? "'" + text->str() + "'" : std::string("(none)");
}

} // namespace

struct Engine::Impl {
  Artifact artifact;
  muse_spark::Config config;
  int64_t vocab = 0;
  int64_t contextLength = 0;
  // Declared before the memory and plans, so that it outlives them.
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Backend> backend;
  // The collectives among the job's ranks: declared before the entry
  // points, whose CUDA graphs hold NCCL work, so that it outlives them
  // (NCCL's communicator waits for such graphs to go).
  std::unique_ptr<Collectives> comm;
  std::vector<DeviceMemory> weights;
  std::vector<uint64_t> weightCapacity; // binding bytes, known before binding
  std::vector<int64_t> kvSlots;         // per cache
  std::vector<DeviceMemory> kv;         // per KvCache buffer index
  DeviceMemory inputs[2];               // token ids, positions
  DeviceMemory logits;
  // One arena for every entry point, sized for the largest: calls never
  // overlap, and a call's arena contents start undefined.
  DeviceMemory arena;
  std::vector<EntryPlan> entries;
  EntryPlan *prefillEntry = nullptr;
  EntryPlan *decodeEntry = nullptr;
  EntryPlan *batchEntry = nullptr; // decode_batch
  EntryPlan *splitEntry = nullptr; // prefill_sp: tokens split over the TP group
  // Conversations the caches hold (the decode_batch entry's batch, or 1),
  // each one's tokens so far, and the one the next one-conversation call
  // continues.
  int64_t conversations = 1;
  std::vector<int64_t> past;
  int64_t current = 0;
  std::vector<int32_t> hostInputs; // a call's ids, then its positions
  // Multi-rank: this rank, where it sits in each comm group and the
  // staging buffer of gathers along an inner axis.
  RankInfo rank;
  std::vector<CommGroupSpec> groups;
  std::vector<GroupMembership> memberships;
  DeviceMemory gatherStaging;

  explicit Impl(Artifact loaded) : artifact(std::move(loaded)) {}

  [[noreturn]] void fail(const std::string &reason) const {
    throw RuntimeError(artifact.source() + ": " + reason);
  }

  void createBackend(const EngineOptions &options);
  // A multi-rank artifact: this process's rank and its comm groups.
  void joinLayout(const EngineOptions &options);
  CollectivePlan planCollective(const fb::Collective &collective, const EntryPlan &entry,
                                const std::string &where) const;
  void connectRanks();
  void runCollective(CollectivePlan &collective, int64_t tokens);
  void parseModel(const EngineOptions &options);
  void allocateBuffers();
  void planEntries();
  LaunchPlan planLaunch(const fb::Launch &launch, const EntryPlan &entry,
                        const std::string &where) const;
  BufferArg planBuffer(const fb::BufferRef &ref, const EntryPlan &entry,
                       const std::string &where) const;
  uint64_t capacity(const BufferArg &arg, const EntryPlan &entry) const;
  void bindAllWeights(const EngineOptions &options);
  void resolveAddresses();

  void run(EntryPlan &entry, const int32_t *tokens, int64_t count,
           bool decodeCall, StepClock *clock = nullptr);
  // With a clock: a mark before the first launch and after each.
  void runSteps(EntryPlan &entry, int64_t tokens, StepClock *clock = nullptr);
  LaunchCall evaluateLaunch(LaunchPlan &launch, int64_t tokens) const;
  void updateRecording(EntryPlan &entry, int64_t tokens);
  std::vector<float> lastLogits(const EntryPlan &entry, int64_t tokens);
  void checkTokens(const int32_t *tokens, int64_t count) const;
  // One call of the decode_batch entry for conversations 0 .. n-1.
  void runBatch(const std::vector<int32_t> &tokens, StepClock *clock);
  // Throws unless 0 <= conversation < conversations.
  void checkConversation(int64_t conversation) const;
  // The conversation one-conversation calls continue from now on.
  void select(int64_t conversation);
};

void Engine::Impl::createBackend(const EngineOptions &options) {
  if (artifact->target()->kind() == fb::TargetKind::NVPTX)
    backend = createCudaBackend(artifact, options.device);
  else if (artifact->target()->kind() == fb::TargetKind::AMDGCN)
    backend = createHipBackend(artifact, options.device);
  else
    backend = CpuBackend::create(artifact, *pool);
}

void Engine::Impl::joinLayout(const EngineOptions &options) {
  const fb::Layout &layout = *artifact->layout();
  if (layout.world() == 1)
    return;
  const std::string shape = std::to_string(layout.world()) + " ranks (tp " +
                            std::to_string(layout.tp()) + ", ep " + std::to_string(layout.ep()) +
                            ")";
  std::optional<RankInfo> info = options.rank ? options.rank : rankFromEnvironment();
  if (!info)
    fail("the artifact runs on " + shape +
         ", one process each: start it with kiln-run --nproc " + std::to_string(layout.world()) +
         ", or set KILN_RANK, KILN_WORLD_SIZE and KILN_RENDEZVOUS in each process");
  if (info->world != layout.world())
    fail("the artifact runs on " + shape + ", but this job has " + std::to_string(info->world) +
         ": start " + std::to_string(layout.world()) + " processes, or rebuild it for " +
         std::to_string(info->world) + " ranks (kilnc --tp/--ep)");
  rank = *info;
  if (const auto *specs = artifact->comm_groups())
    for (const fb::CommGroup *group : *specs) {
      CommGroupSpec spec;
      spec.name = group->name() ? group->name()->str() : std::string();
      spec.size = static_cast<int>(group->size());
      spec.ranks.assign(group->ranks()->begin(), group->ranks()->end());
      memberships.push_back(membershipOf(spec, rank.rank));
      groups.push_back(std::move(spec));
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

void Engine::Impl::allocateBuffers() {
  for (const fb::EntryPoint *entry : *artifact->entry_points())
    conversations = std::max<int64_t>(conversations, entry->sequences());
  past.assign(static_cast<size_t>(conversations), 0);
  if (const auto *caches = artifact->kv_caches())
    for (const fb::KvCache *cache : *caches) {
      const KvCacheSpec spec{cache->layer(), cache->window(),
                             cache->kv_heads(), cache->head_dim(),
                             toDType(cache->dtype())};
      const uint64_t bytes =
          kvCacheBufferBytes(spec, contextLength) * static_cast<uint64_t>(conversations);
      const std::string name =
          "KV cache of layer " + std::to_string(spec.layer);
      kvSlots.push_back(kvCacheSlots(spec, contextLength));
      kv.push_back(DeviceMemory::allocate(*backend, bytes, name + " (K)"));
      kv.push_back(DeviceMemory::allocate(*backend, bytes, name + " (V)"));
    }

  // Inputs hold max_tokens i32 (rounded to a cache line); the logits output
  // the most rows any entry point writes.
  int64_t maxTokens = 1, maxRows = 1;
  for (const fb::EntryPoint *entry : *artifact->entry_points()) {
    maxTokens = std::max<int64_t>(maxTokens, int64_t(entry->max_tokens()) *
                                                 std::max<int64_t>(1, entry->token_split()));
    if (entry->logits_rows())
      maxRows = std::max(maxRows,
                         evaluate(*entry->logits_rows(), entry->max_tokens()));
  }
  const uint64_t inputBytes = static_cast<uint64_t>((maxTokens * 4 + 63) / 64 * 64);
  inputs[0] = DeviceMemory::allocate(*backend, inputBytes, "token ids");
  inputs[1] = DeviceMemory::allocate(*backend, inputBytes, "positions");
  logits = DeviceMemory::allocate(
      *backend, static_cast<uint64_t>(maxRows * vocab * 4), "logits");
  hostInputs.assign(static_cast<size_t>(2 * maxTokens), 0);

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
  if (arg.kind == fb::BufferKind::KvCache) {
    // A batched entry sees every conversation's cache, one after another.
    arg.slots = kvSlots.at(arg.index / 2) * (entry.sequences ? conversations : 1);
    if (!entry.sequences)
      arg.conversationBytes = kv.at(arg.index).size() / static_cast<uint64_t>(conversations);
  }
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
    return entry.arenaBytes;
  case fb::BufferKind::Weight:
    return weightCapacity.at(arg.index);
  case fb::BufferKind::KvCache:
    return kv.at(arg.index).size();
  case fb::BufferKind::Input:
    return inputs[arg.index].size();
  case fb::BufferKind::Output:
    return logits.size();
  }
  return 0;
}

LaunchPlan Engine::Impl::planLaunch(const fb::Launch &launch,
                                    const EntryPlan &entry,
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
    plan.buffers.push_back(planBuffer(
        *buffers->Get(b), entry, where + ": buffers[" + std::to_string(b) + "]"));
    spec.ranks.push_back(static_cast<int>(plan.buffers.back().dims.size()));
  }
  if (const auto *scalars = launch.scalars())
    for (const fb::Scalar *scalar : *scalars) {
      plan.scalarKinds.push_back(scalar->kind());
      plan.scalarConstants.push_back(scalar->value());
      plan.readsPast |= scalar->kind() == fb::ScalarKind::PastTokens;
    }
  spec.scalarKinds = plan.scalarKinds;
  plan.split = entry.split;
  spec.maxParts = launch.max_parts();
  spec.block = launch.block();
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
  arena = DeviceMemory::allocate(*backend, arenaBytes,
                                 "activation arena (the largest entry point's)");
  for (flatbuffers::uoffset_t e = 0; e < entryPoints.size(); ++e) {
    const fb::EntryPoint &source = *entryPoints.Get(e);
    EntryPlan &entry = entries[e];
    entry.name = source.name()->str();
    entry.maxTokens = source.max_tokens();
    entry.sequences = source.sequences();
    entry.split = std::max<int64_t>(1, source.token_split());
    if (entry.sequences && (entry.sequences != entry.maxTokens || entry.sequences < 2))
      fail("entry point '" + entry.name + "': sequences " + std::to_string(entry.sequences) +
           " must be at least 2 and equal max_tokens (" + std::to_string(entry.maxTokens) + ")");
    entry.arenaBytes = source.arena_bytes();
    if (source.logits_rows())
      entry.logitsRows = *source.logits_rows();
    const int64_t rowsAtMax = evaluate(entry.logitsRows, entry.maxTokens);
    if (entry.sequences && rowsAtMax != entry.maxTokens)
      fail("entry point '" + entry.name + "': a batched entry writes every token's logits");
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
        entry.steps.emplace_back(planLaunch(*launch, entry, where));
      } else if (const fb::Copy *copy = step.step_as_Copy()) {
        where += " (copy)";
        CopyPlan plan{
            planBuffer(*copy->source(), entry, where + ": source"),
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
    else if (entry.sequences)
      batchEntry = &entry;
    else if (entry.split > 1)
      splitEntry = &entry;
  }
  if (!prefillEntry && !decodeEntry)
    fail("no entry point 'prefill' or 'decode'");
}

CollectivePlan Engine::Impl::planCollective(const fb::Collective &collective,
                                            const EntryPlan &entry,
                                            const std::string &where) const {
  CollectivePlan plan;
  plan.kind = collective.kind();
  plan.group = static_cast<int>(collective.comm_group());
  plan.axis = collective.axis();
  plan.what = std::string(plan.kind == fb::CollectiveKind::AllReduce      ? "all_reduce"
                          : plan.kind == fb::CollectiveKind::AllGather     ? "all_gather"
                          : plan.kind == fb::CollectiveKind::ReduceScatter ? "reduce_scatter"
                                                                           : "all_to_all") +
              " for " + quoted(collective.op()) + " (" + where + ")";
  if (plan.kind == fb::CollectiveKind::AllToAll)
    fail(where + ": all_to_all is not implemented by the runtime");
  plan.source = planBuffer(*collective.source(), entry, where + " (collective): source");
  plan.destination =
      planBuffer(*collective.destination(), entry, where + " (collective): destination");
  // Sums are of f32; a gather copies any 4-byte elements (expert choices).
  const bool sums = plan.kind != fb::CollectiveKind::AllGather;
  for (const fb::BufferRef *ref : {collective.source(), collective.destination()})
    if (ref->kind() != fb::BufferKind::Arena ||
        !(ref->dtype() == fb::DType::F32 || (!sums && ref->dtype() == fb::DType::I32)))
      fail(where + " (collective): collectives exchange activations in the arena: f32 (sums) "
                   "or 4-byte elements (gathers)");
  plan.groupSize = groups.at(static_cast<size_t>(plan.group)).size;
  if (plan.kind == fb::CollectiveKind::ReduceScatter && plan.axis != 0)
    fail(where + " (collective): reduce_scatter splits axis 0 only");
  return plan;
}

void Engine::Impl::connectRanks() {
  if (rank.world == 1)
    return;
  // The largest input any collective takes, and the largest gather along an
  // inner axis (staged whole, then spread into the destination's columns).
  uint64_t capacity = 0, staging = 0;
  for (EntryPlan &entry : entries)
    for (StepPlan &step : entry.steps)
      if (auto *collective = std::get_if<CollectivePlan>(&step)) {
        int64_t sizes[memref::kMaxRank];
        const uint64_t from =
            static_cast<uint64_t>(evaluateArg(collective->source, entry.maxTokens, sizes));
        const uint64_t to =
            static_cast<uint64_t>(evaluateArg(collective->destination, entry.maxTokens, sizes));
        capacity = std::max(capacity, from);
        if (collective->kind == fb::CollectiveKind::AllGather && collective->axis > 0)
          staging = std::max(staging, to);
      }
  comm = backend->connect(rank, groups, capacity);
  if (staging)
    gatherStaging = DeviceMemory::allocate(*backend, staging, "all-gather staging");
}

void Engine::Impl::runCollective(CollectivePlan &collective, int64_t tokens) {
  int64_t sizes[memref::kMaxRank];
  const int64_t fromBytes = evaluateArg(collective.source, tokens, sizes);
  const int64_t toBytes = evaluateArg(collective.destination, tokens, sizes);
  const DeviceAddress from = collective.source.address, to = collective.destination.address;
  switch (collective.kind) {
  case fb::CollectiveKind::AllReduce:
    comm->allReduce(collective.group, from, to, static_cast<uint64_t>(fromBytes / 4),
                    collective.what);
    return;
  case fb::CollectiveKind::ReduceScatter:
    comm->reduceScatter(collective.group, from, to, static_cast<uint64_t>(toBytes / 4),
                        collective.what);
    return;
  case fb::CollectiveKind::AllGather:
    break;
  default:
    fail(collective.what + ": not implemented");
  }
  if (collective.axis == 0) {
    comm->allGather(collective.group, from, to, static_cast<uint64_t>(fromBytes / 4),
                    collective.what);
    return;
  }
  // Along an inner axis: the members' inputs land one after another in the
  // staging buffer, then each goes to its columns: `outer` rows of `chunk`
  // bytes, member m's at m * chunk within each destination row.
  uint64_t outer = 1;
  for (int d = 0; d < collective.axis; ++d)
    outer *= static_cast<uint64_t>(sizes[d]);
  const uint64_t piece = static_cast<uint64_t>(fromBytes);
  const uint64_t chunk = piece / outer;
  const uint64_t members = static_cast<uint64_t>(collective.groupSize);
  comm->allGather(collective.group, from, gatherStaging.address(), piece / 4, collective.what);
  for (uint64_t m = 0; m < members; ++m)
    backend->copy2D(to + m * chunk, chunk * members, gatherStaging.address() + m * piece, chunk,
                    chunk, outer);
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
      specs.push_back(std::move(spec));
    }
  if (specs.empty())
    return;
  const fb::Model &model = *artifact->model();
  std::unique_ptr<WeightSource> source = openWeightSource(
      options.weights,
      model.config_json() ? model.config_json()->str() : std::string(),
      model.weight_format() ? model.weight_format()->str() : std::string());
  // Every tensor is checked before any is bound.
  checkWeights(specs, *source);

  uint64_t total = 0, done = 0;
  for (const WeightSpec &spec : specs)
    total += spec.bytes;
  BindProgress progress;
  if (options.progress)
    progress = [&](uint64_t batchDone, uint64_t) {
      options.progress(done + batchDone, total);
    };
  weights.reserve(specs.size());
  for (size_t first = 0; first < specs.size();) {
    size_t end = first + 1;
    uint64_t batchBytes = specs[first].bytes;
    while (end < specs.size() && batchBytes + specs[end].bytes <= kBindBatchBytes)
      batchBytes += specs[end++].bytes;
    const std::vector<WeightSpec> batch(specs.begin() + first,
                                        specs.begin() + end);
    std::vector<AlignedBuffer> bound =
        bindWeights(batch, *source, pool.get(), progress);
    for (size_t i = 0; i < bound.size(); ++i) {
      const uint64_t size = bound[i].size();
      weights.emplace_back(
          *backend,
          backend->adopt(std::move(bound[i]), "weight '" + batch[i].name + "'"),
          size);
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

LaunchCall Engine::Impl::evaluateLaunch(LaunchPlan &launch,
                                        int64_t tokens) const {
  for (size_t b = 0; b < launch.buffers.size(); ++b) {
    const BufferArg &arg = launch.buffers[b];
    BufferArgument &argument = launch.arguments[b];
    argument.address =
        arg.address + static_cast<uint64_t>(current) * arg.conversationBytes;
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
           "': a copy's source and destination differ in size at T=" +
           std::to_string(tokens));
    if (bytes > 0)
      backend->copy(copy.destination.address, copy.source.address,
                    static_cast<uint64_t>(bytes));
  }
}

void Engine::Impl::updateRecording(EntryPlan &entry, int64_t tokens) {
  // Between recorded calls only the PastTokens scalars change (and the
  // inputs, uploaded before each replay).
  for (StepPlan &step : entry.steps)
    if (auto *launch = std::get_if<LaunchPlan>(&step);
        launch && launch->readsPast) {
      const LaunchCall call = evaluateLaunch(*launch, tokens);
      if (call.grid > 0) // skipped launches were not recorded
        entry.recording->update(*launch->prepared, call);
    }
}

void Engine::Impl::run(EntryPlan &entry, const int32_t *tokens, int64_t count,
                       bool decodeCall, StepClock *clock) {
  int32_t *ids = hostInputs.data();
  int32_t *positions = ids + count;
  if (entry.sequences) {
    // Token t continues conversation t.
    for (int64_t t = 0; t < count; ++t)
      if (past[t] + 1 > contextLength)
        throw RuntimeError("the context of conversation " + std::to_string(t) + " is full (" +
                           std::to_string(past[t]) + " tokens of " +
                           std::to_string(contextLength) + "; raise the context length)");
    for (int64_t t = 0; t < count; ++t) {
      ids[t] = tokens[t];
      positions[t] = static_cast<int32_t>(past[t]);
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
  const uint64_t inputBytes = static_cast<uint64_t>(count * entry.split) * 4;
  backend->upload(inputs[0].address(), ids, inputBytes);
  backend->upload(inputs[1].address(), positions, inputBytes);
  // A recorded step keeps the addresses and T it was recorded with:
  // conversation 0's caches at T = 1, or a full batch.
  const bool recordable = decodeCall && backend->canRecord() &&
                          (entry.sequences ? count == entry.maxTokens
                                           : count == 1 && current == 0);
  if (clock) {
    runSteps(entry, count, clock);
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
  }
  backend->synchronize();
  if (entry.sequences)
    for (int64_t t = 0; t < count; ++t)
      ++past[t];
  else
    past[current] += count * entry.split;
}

std::vector<float> Engine::Impl::lastLogits(const EntryPlan &entry,
                                            int64_t tokens) {
  const int64_t rows = evaluate(entry.logitsRows, tokens);
  const int64_t row = rows == 1 ? 0 : tokens - 1;
  std::vector<float> result(static_cast<size_t>(vocab));
  backend->download(result.data(),
                    logits.address() + static_cast<uint64_t>(row * vocab * 4),
                    static_cast<uint64_t>(vocab * 4));
  return result;
}

void Engine::Impl::checkTokens(const int32_t *tokens, int64_t count) const {
  for (int64_t t = 0; t < count; ++t)
    if (tokens[t] < 0 || tokens[t] >= vocab)
      throw RuntimeError("token id " + std::to_string(tokens[t]) +
                         " is outside the vocabulary 0.." +
                         std::to_string(vocab - 1));
}

// Threads for the pool: as asked, else the machine's shared by the ranks
// started on it (KILN_LOCAL_WORLD_SIZE): CPU ranks that oversubscribe the
// cores stall each other at every collective.
static int threadsFor(const EngineOptions &options) {
  if (options.threads > 0)
    return options.threads;
  const char *local = std::getenv("KILN_LOCAL_WORLD_SIZE");
  const int ranks = local && *local ? std::atoi(local) : 1;
  const int hardware = static_cast<int>(std::thread::hardware_concurrency());
  return ranks > 1 ? std::max(1, hardware / ranks) : 0;
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
  impl.select(conversation);
  impl.checkTokens(&token, 1);
  EntryPlan &entry = impl.decodeEntry ? *impl.decodeEntry : *impl.prefillEntry;
  impl.run(entry, &token, 1, true);
  return impl.lastLogits(entry, 1);
}

std::vector<float> Engine::decodeBatch(const std::vector<int32_t> &tokens) {
  Impl &impl = *impl_;
  impl.runBatch(tokens, nullptr);
  const auto count = static_cast<int64_t>(tokens.size());
  std::vector<float> result(static_cast<size_t>(count * impl.vocab));
  impl.backend->download(result.data(), impl.logits.address(),
                         static_cast<uint64_t>(count * impl.vocab * 4));
  return result;
}

void Engine::Impl::runBatch(const std::vector<int32_t> &tokens, StepClock *clock) {
  if (!batchEntry)
    fail("the artifact has no decode_batch entry (compile with kilnc --decode-batch N)");
  const auto count = static_cast<int64_t>(tokens.size());
  if (count < 1 || count > batchEntry->maxTokens)
    throw RuntimeError("decodeBatch takes 1 to " + std::to_string(batchEntry->maxTokens) +
                       " tokens (one per conversation), not " + std::to_string(count));
  checkTokens(tokens.data(), count);
  current = 0;
  run(*batchEntry, tokens.data(), count, true, clock);
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
                       open == std::string::npos ? std::string()
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

int64_t Engine::pastTokens(int64_t conversation) const {
  impl_->checkConversation(conversation);
  return impl_->past[conversation];
}

void Engine::reset() {
  Impl &impl = *impl_;
  std::fill(impl.past.begin(), impl.past.end(), 0);
  for (const DeviceMemory &buffer : impl.kv)
    impl.backend->fill(buffer.address(), 0, buffer.size());
  impl.backend->synchronize();
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

int Engine::rank() const { return impl_->rank.rank; }
int Engine::worldSize() const { return impl_->rank.world; }

uint64_t Engine::arenaBytes() const { return impl_->arena.size(); }

} // namespace kiln
