#include "runtime/engine/WeightLayout.h"

#include <cstring>

namespace kiln {

void slicePiece(const uint8_t *src, const std::vector<int64_t> &shape, size_t elementSize, int dim,
                int count, int index, uint8_t *dst) {
  size_t outer = 1;
  for (int i = 0; i < dim; ++i)
    outer *= static_cast<size_t>(shape[i]);
  size_t inner = elementSize;
  for (size_t i = dim + 1; i < shape.size(); ++i)
    inner *= static_cast<size_t>(shape[i]);
  const size_t whole = static_cast<size_t>(shape[dim]) * inner;
  const size_t piece = whole / static_cast<size_t>(count);
  for (size_t o = 0; o < outer; ++o)
    std::memcpy(dst + o * piece, src + o * whole + index * piece, piece);
}

void vnniBf16Blocks(const uint16_t *src, int64_t n, int64_t k, uint16_t *dst) {
  // Walk W row by row and move (k, k+1) pairs as 32-bit words: the pair of
  // row 16 bn + c at columns 32 bk + 2r lands in word c of block row r.
  const int64_t blocksK = k / 32;
  for (int64_t row = 0; row < n; ++row) {
    const int64_t bn = row / 16, c = row % 16;
    const uint16_t *in = src + row * k;
    for (int64_t bk = 0; bk < blocksK; ++bk) {
      uint16_t *block = dst + (bn * blocksK + bk) * 16 * 32;
      for (int64_t r = 0; r < 16; ++r)
        std::memcpy(block + r * 32 + 2 * c, in + bk * 32 + 2 * r, 2 * sizeof(uint16_t));
    }
  }
}

} // namespace kiln
