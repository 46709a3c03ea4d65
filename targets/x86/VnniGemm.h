// The vector-register families of x86 GEMMs: y[rows, n] f32 = a[rows, k]
// bf16 · Wᵀ over the same VNNI blocks AMX reads (WeightTransform VnniBf16:
// each block row holds one k pair of 16 columns, 64 bytes). A register block
// of `rows` rows of a by `tiles` 16-column tiles of W keeps rows x tiles
// vector<16xf32> accumulators (a single row: a whole panel of tiles); each step along k takes one
// block row per tile and one broadcast bf16 pair of a per row, and multiplies them:
//   avx512bf16: vdpbf16ps (x86vector.avx512.dot), both pair halves at once;
//   fma: the pairs' halves widened to f32 by shifts, two vfmadd231ps.
// Arguments (a, W, y; rows, part, parts): exactly `rows` rows are computed
// (decode computes one), and parts split the panels.
#pragma once

#include "targets/common/KernelSpec.h"

#include <cstdint>
#include <string>

namespace kiln::x86 {

struct VnniGemmTiling {
  bool bf16Dot = false;   // vdpbf16ps; else the pairs are split for FMAs
  int64_t rows = 1;       // rows of a in a register block
  int64_t tiles = 1;      // 16-column tiles of W in a block of `rows` rows
  int64_t panelTiles = 1; // tiles of a panel (a multiple of `tiles`): the
                          // unit parts split, and the block of a single row,
                          // whose many independent accumulators keep W
                          // streaming at decode (one token)
  int64_t panels(int64_t n) const { return n / 16 / panelTiles; }
  const char *family() const { return bf16Dot ? "avx512bf16" : "fma"; }
};

// The register blocks for the family and vector width (512: 32 zmm, 256: 16
// ymm, each accumulator one or two registers), the panel dividing n / 16.
VnniGemmTiling vnniGemmTiling(bool bf16Dot, int vectorBits, int64_t n);

// n % 16 == 0, k % 32 == 0.
kernels::KernelSpec linearVnni(const VnniGemmTiling &tiling, int64_t n, int64_t k);

} // namespace kiln::x86
