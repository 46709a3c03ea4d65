// The engine calls of one speculative step, with no drafting and no state:
// run the pending token (the last one yielded, not yet in the caches) and
// the drafts in one call, let `accept` decide, and roll the caches back past
// what it rejected. SpeculativeDecoder and SpeculativeBatch draft around
// them; kiln-serve's scheduler calls them with its requests' own drafters.
#pragma once

#include "runtime/engine/Engine.h"
#include "runtime/speculate/Verification.h"

#include <cstdint>
#include <vector>

namespace kiln::speculate {

// One conversation: a verify call, or a plain decode call when `drafts` is
// empty.
Verdict verifyStep(Engine &engine, int64_t conversation, int32_t pending,
                   const std::vector<int32_t> &drafts, const Acceptor &accept);

// Conversations 0 .. n-1 in one verify_batch call (each its own drafts), or
// one decode_batch call when none has a draft. `verifyCalls` counts the
// former.
std::vector<Verdict> verifyBatchStep(Engine &engine, const std::vector<int32_t> &pending,
                                     const std::vector<std::vector<int32_t>> &drafts,
                                     const std::vector<Acceptor> &accept, int64_t &verifyCalls);

} // namespace kiln::speculate
