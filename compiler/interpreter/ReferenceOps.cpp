#include "compiler/interpreter/ReferenceOps.h"

#include "runtime/core/Float.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kiln::interp {

HostTensor HostTensor::floats(std::vector<int64_t> shape, std::vector<float> data) {
  HostTensor t;
  t.shape = std::move(shape);
  t.f = data.empty() ? std::vector<float>(t.numElements(), 0.0f) : std::move(data);
  if (static_cast<int64_t>(t.f.size()) != t.numElements())
    throw InterpreterError("float data of " + std::to_string(t.f.size()) + " elements for shape " +
                           t.shapeString());
  return t;
}

HostTensor HostTensor::ints(std::vector<int64_t> shape, std::vector<int32_t> data) {
  HostTensor t;
  t.isInt = true;
  t.shape = std::move(shape);
  t.i = data.empty() ? std::vector<int32_t>(t.numElements(), 0) : std::move(data);
  if (static_cast<int64_t>(t.i.size()) != t.numElements())
    throw InterpreterError("int data of " + std::to_string(t.i.size()) + " elements for shape " +
                           t.shapeString());
  return t;
}

int64_t HostTensor::numElements() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

std::string HostTensor::shapeString() const {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d)
    s += (d ? "x" : "") + std::to_string(shape[d]);
  return s + "]";
}

