// The engine's state and plans, shared by Engine.cpp (loading, binding,
// running steps) and EngineRanks.cpp (the rank of a multi-rank job and its
// collective steps). Private to runtime/engine.
#pragma once

#include "runtime/artifact/ModelFacts.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/engine/Backend.h"
#include "runtime/engine/DeviceGreedy.h"
#include "runtime/engine/Engine.h"
#include "runtime/engine/KvPages.h"

#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace kiln {
namespace fb = kiln::artifact;

namespace engine {

// One buffer argument of a step, resolved to memory once everything is
// allocated.
struct BufferArg {
  fb::BufferKind kind = fb::BufferKind::Arena;
  uint32_t index = 0;
  uint64_t offset = 0;
  std::vector<fb::Dim> dims;
  int64_t slots = -1; // KvCache and the page table: replaces dims[0]
  // KvCache (unpaged) and the page table in a one-conversation entry: the
  // bytes of one conversation's; a call for conversation c adds c times
  // this to the address.
  uint64_t conversationBytes = 0;
  int64_t elementSize = 1;
  DeviceAddress address = 0; // the buffer's base + offset
};

// The evaluated shape at `tokens` into `sizes`; returns the byte count.
inline int64_t evaluateArg(const BufferArg &arg, int64_t tokens, int64_t *sizes) {
  int64_t bytes = arg.elementSize;
  for (size_t d = 0; d < arg.dims.size(); ++d) {
    const int64_t size = d == 0 && arg.slots >= 0 ? arg.slots : evaluate(arg.dims[d], tokens);
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
  bool mapsTensors = false;    // has tensor maps (encoded from its buffers per call)
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
  // EntryPoint.sequences and sequence_rows: token t continues conversation
  // t / rows.
  int64_t sequences = 0;
  int64_t rows = 1;
  // EntryPoint.token_split: the ranks that share a call's tokens (sequence
  // parallelism); a call of T takes split * T tokens.
  int64_t split = 1;
  uint64_t arenaBytes = 0; // its planned arena (in the engine's shared one)
  fb::Dim logitsRows{1, 0, 1};
  std::vector<StepPlan> steps;
  // Recordable decode calls on a backend that records: the first runs the
  // steps, the second records and replays them, later ones replay. Until
  // the recording exists, a call it cannot replay starts the count again:
  // the recording captures what the call before it ran (its tensor maps).
  int64_t decodeCalls = 0;
  std::unique_ptr<Recording> recording;
};

inline std::string quoted(const flatbuffers::String *text) {
  return text ? "'" + text->str() + "'" : std::string("(none)");
}

} // namespace engine

using engine::BufferArg;
using engine::CollectivePlan;
using engine::CopyPlan;
using engine::EntryPlan;
using engine::evaluateArg;
using engine::LaunchPlan;
using engine::quoted;
using engine::StepPlan;

struct Engine::Impl {
  Artifact artifact;
  ModelFacts model;
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
  std::vector<bool> kvPaged;            // per cache: its buffers are the page pool
  DeviceMemory inputs[3];               // token ids, positions, the page table
  // The paged caches' pages (none unpaged) and the pages their pool has
  // room for plus the scratch page.
  KvPages pages;
  int64_t pageCount = 0;  // EngineOptions::kvPages, or what kvPoolBytes holds
  uint64_t poolBytes = 0; // EngineOptions::kvPoolBytes
  // Takes the pages a call writes (conversation c up to `positions`), the
  // page it writes first copied where others hold it too; throws, with
  // nothing taken, where the pool lacks them.
  void reservePages(int64_t conversation, int64_t positions);
  // Whether the page holding conversation c's position `past` (the first
  // a call writes, an idle row's too) is one it holds and others too; and
  // the copy that makes it its own (EngineSaving.cpp).
  bool writesSharedPage(int64_t conversation) const;
  void copyWritePage(int64_t conversation);
  [[noreturn]] void pagesFull(int64_t need) const;
  void copyPageTable();
  // Engine::save: conversations set aside by number, each with its pages
  // (references) and a copy of its sliding rings; spare ring copies of
  // dropped ones, for the next save. `savable`: every global cache is paged.
  struct SavedConversation {
    std::vector<int32_t> pages;
    std::vector<DeviceMemory> rings; // per sliding K and V buffer
    int64_t past = 0, written = 0;
  };
  std::map<int64_t, SavedConversation> saved;
  int64_t nextSaved = 1;
  std::vector<std::vector<DeviceMemory>> spareRings;
  bool savable = false;
  const SavedConversation &savedOne(int64_t number) const;
  // Conversation c's slice of every sliding K and V buffer, and its bytes.
  std::vector<std::pair<DeviceAddress, uint64_t>> ringSlices(int64_t conversation) const;
  DeviceMemory logits;
  // Greedy choice where the logits are (null: on the host).
  std::unique_ptr<DeviceGreedy> greedy;
  // One arena for every entry point, sized for the largest: calls never
  // overlap, and a call's arena contents start undefined.
  DeviceMemory arena;
  std::vector<EntryPlan> entries;
  EntryPlan *prefillEntry = nullptr;
  EntryPlan *decodeEntry = nullptr;
  EntryPlan *batchEntry = nullptr;       // decode_batch
  EntryPlan *splitEntry = nullptr;       // prefill_sp: tokens split over the TP group
  EntryPlan *verifyEntry = nullptr;      // verify: a few tokens, every one's logits
  EntryPlan *verifyBatchEntry = nullptr; // verify_batch: rows of each conversation
  // Conversations the caches hold (the decode_batch entry's batch, or 1),
  // each one's tokens so far, and the one the next one-conversation call
  // continues.
  int64_t conversations = 1;
  std::vector<int64_t> past;
  // Per conversation, one past the highest position written since it began:
  // rolled-back positions still sit in the sliding rings up to there.
  std::vector<int64_t> written;
  // Positions a rollback may drop: the fewest slots a sliding ring keeps
  // beyond its window (no limit without sliding layers).
  int64_t rollbackSlack = std::numeric_limits<int64_t>::max();
  // Engine::observeCalls: handed each state-changing call before it runs.
  std::function<void(const EngineCall &)> observer;
  int64_t current = 0;
  std::vector<int32_t> hostInputs; // a call's ids, then its positions
  // Multi-rank: this rank, where it sits in each comm group and the
  // staging buffer of gathers along an inner axis.
  RankInfo rank;
  bool alone = false; // EngineOptions::loadAlone
  std::vector<CommGroupSpec> groups;
  std::vector<GroupMembership> memberships;
  DeviceMemory gatherStaging;
  // Peer exchange (Exchange buffers): this rank's memory per comm group
  // (empty where the group has none), the members' addresses of theirs, and
  // a device table of those addresses per (group, site offset).
  std::vector<DeviceMemory> exchangeMemory;
  std::vector<std::vector<DeviceAddress>> exchangePeers;
  std::map<std::pair<uint32_t, uint64_t>, DeviceMemory> exchangeTables;

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
  // The table of the members' exchange addresses at site `offset` of
  // group `group`'s exchange memory (EngineRanks.cpp).
  DeviceAddress exchangeTable(uint32_t group, uint64_t offset);
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

