// The engine's side of a multi-rank job: which rank this process is and
// where it sits in each comm group, the collectives' set-up, and the
// Collective steps (docs/runtime-abi.md, docs/multi-gpu.md).
#include "runtime/engine/EngineImpl.h"

#include "runtime/cpu/RuntimeError.h"

namespace kiln {

void Engine::Impl::joinLayout(const EngineOptions &options) {
  const fb::Layout &layout = *artifact->layout();
  if (layout.world() == 1)
    return;
  const std::string shape = std::to_string(layout.world()) + " ranks (tp " +
                            std::to_string(layout.tp()) + ", ep " + std::to_string(layout.ep()) +
                            ")";
  if (options.loadAlone && !options.rank)
    fail("loading a rank alone needs the rank (EngineOptions::rank)");
  alone = options.loadAlone;
  std::optional<RankInfo> info = options.rank ? options.rank : rankFromEnvironment();
  if (!info)
    fail("the artifact runs on " + shape + ", one process each: start it with --nproc " +
         std::to_string(layout.world()) + " (kiln-run, kiln-serve, kiln-check, kiln-bench-decode)" +
         ", or set KILN_RANK, KILN_WORLD_SIZE and KILN_RENDEZVOUS in each process");
  if (info->world != layout.world())
    fail("the artifact runs on " + shape + ", but this job has " + std::to_string(info->world) +
         ": start " + std::to_string(layout.world()) + " processes, or rebuild it for " +
         std::to_string(info->world) + " ranks (kilnc --tp/--ep)");
  rank = *info;
  if (const auto *specs = artifact->comm_groups())
    for (const fb::CommGroup *group : *specs) {
      CommGroupSpec spec;
      spec.name = group->name() ? group->name()->str() : std::string();
      spec.size = static_cast<int>(group->size());
      spec.ranks.assign(group->ranks()->begin(), group->ranks()->end());
      memberships.push_back(membershipOf(spec, rank.rank));
      groups.push_back(std::move(spec));
    }
}

CollectivePlan Engine::Impl::planCollective(const fb::Collective &collective,
                                            const EntryPlan &entry,
                                            const std::string &where) const {
  CollectivePlan plan;
  plan.kind = collective.kind();
  plan.group = static_cast<int>(collective.comm_group());
  plan.axis = collective.axis();
  plan.what = std::string(plan.kind == fb::CollectiveKind::AllReduce       ? "all_reduce"
                          : plan.kind == fb::CollectiveKind::AllGather     ? "all_gather"
                          : plan.kind == fb::CollectiveKind::ReduceScatter ? "reduce_scatter"
                                                                           : "all_to_all") +
              " for " + quoted(collective.op()) + " (" + where + ")";
  if (plan.kind == fb::CollectiveKind::AllToAll)
    fail(where + ": all_to_all is not implemented by the runtime");
  plan.source = planBuffer(*collective.source(), entry, where + " (collective): source");
  plan.destination =
      planBuffer(*collective.destination(), entry, where + " (collective): destination");
  // Sums are of f32; a gather copies any 4-byte elements (expert choices).
  const bool sums = plan.kind != fb::CollectiveKind::AllGather;
  for (const fb::BufferRef *ref : {collective.source(), collective.destination()})
    if (ref->kind() != fb::BufferKind::Arena ||
        !(ref->dtype() == fb::DType::F32 || (!sums && ref->dtype() == fb::DType::I32)))
      fail(where + " (collective): collectives exchange activations in the arena: f32 (sums) "
                   "or 4-byte elements (gathers)");
  plan.groupSize = groups.at(static_cast<size_t>(plan.group)).size;
  if (plan.kind == fb::CollectiveKind::ReduceScatter && plan.axis != 0)
    fail(where + " (collective): reduce_scatter splits axis 0 only");
  return plan;
}

void Engine::Impl::connectRanks() {
  if (rank.world == 1)
    return;
  // The largest input any collective takes, and the largest gather along an
  // inner axis (staged whole, then spread into the destination's columns).
  uint64_t capacity = 0, staging = 0;
  for (EntryPlan &entry : entries)
    for (StepPlan &step : entry.steps)
      if (auto *collective = std::get_if<CollectivePlan>(&step)) {
        int64_t sizes[memref::kMaxRank];
        const uint64_t from =
            static_cast<uint64_t>(evaluateArg(collective->source, entry.maxTokens, sizes));
        const uint64_t to =
            static_cast<uint64_t>(evaluateArg(collective->destination, entry.maxTokens, sizes));
        capacity = std::max(capacity, from);
        if (collective->kind == fb::CollectiveKind::AllGather && collective->axis > 0)
          staging = std::max(staging, to);
      }
  // Alone: no job to join; the exchange memory is this rank's, and every
  // member's address in its tables is this rank's own (nothing runs).
  if (!alone)
    comm = backend->connect(rank, groups, capacity);
  if (staging)
    gatherStaging = DeviceMemory::allocate(*backend, staging, "all-gather staging");
  // Every member provides its groups' exchange memory, zeroed (the kernels'
  // counters and flags start at 0), before any kernel may write to it.
  exchangeMemory.resize(groups.size());
  exchangePeers.resize(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    const uint64_t bytes = artifact->comm_groups()->Get(static_cast<uint32_t>(g))->exchange_bytes();
    if (bytes == 0)
      continue;
    const std::string what =
        "exchange memory of comm group " + std::to_string(g) + " '" + groups[g].name + "'";
    exchangeMemory[g] = DeviceMemory::allocate(*backend, bytes, what);
    exchangePeers[g] =
        alone ? std::vector<DeviceAddress>(static_cast<size_t>(groups[g].size),
                                           exchangeMemory[g].address())
              : backend->sharePeerMemory(*comm, static_cast<int>(g), memberships[g].index,
                                         groups[g].size, exchangeMemory[g].address(), bytes, what);
  }
}

DeviceAddress Engine::Impl::exchangeTable(uint32_t group, uint64_t offset) {
  if (group >= exchangePeers.size() || exchangePeers[group].empty())
    fail("an Exchange buffer of comm group " + std::to_string(group) +
         ", which has no exchange memory in this job");
  auto [found, added] = exchangeTables.try_emplace({group, offset});
  if (added) {
    std::vector<uint64_t> table;
    for (DeviceAddress member : exchangePeers[group])
      table.push_back(member + offset);
    const uint64_t bytes = table.size() * sizeof(uint64_t);
    found->second = DeviceMemory::allocate(*backend, bytes, "exchange table");
    backend->upload(found->second.address(), table.data(), bytes);
  }
  return found->second.address();
}

void Engine::Impl::runCollective(CollectivePlan &collective, int64_t tokens) {
  int64_t sizes[memref::kMaxRank];
  const int64_t fromBytes = evaluateArg(collective.source, tokens, sizes);
  const int64_t toBytes = evaluateArg(collective.destination, tokens, sizes);
  const DeviceAddress from = collective.source.address, to = collective.destination.address;
  switch (collective.kind) {
  case fb::CollectiveKind::AllReduce:
    comm->allReduce(collective.group, from, to, static_cast<uint64_t>(fromBytes / 4),
                    collective.what);
    return;
  case fb::CollectiveKind::ReduceScatter:
    comm->reduceScatter(collective.group, from, to, static_cast<uint64_t>(toBytes / 4),
                        collective.what);
    return;
  case fb::CollectiveKind::AllGather:
    break;
  default:
    fail(collective.what + ": not implemented");
  }
  if (collective.axis == 0) {
    comm->allGather(collective.group, from, to, static_cast<uint64_t>(fromBytes / 4),
                    collective.what);
    return;
  }
  // Along an inner axis: the members' inputs land one after another in the
  // staging buffer, then each goes to its columns: `outer` rows of `chunk`
  // bytes, member m's at m * chunk within each destination row.
  uint64_t outer = 1;
  for (int d = 0; d < collective.axis; ++d)
    outer *= static_cast<uint64_t>(sizes[d]);
  const uint64_t piece = static_cast<uint64_t>(fromBytes);
  const uint64_t chunk = piece / outer;
  const uint64_t members = static_cast<uint64_t>(collective.groupSize);
  comm->allGather(collective.group, from, gatherStaging.address(), piece / 4, collective.what);
  for (uint64_t m = 0; m < members; ++m)
    backend->copy2D(to + m * chunk, chunk * members, gatherStaging.address() + m * piece, chunk,
                    chunk, outer);
}

} // namespace kiln