namespace {

// RMSNorm of n values at `in`, times `w`, into `out`.
void normalizeRow(const float *in, const float *w, int64_t n, double eps, float *out) {
  double sumSquares = 0;
  for (int64_t c = 0; c < n; ++c)
    sumSquares += double(in[c]) * in[c];
  float inv = float(1.0 / std::sqrt(sumSquares / n + eps));
  for (int64_t c = 0; c < n; ++c)
    out[c] = in[c] * inv * w[c];
}

// out[o] = sum_i w[o, i] * x[i] for an [out, in] matrix.
void matVec(const float *w, const float *x, int64_t out, int64_t in, float *y) {
  for (int64_t o = 0; o < out; ++o) {
    float acc = 0;
    const float *row = w + o * in;
    for (int64_t c = 0; c < in; ++c)
      acc += row[c] * x[c];
    y[o] = acc;
  }
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

// The expert of one (token, slot), or -1 when it is on another rank.
int32_t expertOf(const HostTensor &indices, int64_t at, int64_t experts) {
  int32_t e = indices.i[at];
  if (e < -1 || e >= experts)
    throw InterpreterError("expert index " + std::to_string(e) + " outside [0, " +
                           std::to_string(experts) + ")");
  return e;
}

template <typename Op> HostTensor broadcast(const HostTensor &lhs, const HostTensor &rhs, Op op) {
  HostTensor out = lhs;
  int64_t n = rhs.numElements();
  for (int64_t idx = 0, total = lhs.numElements(); idx < total; ++idx)
    out.f[idx] = op(lhs.f[idx], rhs.f[idx % n]);
  return out;
}

} // namespace

HostTensor embed(const HostTensor &table, const HostTensor &ids) {
  int64_t tokens = ids.dim(0), vocab = table.dim(0), hidden = table.dim(1);
  HostTensor out = HostTensor::floats({tokens, hidden});
  for (int64_t t = 0; t < tokens; ++t) {
    int32_t id = ids.i[t];
    if (id < 0 || id >= vocab)
      throw InterpreterError("token id " + std::to_string(id) + " at position " +
                             std::to_string(t) + " is outside the vocabulary [0, " +
                             std::to_string(vocab) + ")");
    std::copy_n(table.f.begin() + id * hidden, hidden, out.f.begin() + t * hidden);
  }
  return out;
}

HostTensor rmsNorm(const HostTensor &x, const HostTensor &weight, double eps) {
  HostTensor out = x;
  int64_t n = x.dim(-1);
  for (int64_t row = 0, rows = x.numElements() / n; row < rows; ++row)
    normalizeRow(&x.f[row * n], weight.f.data(), n, eps, &out.f[row * n]);
  return out;
}

HostTensor mul(const HostTensor &lhs, const HostTensor &rhs) {
  return broadcast(lhs, rhs, [](float a, float b) { return a * b; });
}

HostTensor add(const HostTensor &lhs, const HostTensor &rhs) {
  return broadcast(lhs, rhs, [](float a, float b) { return a + b; });
}

HostTensor linear(const HostTensor &x, const HostTensor &weight) {
  int64_t tokens = x.dim(0), in = x.dim(1), out = weight.dim(0);
  HostTensor y = HostTensor::floats({tokens, out});
  for (int64_t t = 0; t < tokens; ++t)
    matVec(weight.f.data(), &x.f[t * in], out, in, &y.f[t * out]);
  return y;
}

namespace {
float roundIf(bool bf16, float v) { return bf16 ? bf16ToFloat(floatToBf16(v)) : v; }
} // namespace

HostTensor roundToBf16(const HostTensor &x) {
  HostTensor out = x;
  for (float &v : out.f)
    v = bf16ToFloat(floatToBf16(v));
  return out;
}

HostTensor roundToE4m3(const HostTensor &x, float scale) {
  HostTensor out = x;
  for (float &v : out.f)
    v = e4m3ToFloat(floatToE4m3(v / scale)) * scale;
  return out;
}

HostTensor reshape(const HostTensor &x, std::vector<int64_t> shape) {
  HostTensor out = x;
  out.shape = std::move(shape);
  return out;
}

HostTensor rope(const HostTensor &x, const HostTensor &positions, double theta) {
  int64_t tokens = x.dim(0), heads = x.dim(1), dim = x.dim(2), half = dim / 2;
  HostTensor out = x;
  for (int64_t t = 0; t < tokens; ++t) {
    double p = positions.i[t];
    for (int64_t j = 0; j < half; ++j) {
      double angle = p * std::pow(theta, -2.0 * double(j) / double(dim));
      float c = float(std::cos(angle)), s = float(std::sin(angle));
      for (int64_t h = 0; h < heads; ++h) {
        const float *in = &x.f[(t * heads + h) * dim];
        float *o = &out.f[(t * heads + h) * dim];
        o[j] = in[j] * c - in[j + half] * s;
        o[j + half] = in[j + half] * c + in[j] * s;
      }
    }
  }
  return out;
}

HostTensor attention(const HostTensor &qIn, const HostTensor &kIn, const HostTensor &vIn,
                     const HostTensor &positions, double scale, std::optional<int64_t> window,
                     bool bf16Products) {
  // Rounded copies only where asked: the exact path reads its inputs as given.
  HostTensor qRounded, kRounded, vRounded;
  if (bf16Products) {
    qRounded = roundToBf16(qIn);
    kRounded = roundToBf16(kIn);
    vRounded = roundToBf16(vIn);
  }
  const HostTensor &q = bf16Products ? qRounded : qIn;
  const HostTensor &k = bf16Products ? kRounded : kIn;
  const HostTensor &v = bf16Products ? vRounded : vIn;
  int64_t tokens = q.dim(0), qHeads = q.dim(1), dim = q.dim(2);
  int64_t kvHeads = k.dim(1), vDim = v.dim(2), group = qHeads / kvHeads;
  HostTensor out = HostTensor::floats({tokens, qHeads, vDim});
  std::vector<float> scores(tokens);
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t pt = positions.i[t];
    for (int64_t h = 0; h < qHeads; ++h) {
      int64_t kv = h / group;
      const float *qv = &q.f[(t * qHeads + h) * dim];
      float maxScore = -INFINITY;
      for (int64_t j = 0; j < tokens; ++j) {
        int64_t pj = positions.i[j];
        bool visible = pj <= pt && (!window || pt - *window < pj);
        if (!visible) {
          scores[j] = -INFINITY;
          continue;
        }
        const float *kv_ = &k.f[(j * kvHeads + kv) * dim];
        float dot = 0;
        for (int64_t d = 0; d < dim; ++d)
          dot += qv[d] * kv_[d];
        scores[j] = float(dot * scale);
        maxScore = std::max(maxScore, scores[j]);
      }
      float *o = &out.f[(t * qHeads + h) * vDim];
      if (maxScore == -INFINITY)
        continue; // no visible key: a zero row
      double sum = 0;
      for (int64_t j = 0; j < tokens; ++j) {
        scores[j] = scores[j] == -INFINITY ? 0.0f : std::exp(scores[j] - maxScore);
        sum += scores[j];
      }
      for (int64_t j = 0; j < tokens; ++j) {
        if (scores[j] == 0.0f)
          continue;
        float p = bf16Products ? float(double(bf16ToFloat(floatToBf16(scores[j]))) / sum)
                               : float(scores[j] / sum);
        const float *vv = &v.f[(j * kvHeads + kv) * vDim];
        for (int64_t d = 0; d < vDim; ++d)
          o[d] += p * vv[d];
      }
    }
  }
  return out;
}