  // `stepped` (a batched entry's, one flag a conversation): the
  // conversations whose position advances; all of them where null.
  void run(EntryPlan &entry, const int32_t *tokens, int64_t count, bool decodeCall,
           StepClock *clock = nullptr, const std::vector<bool> *stepped = nullptr);
  // With a clock: a mark before the first launch and after each.
  void runSteps(EntryPlan &entry, int64_t tokens, StepClock *clock = nullptr);
  LaunchCall evaluateLaunch(LaunchPlan &launch, int64_t tokens) const;
  void updateRecording(EntryPlan &entry, int64_t tokens);
  std::vector<float> lastLogits(const EntryPlan &entry, int64_t tokens);
  // Rows first .. first + count - 1 of the logits output, on the host.
  std::vector<float> logitRows(int64_t first, int64_t count);
  void checkTokens(const int32_t *tokens, int64_t count) const;
  // One token of `conversation` through the decode entry (or prefill's at
  // one token); returns the entry, whose logits row 0 holds.
  EntryPlan &runDecode(int64_t conversation, int32_t token);
  // One call of the decode_batch entry for conversations 0 .. n-1.
  void runBatch(const std::vector<int32_t> &tokens, StepClock *clock,
                const std::vector<bool> *stepped = nullptr);
  // One flag a token, or throws.
  void checkStepFlags(const std::vector<int32_t> &tokens, const std::vector<bool> &stepped) const;
  // The greedy token of each of the first `count` rows of the logits: on
  // the device where the artifact has the greedy kernel, else on the host.
  std::vector<int32_t> chooseGreedy(int64_t count);
  // Throws unless 0 <= conversation < conversations.
  void checkConversation(int64_t conversation) const;
  // The conversation one-conversation calls continue from now on.
  void select(int64_t conversation);
};

} // namespace kiln
