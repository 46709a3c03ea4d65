// Runs a Kiln artifact: loads and checks it, picks the backend its target
// needs (x86 kernels on this CPU, nvptx on an NVIDIA GPU, amdgcn on an AMD
// GPU through HIP), loads its
// kernel library, binds the weights, allocates arenas, KV caches, inputs and
// the logits output on the device, and executes the steps of its entry points
// (docs/runtime-abi.md).
//
// Everything that can be checked is checked before the first launch: the
// target (CPU features, or the GPU's compute capability), every kernel, every
// weight's dtype and shape, every launch against the device's limits, and
// every buffer a step touches lies inside its buffer at both ends of the token
// range. A kernel itself is machine code; its faults cannot be caught on the
// CPU, and on a GPU they stop the engine (CUDA errors are sticky).
//
// On a GPU the decode entry point runs directly on its first call and is then
// recorded as a CUDA graph, which later calls replay with the arguments that
// depend on the past token count updated.
//
// An Engine holds its conversations' KV caches; calls must not overlap.
//
// A multi-rank artifact runs as one Engine per rank, one process each (one
// GPU each); every rank makes the same calls with the same tokens, and the
// collectives between its steps keep them in step. Each rank returns the
// same logits.
#pragma once

#include "runtime/artifact/Artifact.h"
#include "runtime/artifact/ModelFacts.h"
#include "runtime/comm/RankInfo.h"
#include "runtime/engine/WeightBinder.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

struct EngineCall;

struct EngineOptions {
  // A checkpoint directory or "synthetic:SEED".
  std::string weights;
  // Positions the global KV caches hold; 0: min(4096, the model's
  // max_position_embeddings), defaultContextLength() of ModelFacts.h.
  int64_t contextLength = 0;
  // Threads for parallel launches and weight loading; 0: all hardware threads.
  int threads = 0;
  // The GPU (CUDA or HIP device ordinal) an nvptx or amdgcn artifact runs on;
  // -1: KILN_LOCAL_RANK (a rank started by --nproc), else 0.
  int device = -1;
  // Weight loading progress (bytes done, total).
  BindProgress progress;
  // Where `synthetic:SEED` weights are generated: Auto is on the device for
  // GPU artifacts that carry the synthesis kernels (the same bytes, without
  // host generation and upload), on the host otherwise.
  enum class Synthesis { Auto, Host, Device };
  Synthesis synthesis = Synthesis::Auto;
  // This process's rank in a multi-rank job (an artifact of layout.world >
  // 1: every rank runs it, with its share of the weights). Unset: from the
  // environment (runtime/comm/RankInfo.h; kiln-run --nproc sets it).
  std::optional<RankInfo> rank;
  // A multi-rank artifact's rank `rank` loaded by itself, without its job:
  // its weights, KV caches, arena and exchange memory on this device, no
  // communicators. It runs nothing (every call throws): what it shows is
  // that the rank's share loads and fits, one rank at a time, where the
  // job's devices are not all at hand.
  bool loadAlone = false;
  // Scan every checkpoint tensor as it is read and refuse one holding NaN or
  // infinite values (checkFiniteWeights, WeightSource.h). Synthetic weights
  // are finite by construction and not scanned.
  bool checkWeights = false;
  // Pages of the pool of an artifact with paged KV caches (kilnc
  // --kv-page-tokens); 0: as many as every conversation's whole context
  // takes. Fewer make room for other memory: a call that needs a page the
  // pool lacks throws, and Engine::freeKvPages says what is left.
  int64_t kvPages = 0;
  // Or the pool's size in bytes (K and V of every paged layer, the scratch
  // page apart): as many pages as fit. 0: kvPages decides.
  uint64_t kvPoolBytes = 0;
};

class Engine {
public:
  // Loads the artifact file; throws ArtifactError for a bad file and
  // RuntimeError for anything this machine or the weights refuse.
  static std::unique_ptr<Engine> load(const std::string &artifactPath,
                                      const EngineOptions &options);
  static std::unique_ptr<Engine> create(Artifact artifact, const EngineOptions &options);
  ~Engine();
  Engine(const Engine &) = delete;
  Engine &operator=(const Engine &) = delete;

