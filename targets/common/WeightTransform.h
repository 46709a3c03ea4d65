// How the runtime lays a weight out before kernels read it (the artifact's
// WeightTransform): as the checkpoint stores it, or in the VNNI blocks the
// x86 tiled GEMMs read (16 columns by 32 of k, one k pair of 16 columns per
// 64-byte row).
#pragma once

namespace kiln::kernels {

enum class Transform { None, VnniBf16 };

} // namespace kiln::kernels
