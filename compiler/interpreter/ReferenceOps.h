// The semantics of every kiln op, as plain fp32 loops over HostTensors: the
// ground truth that passes and code generators are checked against. Written
// to be obviously right, not fast. No MLIR here.
#pragma once

#include "compiler/interpreter/HostTensor.h"

#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace kiln::interp {

// A value the op cannot accept at run time (an id outside the vocabulary).
class InterpreterError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

HostTensor embed(const HostTensor &table, const HostTensor &ids);
// RMSNorm over the last dimension with a weight of that width.
HostTensor rmsNorm(const HostTensor &x, const HostTensor &weight, double eps);
// lhs op rhs with rhs broadcast over lhs's leading dimensions.
HostTensor mul(const HostTensor &lhs, const HostTensor &rhs);
HostTensor add(const HostTensor &lhs, const HostTensor &rhs);
// x [T, K] · W[N, K]ᵀ -> [T, N].
HostTensor linear(const HostTensor &x, const HostTensor &weight);
// x with every element rounded to bf16 (to nearest even) and back: what a
// tensor core reads of f32 activations.
HostTensor roundToBf16(const HostTensor &x);
// Each element as an FP8 KV cache with per-tensor scale `scale` holds it:
// the e4m3 code of x / scale (nearest even, saturated at 448) times scale.
HostTensor roundToE4m3(const HostTensor &x, float scale);
HostTensor reshape(const HostTensor &x, std::vector<int64_t> shape);
// NeoX rotate-half over the full head_dim of x [T, H, D].
HostTensor rope(const HostTensor &x, const HostTensor &positions, double theta);
// Causal GQA over the same T tokens; key j visible to query t iff
// pos[j] <= pos[t] and (no window or pos[t] - window < pos[j]).
// `bf16Products`: q, k, v and each softmax numerator rounded to bf16 before
// their products, as tensor-core attention computes (the sum stays f32).
HostTensor attention(const HostTensor &q, const HostTensor &k, const HostTensor &v,
                     const HostTensor &positions, double scale, std::optional<int64_t> window,
                     bool bf16Products = false);
struct TopK {
  HostTensor weights; // [T, k] renormalised probabilities
  HostTensor indices; // [T, k] expert ids, by decreasing probability
};
TopK routerTopK(const HostTensor &logits, int64_t k);
// y[t, j] = down_e(silu(gate_e z_t) * up_e z_t), e = indices[t, j]; an
// index of -1 (an expert on another rank) gives a zero row. `bf16Inputs`:
// z_t and the SwiGLU row rounded to bf16 before their products, as the
// tensor-core expert GEMMs read them.
HostTensor expertSwiGLU(const HostTensor &z, const HostTensor &indices, const HostTensor &gate,
                        const HostTensor &up, const HostTensor &down, bool bf16Inputs = false);
// RMSNorm of y[t, j] with weight[indices[t, j]]; zero rows for index -1.
HostTensor expertNorm(const HostTensor &y, const HostTensor &indices, const HostTensor &weight,
                      double eps);
// sum_j weights[t, j] * y[t, j].
HostTensor combine(const HostTensor &y, const HostTensor &weights);
// new_residual = residual + gate * RMSNorm(update; post), normed =
// RMSNorm(new_residual; next).
std::pair<HostTensor, HostTensor> normResidual(const HostTensor &residual, const HostTensor &update,
                                               const HostTensor &post, const HostTensor &gate,
                                               const HostTensor &next, double postEps,
                                               double nextEps);
// Global expert ids to the numbering of block `member` of `members` equal
// blocks of `numExperts`; ids outside the block become -1.
HostTensor localExperts(const HostTensor &indices, int64_t numExperts, int64_t member,
                        int64_t members);
// One device's expert stacks (a contiguous block of the experts).
struct ExpertStacks {
  const HostTensor *gate, *up, *down, *postNorm;
};
// The MegaMoE stage for z's tokens with the experts spread over `owners`
// (block g holds experts [g*E/G, (g+1)*E/G)): sum_j w[t,j] * norm_e(swiglu_e(z_t)).
// `bf16Inputs` as for expertSwiGLU.
HostTensor megaMoE(const HostTensor &z, const HostTensor &indices, const HostTensor &weights,
                   const std::vector<ExpertStacks> &owners, int64_t numExperts, double eps,
                   bool bf16Inputs = false);
HostTensor logits(const HostTensor &x, const HostTensor &head, bool lastOnly);
// packed u8 codes [.., O, I/2] (as ints), scales [.., O, I/16] (decoded),
// global [..] -> [.., O, I].
HostTensor nvfp4Dequant(const HostTensor &packed, const HostTensor &scales,
                        const HostTensor &global);

} // namespace kiln::interp