  // Runs the prompt through the prefill entry point in chunks of at most its
  // max_tokens, at positions past .. past + n - 1 of conversation 0; returns
  // the logits of the last token (vocabSize() floats).
  std::vector<float> prefill(const std::vector<int32_t> &tokens);
  // One token of conversation 0 at position past; returns its logits.
  std::vector<float> decode(int32_t token);

  // Conversations the engine holds: the artifact's decode_batch batch, or 1.
  // Each has its own KV caches and position.
  int64_t conversations() const;
  // prefill and decode for conversation `conversation` (0 .. conversations-1).
  std::vector<float> prefill(int64_t conversation, const std::vector<int32_t> &tokens);
  std::vector<float> decode(int64_t conversation, int32_t token);
  // decode, returning the greedy next token (argmax of the logits, lowest
  // index on ties) instead of the logits: on a GPU the artifact's greedy
  // kernel chooses where the logits are and only the token id comes back, as
  // a serving loop steps one conversation.
  int32_t decodeGreedy(int64_t conversation, int32_t token);
  // One token for each of conversations 0 .. n-1 (n = tokens.size(), at most
  // conversations()), in one call of the decode_batch entry point; returns
  // the n rows of logits, n * vocabSize() floats.
  std::vector<float> decodeBatch(const std::vector<int32_t> &tokens);
  // decodeBatch where only the conversations c with stepped[c] take their
  // step (stepped.size() == tokens.size()); the others are idle rows, so
  // that one call serves any subset of the conversations: an idle row is
  // computed at its conversation's next position and thrown away, its
  // position does not advance, and what its caches held stays as it was for
  // every later call, rollback included (its key and value land at that next
  // position, which its own next token overwrites; on a sliding layer's ring
  // the slot they take held a position no window and no allowed rollback
  // reaches). An idle row needs room for one more token in its context.
  std::vector<float> decodeBatch(const std::vector<int32_t> &tokens,
                                 const std::vector<bool> &stepped);
  // decodeBatch, returning each conversation's greedy next token (argmax of
  // its logits) instead of the logits: on a GPU the artifact's greedy kernel
  // chooses where the logits are and only n token ids come back.
  std::vector<int32_t> decodeBatchGreedy(const std::vector<int32_t> &tokens);
  // decodeBatchGreedy with idle rows, as decodeBatch(tokens, stepped) has
  // them (an idle row's choice is thrown away: any value).
  std::vector<int32_t> decodeBatchGreedy(const std::vector<int32_t> &tokens,
                                         const std::vector<bool> &stepped);

  // One launch of a profile: its kernel, what it computes (the graph op's
  // name) and its time on the device.
  struct StepTime {
    std::string kernel;
    std::string op;
    double milliseconds = 0;
  };
  // decode(token), run launch by launch (no CUDA graph) with a timestamp
  // after each; returns every launch's time in order.
  std::vector<StepTime> profileDecode(int32_t token);
  // One prefill call of `tokens` (at most the prefill entry's chunk), run and
  // timed the same way; the tokens join the conversation.
  std::vector<StepTime> profilePrefill(const std::vector<int32_t> &tokens);
  // decodeBatch(tokens), timed the same way.
  std::vector<StepTime> profileDecodeBatch(const std::vector<int32_t> &tokens);

  // Speculative decoding, for an artifact built with kilnc --verify-tokens N:
  // runs 1..N tokens of `conversation` in one call at positions past ..
  // past + n - 1 (the last accepted token, then drafts) and returns every
  // token's logits, n * vocabSize() floats, row t the next token's after
  // tokens[t]. Throws without a verify entry.
  std::vector<float> verify(int64_t conversation, const std::vector<int32_t> &tokens);
  // verify for conversations 0 .. n-1 (n = tokens.size(), at most
  // conversations()) in one call of the verify_batch entry point (kilnc
  // --verify-tokens N --decode-batch M): each conversation's own 1..N tokens.
  // Returns N rows of logits per conversation, n * N * vocabSize() floats,
  // conversation c's row t at (c * N + t) * vocabSize() (rows past its
  // tokens are padding). Each conversation continues as after verify.
  std::vector<float> verifyBatch(const std::vector<std::vector<int32_t>> &tokens);
  // N, the most tokens a verify call takes; 0 without a verify entry.
  int64_t verifyTokens() const;
  // Keeps the conversation's first `keep` positions and drops the rest (the
  // rejected drafts): the next call continues at `keep`. The sliding layers'
  // rings keep N - 1 positions beyond their windows, so a rollback may drop
  // positions up to N - 1 below the highest one written; further is refused.
  void rollback(int64_t conversation, int64_t keep);

