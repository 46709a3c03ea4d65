#include "compiler/interpreter/Collectives.h"

#include "compiler/interpreter/ReferenceOps.h"

#include <algorithm>

namespace kiln::interp {
namespace {

std::vector<int64_t> unravel(const std::vector<int64_t> &shape, int64_t linear) {
  std::vector<int64_t> index(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    index[d] = linear % shape[d];
    linear /= shape[d];
  }
  return index;
}

int64_t ravel(const std::vector<int64_t> &shape, const std::vector<int64_t> &index) {
  int64_t linear = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    linear = linear * shape[d] + index[d];
  return linear;
}

// Elements before, along and after `axis`, for row-major copies.
struct AxisSplit {
  int64_t outer = 1, along, inner = 1;
};
AxisSplit around(const std::vector<int64_t> &shape, int64_t axis) {
  AxisSplit s{1, shape[axis], 1};
  for (int64_t d = 0; d < axis; ++d)
    s.outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d)
    s.inner *= shape[d];
  return s;
}

} // namespace

std::vector<int64_t> groupOf(const std::vector<int64_t> &gridShape,
                             const std::vector<int64_t> &gridAxes, int64_t rank) {
  std::vector<int64_t> base = unravel(gridShape, rank);
  int64_t size = 1;
  for (int64_t axis : gridAxes)
    size *= gridShape[axis];
  std::vector<int64_t> members;
  for (int64_t i = 0; i < size; ++i) {
    // In-group index i, unravelled over the listed axes in their order.
    std::vector<int64_t> index = base;
    int64_t rest = i;
    for (int64_t a = static_cast<int64_t>(gridAxes.size()) - 1; a >= 0; --a) {
      index[gridAxes[a]] = rest % gridShape[gridAxes[a]];
      rest /= gridShape[gridAxes[a]];
    }
    members.push_back(ravel(gridShape, index));
  }
  return members;
}

HostTensor reduceAll(const std::vector<const HostTensor *> &members, Reduction kind) {
  HostTensor out = *members.front();
  for (size_t m = 1; m < members.size(); ++m) {
    if (members[m]->shape != out.shape)
      throw InterpreterError("reduction over ranks with different shapes " + out.shapeString() +
                             " and " + members[m]->shapeString());
    for (size_t k = 0; k < out.f.size(); ++k) {
      float a = out.f[k], b = members[m]->f[k];
      out.f[k] = kind == Reduction::Sum   ? a + b
                 : kind == Reduction::Max ? std::max(a, b)
                 : kind == Reduction::Min ? std::min(a, b)
                                          : a * b;
    }
    for (size_t k = 0; k < out.i.size(); ++k) {
      int32_t a = out.i[k], b = members[m]->i[k];
      out.i[k] = kind == Reduction::Sum   ? a + b
                 : kind == Reduction::Max ? std::max(a, b)
                 : kind == Reduction::Min ? std::min(a, b)
                                          : a * b;
    }
  }
  return out;
}

HostTensor concatAxis(const std::vector<const HostTensor *> &parts, int64_t axis) {
  HostTensor out = *parts.front();
  out.shape[axis] = 0;
  for (const HostTensor *p : parts)
    out.shape[axis] += p->shape[axis];
  out.f.assign(out.isInt ? 0 : out.numElements(), 0.0f);
  out.i.assign(out.isInt ? out.numElements() : 0, 0);
  AxisSplit whole = around(out.shape, axis);
  int64_t offset = 0;
  for (const HostTensor *p : parts) {
    AxisSplit piece = around(p->shape, axis);
    for (int64_t o = 0; o < piece.outer; ++o) {
      int64_t src = o * piece.along * piece.inner;
      int64_t dst = (o * whole.along + offset) * whole.inner;
      int64_t n = piece.along * piece.inner;
      if (out.isInt)
        std::copy_n(p->i.begin() + src, n, out.i.begin() + dst);
      else
        std::copy_n(p->f.begin() + src, n, out.f.begin() + dst);
    }
    offset += piece.along;
  }
  return out;
}

HostTensor sliceAxis(const HostTensor &t, int64_t axis, int64_t index, int64_t count) {
  if (t.shape[axis] % count != 0)
    throw InterpreterError("cannot split dimension " + std::to_string(axis) + " of " +
                           t.shapeString() + " into " + std::to_string(count) + " equal pieces");
  HostTensor out = t;
  out.shape[axis] = t.shape[axis] / count;
  out.f.assign(out.isInt ? 0 : out.numElements(), 0.0f);
  out.i.assign(out.isInt ? out.numElements() : 0, 0);
  AxisSplit whole = around(t.shape, axis), piece = around(out.shape, axis);
  for (int64_t o = 0; o < whole.outer; ++o) {
    int64_t src = (o * whole.along + index * piece.along) * whole.inner;
    int64_t dst = o * piece.along * piece.inner;
    int64_t n = piece.along * piece.inner;
    if (t.isInt)
      std::copy_n(t.i.begin() + src, n, out.i.begin() + dst);
    else
      std::copy_n(t.f.begin() + src, n, out.f.begin() + dst);
  }
  return out;
}

} // namespace kiln::interp
