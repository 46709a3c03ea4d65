// Expert parallelism's MegaMoE stage as one persistent kernel per rank, with
// the combine exchanged through the expert group's peer memory instead of a
// separate all-reduce (docs/multi-gpu.md, "The peer MegaMoE kernel").
//
// Every rank holds the same tokens (decode under TP/EP) and a block of
// `experts` experts. In one launch, over warps that stay resident:
//   1. gate/up with SwiGLU for this rank's (token, choice) pairs (others'
//      choices are skipped, not computed against a stand-in expert);
//   2. one grid barrier (h complete);
//   3. down, four rows a warp: each warp stores its rows, times the expert's
//      post-norm, straight into every member's exchange slots while the
//      other warps (and the peers) still compute, and leaves its rows' sum
//      of squares; the warp that completes a pair (a per-pair arrival
//      counter) sums those in order and sends the pair's coefficient,
//      routing weight / RMS, and raises its flag at every member;
//   4. each output chunk waits for its token's k flags and sums coefficient
//      x rows over the k choices in order, so every member gets the same
//      bits.
//
// The exchange region (one per rank, `bytes` at the site's offset, laid out
// by peerSiteLayout) holds the grid-barrier count, the pair counters, and two
// parity copies of the flags, coefficients and rows: a launch's parity is its
// launch count mod 2, read from the barrier count, so consecutive launches of
// a site never share slots and nothing is reset between steps. Peer memory
// is written with plain stores, ordered by system-scope release (the pair
// counter's, then a fence before the flag); the reader acquires the flags
// and reads the slots with volatile loads.
#pragma once

#include "targets/common/KernelSpec.h"
#include "targets/common/TargetHooks.h"

#include <cstdint>

namespace kiln::nvptx {

struct PeerSiteLayout {
  int64_t pairs = 256; // u64 arrival counter per (row, choice)
  int64_t flags = 0;   // u64 [2][rows][k]
  int64_t coefs = 0;   // f32 [2][rows][k]: routing weight / RMS
  int64_t data = 0;    // f32 [2][rows][k][latent]: post-norm x down rows
  int64_t bytes = 0;   // the site, a multiple of 256
};
PeerSiteLayout peerSiteLayout(const kernels::PeerMegaMoEShape &shape);

bool peerMegaMoEFits(const kernels::PeerMegaMoEShape &shape);
kernels::KernelSpec peerMegaMoE(const kernels::PeerMegaMoEShape &shape);
kernels::Work peerMegaMoEWork(const kernels::PeerMegaMoEShape &shape);

} // namespace kiln::nvptx
