// The byte-level rearrangements between a checkpoint tensor and the bytes a
// kernel reads: the tensor-parallel slice and the AMX VNNI block layout
// (docs/runtime-abi.md, "Weights").
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln {

// Copies piece `index` of `count` equal pieces along `dim` of the row-major
// tensor `src` (`shape`, `elementSize` bytes an element) to `dst`, which
// receives shape[dim] / count rows of that dimension. The caller checks that
// shape[dim] % count == 0.
void slicePiece(const uint8_t *src, const std::vector<int64_t> &shape, size_t elementSize, int dim,
                int count, int index, uint8_t *dst);

// Rearranges the bf16 matrix W [n, k] (n % 16 == 0, k % 32 == 0) into VNNI
// blocks: n/16 * k/32 blocks of 16 x 32 bf16, block (bn, bk) at index
// bn * k/32 + bk, whose row r, column 2c + p holds W[16 bn + c][32 bk + 2r + p]
// -- the B operand of AMX's tdpbf16ps for an output tile of 16 columns of n,
// and row by row what the x86 vector GEMMs read (targets/x86/VnniGemm.h).
void vnniBf16Blocks(const uint16_t *src, int64_t n, int64_t k, uint16_t *dst);

} // namespace kiln