  // Whether rollback(conversation, keep) would succeed (else it throws).
  bool canRollback(int64_t conversation, int64_t keep) const;

  // Hands `observer` each call that changes this engine's state (prefill,
  // decode, decodeBatch, decodeBatchGreedy, verify, verifyBatch, rollback,
  // forget, reset, save, restore, dropSaved; the overloads for conversation 0 as theirs) as data,
  // before the call runs; an exception from the observer is the call's.
  // Profile calls are not handed on. An empty function: none.
  void observeCalls(std::function<void(const EngineCall &)> observer);

  // Saved conversations (an artifact whose global KV caches are paged,
  // kilnc --kv-page-tokens; every other cache a sliding ring): save() sets
  // aside a copy of a conversation as it is now under a number (>= 1, in
  // order from 1): its pages, shared, and its sliding rings, copied
  // (savedBytes() of device memory each). restore() makes a conversation
  // that holds nothing (past 0) continue from a saved one's first `keep`
  // positions exactly as if it had computed them, within the room the rings
  // keep beyond their windows (as rollback); the saved one stays.
  // dropSaved() gives back its references and its copy. A page that a
  // conversation and saved ones share is copied before the conversation
  // writes into it (its positions from its past on; an idle row's too), so
  // that nothing one of them reads changes. save() returns 0, and changes
  // nothing, where the device has no memory left for the rings' copy.
  bool canSave() const;
  uint64_t savedBytes() const;
  int64_t save(int64_t conversation);
  bool canRestore(int64_t saved, int64_t keep) const;
  void restore(int64_t conversation, int64_t saved, int64_t keep);
  void dropSaved(int64_t saved);
  // A saved conversation's positions and the pages it holds.
  int64_t savedPast(int64_t saved) const;
  int64_t savedKvPages(int64_t saved) const;

  // Tokens in a conversation's KV caches so far.
  int64_t pastTokens(int64_t conversation = 0) const;
  // Forgets every conversation and drops the saved ones: past = 0 and the
  // caches zeroed.
  void reset();
  // Forgets one conversation, for a new one to take its place: its past is
  // 0 again. Its caches are not cleared: a step reads a conversation's
  // positions below its past only, each written since.
  void forget(int64_t conversation);

  const Artifact &artifact() const;
  int64_t vocabSize() const;
  int64_t contextLength() const;
  int numThreads() const;
  // What runs the kernels: "CPU (16 threads)", "NVIDIA H200 (compute
  // capability 9.0, 139.8 GiB, device 0)".
  std::string device() const;
  uint64_t weightBytes() const;
  uint64_t kvCacheBytes() const;
  // Paged KV caches (kilnc --kv-page-tokens): the positions of a page, the
  // pool's pages and those no conversation holds (0, 0, 0 unpaged).
  int64_t kvPageTokens() const;
  int64_t kvPages() const;
  int64_t freeKvPages() const;
  // The pages `conversation` holds (0 unpaged).
  int64_t heldKvPages(int64_t conversation) const;
  // The distinct pages that every conversation and the saved conversations
  // `saved` hold, from their page lists (0 unpaged). Where `saved` are all
  // that the caller keeps, kvPages() - freeKvPages() beyond this are pages
  // lost: taken, and held by nothing the caller can give back.
  int64_t distinctKvPages(const std::vector<int64_t> &saved) const;
  // The activation arena every entry point shares: the largest one's.
  uint64_t arenaBytes() const;
  // This process's rank and the job's size (0 and 1 for one rank).
  int rank() const;
  int worldSize() const;

private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace kiln
