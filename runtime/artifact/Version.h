// The version of the artifact schema (runtime/artifact/kiln_artifact.fbs)
// this tree writes and reads. kilnc stores it in Artifact.version; the runtime
// refuses an artifact whose schema_major differs from kSchemaMajor and
// accepts any schema_minor (minor versions add fields), as long as the
// artifact carries its digests (1.6).
#pragma once

#include <cstdint>

namespace kiln::artifact {

// Bumped when a change breaks readers: a field's meaning or a rule changes.
constexpr uint32_t kSchemaMajor = 1;
// Bumped when optional fields are added at the end of a table.
// 1: Launch.grid and Launch.block (GPU targets); 2: EntryPoint.sequences;
// 3: one artifact for every rank (comm_groups, Collective.comm_group,
// WeightBinding.slice_group, the GroupIndex scalar); 4: peer exchange
// (CommGroup.exchange_bytes, Exchange buffers); 5: Hopper kernels
// (Kernel.shared_bytes, the TensorMap scalar, Launch.tensor_maps); 6:
// Artifact.digests, which the runtime requires (an artifact of an older
// minor is refused: recompile it); 7: the "verify" entry point and
// KvCache.ring; 8: paged KV caches (KvCache.page_tokens, Input 2, the page
// table); 9: the memory plan's device (Target.memory_bytes and
// reserve_bytes); 10: Target.kernels_wait_for_prior_grid.
constexpr uint32_t kSchemaMinor = 10;

} // namespace kiln::artifact
