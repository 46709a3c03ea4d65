// The MegaMoE expert stage for batched decode on GPUs: a few items per expert
// (64 tokens choosing 8 of 256 experts give 2 each), too few for a tile of
// 128 items (targets/nvptx/MmaExperts.h), too many to read an expert's
// weights once per item (the per-item warp kernels of WarpGemv.cpp).
//
// Both kernels read the expert lists (ExpertLists.h) and give a warp one
// expert's weight rows: gate/up two rows of each, down four. The warp
// streams its rows once for kGroupedItems of the expert's items at a time
// (NVFP4 with Grouped lanes, WarpDot.h: each load of an item's vector
// is contiguous across the warp),
// so an expert with at most that many items is read from memory once;
// experts without items cost a warp two loads of the lists. Results go where
// the per-item kernels put them (h[t, j, :], y[t, j, :]), so the expert
// scales and the weighted sum follow unchanged; items of other ranks' experts
// (-1) are not listed and not computed.
#pragma once

#include "targets/common/ExpertLists.h"

namespace kiln::kernels {

// Items a warp carries through one pass over its weight rows.
constexpr int64_t kGroupedItems = 2;

bool groupedExpertsFit(const ExpertTileShape &shape);
// The lists kernel and the two grouped kernels with their launches and list
// buffers, in the shape the tile kernels come in (the kernels take the same
// arguments: z or h, the lists, the projections, h or y).
TargetHooks::MatrixExperts groupedExperts(const ExpertTileShape &shape);

} // namespace kiln::kernels