TopK routerTopK(const HostTensor &logits, int64_t k) {
  int64_t tokens = logits.dim(0), experts = logits.dim(1);
  TopK result{HostTensor::floats({tokens, k}), HostTensor::ints({tokens, k})};
  std::vector<double> p(experts);
  std::vector<int32_t> order(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    const float *row = &logits.f[t * experts];
    double maxLogit = *std::max_element(row, row + experts), sum = 0;
    for (int64_t e = 0; e < experts; ++e)
      sum += p[e] = std::exp(double(row[e]) - maxLogit);
    for (int64_t e = 0; e < experts; ++e)
      p[e] /= sum;
    std::iota(order.begin(), order.end(), 0);
    // Decreasing probability, ties to the lower index.
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    double selected = 0;
    for (int64_t j = 0; j < k; ++j)
      selected += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      result.indices.i[t * k + j] = order[j];
      result.weights.f[t * k + j] = float(p[order[j]] / selected);
    }
  }
  return result;
}

HostTensor expertSwiGLU(const HostTensor &zIn, const HostTensor &indices, const HostTensor &gate,
                        const HostTensor &up, const HostTensor &down, bool bf16Inputs) {
  HostTensor rounded;
  if (bf16Inputs)
    rounded = roundToBf16(zIn);
  const HostTensor &z = bf16Inputs ? rounded : zIn;
  int64_t tokens = z.dim(0), latent = z.dim(1), k = indices.dim(1);
  int64_t experts = gate.dim(0), inter = gate.dim(1);
  HostTensor y = HostTensor::floats({tokens, k, latent});
  std::vector<float> g(inter), u(inter);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j) {
      int64_t e = expertOf(indices, t * k + j, experts);
      if (e < 0)
        continue;
      const float *zt = &z.f[t * latent];
      matVec(&gate.f[e * inter * latent], zt, inter, latent, g.data());
      matVec(&up.f[e * inter * latent], zt, inter, latent, u.data());
      for (int64_t c = 0; c < inter; ++c)
        g[c] = roundIf(bf16Inputs, silu(g[c]) * u[c]);
      matVec(&down.f[e * latent * inter], g.data(), latent, inter, &y.f[(t * k + j) * latent]);
    }
  return y;
}

HostTensor expertNorm(const HostTensor &y, const HostTensor &indices, const HostTensor &weight,
                      double eps) {
  int64_t rows = indices.numElements(), latent = y.dim(2), experts = weight.dim(0);
  HostTensor out = y;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t e = expertOf(indices, r, experts);
    if (e < 0)
      std::fill_n(out.f.begin() + r * latent, latent, 0.0f);
    else
      normalizeRow(&y.f[r * latent], &weight.f[e * latent], latent, eps, &out.f[r * latent]);
  }
  return out;
}

HostTensor combine(const HostTensor &y, const HostTensor &weights) {
  int64_t tokens = y.dim(0), k = y.dim(1), latent = y.dim(2);
  HostTensor out = HostTensor::floats({tokens, latent});
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j) {
      float w = weights.f[t * k + j];
      for (int64_t c = 0; c < latent; ++c)
        out.f[t * latent + c] += w * y.f[(t * k + j) * latent + c];
    }
  return out;
}

