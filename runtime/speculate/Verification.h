// Which drafted tokens a verify call accepts, from its logits: row i is the
// target's next-token distribution after the call's token i, where token 0
// is the last accepted token and tokens 1..k the drafts.
//
// Greedy: draft i is accepted while it is the argmax of row i-1, and the
// first row whose argmax differs (or row k) gives the next token, so the
// output is the one decoding without drafts gives.
//
// Sampling (temperature > 0): draft i is accepted with probability p(d_i),
// the target's probability for it as the Sampler draws (temperature, top-p);
// on rejection the next token is drawn from p with d_i removed, renormalised;
// after k acceptances from row k. This is speculative sampling (Leviathan et
// al., Chen et al.) for a drafter that proposes one token with certainty:
// every emitted token is distributed exactly as p.
#pragma once

#include "runtime/engine/Sampler.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace kiln::speculate {

struct Verdict {
  int64_t accepted = 0; // drafts accepted, 0..k
  int32_t next = 0;     // the token after them
};

// `logits` holds drafts.size() + 1 rows of `vocab`.
Verdict verifyGreedy(const float *logits, int64_t vocab, const std::vector<int32_t> &drafts);
// Draws from `sampler`'s generator; its options give temperature and top-p
// (a temperature of 0 is verifyGreedy).
Verdict verifySampled(const float *logits, int64_t vocab, const std::vector<int32_t> &drafts,
                      Sampler &sampler);

// What a speculative step keeps of the drafts, given the rows of the pending
// token and the drafts (one row and no drafts after a plain decode call).
using Acceptor =
    std::function<Verdict(const float *logits, int64_t vocab, const std::vector<int32_t> &drafts)>;
// verifySampled with `sampler` (which must outlive it).
Acceptor samplingAcceptor(Sampler &sampler);

} // namespace kiln::speculate
