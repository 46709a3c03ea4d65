// The semantics of every kiln op, as plain fp32 loops over HostTensors: the
// ground truth that passes and code generators are checked against. Written
// to be obviously right, not fast. No MLIR here.
#pragma once

#include "compiler/interpreter/HostTensor.h"

#include <optional>
#include <stdexcept>

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
HostTensor reshape(const HostTensor &x, std::vector<int64_t> shape);
// NeoX rotate-half over the full head_dim of x [T, H, D].
HostTensor rope(const HostTensor &x, const HostTensor &positions, double theta);
// Causal GQA over the same T tokens; key j visible to query t iff
// pos[j] <= pos[t] and (no window or pos[t] - window < pos[j]).
HostTensor attention(const HostTensor &q, const HostTensor &k, const HostTensor &v,
                     const HostTensor &positions, double scale, std::optional<int64_t> window);
struct TopK {
  HostTensor weights; // [T, k] renormalised probabilities
  HostTensor indices; // [T, k] expert ids, by decreasing probability
};
TopK routerTopK(const HostTensor &logits, int64_t k);
// y[t, j] = down_e(silu(gate_e z_t) * up_e z_t), e = indices[t, j].
HostTensor expertSwiGLU(const HostTensor &z, const HostTensor &indices, const HostTensor &gate,
                        const HostTensor &up, const HostTensor &down);
// RMSNorm of y[t, j] with weight[indices[t, j]].
HostTensor expertNorm(const HostTensor &y, const HostTensor &indices, const HostTensor &weight,
                      double eps);
// sum_j weights[t, j] * y[t, j].
HostTensor combine(const HostTensor &y, const HostTensor &weights);
HostTensor logits(const HostTensor &x, const HostTensor &head, bool lastOnly);
// packed u8 codes [.., O, I/2] (as ints), scales [.., O, I/16] (decoded),
// global [..] -> [.., O, I].
HostTensor nvfp4Dequant(const HostTensor &packed, const HostTensor &scales,
                        const HostTensor &global);

} // namespace kiln::interp