std::pair<HostTensor, HostTensor> normResidual(const HostTensor &residual, const HostTensor &update,
                                               const HostTensor &post, const HostTensor &gate,
                                               const HostTensor &next, double postEps,
                                               double nextEps) {
  HostTensor h = add(residual, mul(rmsNorm(update, post, postEps), gate));
  HostTensor y = rmsNorm(h, next, nextEps);
  return {std::move(h), std::move(y)};
}

HostTensor localExperts(const HostTensor &indices, int64_t numExperts, int64_t member,
                        int64_t members) {
  int64_t perMember = numExperts / members, first = member * perMember;
  HostTensor out = indices;
  for (int32_t &e : out.i)
    e = (e >= first && e < first + perMember) ? static_cast<int32_t>(e - first) : -1;
  return out;
}

HostTensor megaMoE(const HostTensor &zIn, const HostTensor &indices, const HostTensor &weights,
                   const std::vector<ExpertStacks> &owners, int64_t numExperts, double eps,
                   bool bf16Inputs) {
  HostTensor rounded;
  if (bf16Inputs)
    rounded = roundToBf16(zIn);
  const HostTensor &z = bf16Inputs ? rounded : zIn;
  int64_t tokens = z.dim(0), latent = z.dim(1), k = indices.dim(1);
  int64_t perOwner = numExperts / static_cast<int64_t>(owners.size());
  int64_t inter = owners.front().gate->dim(1);
  HostTensor out = HostTensor::floats({tokens, latent});
  std::vector<float> g(inter), u(inter), y(latent), yn(latent);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j) {
      int64_t e = expertOf(indices, t * k + j, numExperts);
      if (e < 0)
        throw InterpreterError("kiln.megamoe takes global expert ids, got -1");
      const ExpertStacks &owner = owners[e / perOwner];
      int64_t local = e % perOwner;
      const float *zt = &z.f[t * latent];
      matVec(&owner.gate->f[local * inter * latent], zt, inter, latent, g.data());
      matVec(&owner.up->f[local * inter * latent], zt, inter, latent, u.data());
      for (int64_t c = 0; c < inter; ++c)
        g[c] = roundIf(bf16Inputs, silu(g[c]) * u[c]);
      matVec(&owner.down->f[local * latent * inter], g.data(), latent, inter, y.data());
      normalizeRow(y.data(), &owner.postNorm->f[local * latent], latent, eps, yn.data());
      float w = weights.f[t * k + j];
      for (int64_t c = 0; c < latent; ++c)
        out.f[t * latent + c] += w * yn[c];
    }
  return out;
}

HostTensor logits(const HostTensor &x, const HostTensor &head, bool lastOnly) {
  if (!lastOnly)
    return linear(x, head);
  int64_t hidden = x.dim(1);
  HostTensor last =
      HostTensor::floats({1, hidden}, std::vector<float>(x.f.end() - hidden, x.f.end()));
  return linear(last, head);
}

HostTensor nvfp4Dequant(const HostTensor &packed, const HostTensor &scales,
                        const HostTensor &global) {
  std::vector<int64_t> shape = packed.shape;
  int64_t halfIn = shape.back();
  shape.back() = halfIn * 2;
  HostTensor out = HostTensor::floats(shape);
  int64_t in = shape.back(), rows = out.numElements() / in;
  int64_t rowsPerMatrix = shape[shape.size() - 2];
  for (int64_t r = 0; r < rows; ++r) {
    float g = global.f[r / rowsPerMatrix];
    for (int64_t c = 0; c < in; ++c) {
      uint8_t byte = uint8_t(packed.i[r * halfIn + c / 2]);
      uint8_t code = c % 2 == 0 ? byte & 0xF : byte >> 4;
      out.f[r * in + c] = e2m1ToFloat(code) * scales.f[r * (in / 16) + c / 16] * g;
    }
  }
  return out;
}

} // namespace kiln::interp
