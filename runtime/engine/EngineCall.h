// One call that changes an Engine's state (a step of an entry point, a
// rollback, a forget, a save), as data: what Engine::observeCalls hands its observer
// before the call runs, and what replay() makes again on another engine.
// kiln-serve --nproc N sends rank 0's calls to the other ranks this way, so
// that every rank makes the same calls, in the same order, with the same
// tokens (runtime/serve/RankFollowing.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

class Engine;

struct EngineCall {
  enum class Kind : uint8_t {
    Prefill,           // prefill(conversation, tokens)
    Decode,            // decode(conversation, tokens[0])
    DecodeBatch,       // decodeBatch(tokens[, stepped])
    DecodeBatchGreedy, // decodeBatchGreedy(tokens[, stepped])
    Verify,            // verify(conversation, tokens)
    VerifyBatch,       // verifyBatch: rowLengths[c] of tokens each, one after another
    Rollback,          // rollback(conversation, keep)
    Forget,            // forget(conversation)
    Reset,             // reset()
    Save,              // save(conversation): numbered as on rank 0, in order
    Restore,           // restore(conversation, saved, keep)
    DropSaved,         // dropSaved(saved)
    DecodeGreedy,      // decodeGreedy(conversation, tokens[0])
  };
  Kind kind = Kind::Decode;
  int64_t conversation = 0;
  int64_t keep = 0;
  std::vector<int32_t> tokens;
  // DecodeBatch, DecodeBatchGreedy: the step flags, empty for the form
  // without them.
  std::vector<bool> stepped;
  std::vector<uint32_t> rowLengths; // VerifyBatch
  int64_t saved = 0;                // Restore, DropSaved: the saved conversation
};

// The call's name and arguments in a line (for messages).
std::string describe(const EngineCall &call);
// A few bytes that decodeCall() reads back; little-endian, fixed widths.
std::string encodeCall(const EngineCall &call);
// Throws RuntimeError on bytes encodeCall did not write.
EngineCall decodeCall(const std::string &bytes);
// Makes `call` on `engine` (its results thrown away).
void replay(Engine &engine, const EngineCall &call);

} // namespace kiln
