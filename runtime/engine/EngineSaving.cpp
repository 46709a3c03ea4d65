// Saved conversations (Engine::save, restore, dropSaved) and the copy on
// write that keeps shared KV pages unchanged for those that read them.
//
// A saved conversation is what a conversation's caches hold at one moment:
// its global layers' pages, which it shares (KvPages references), and a copy
// of its sliding layers' rings, which belong to their conversation slot and
// are overwritten as it goes on. Restoring one into another slot adopts the
// pages and copies the rings back: the slot then reads exactly what the
// saved conversation had computed.
#include "runtime/engine/EngineCall.h"
#include "runtime/engine/EngineImpl.h"

namespace kiln {

bool Engine::Impl::writesSharedPage(int64_t conversation) const {
  if (!pages.paged())
    return false;
  const int64_t index = past[conversation] / pages.pageTokens();
  return index < pages.held(conversation) && pages.references(pages.page(conversation, index)) > 1;
}

void Engine::Impl::copyWritePage(int64_t conversation) {
  const int64_t index = past[conversation] / pages.pageTokens();
  const int32_t from = pages.page(conversation, index);
  const int32_t to = pages.replace(conversation, index);
  if (to < 0)
    pagesFull(1);
  for (size_t buffer = 0; buffer < kv.size(); ++buffer) {
    if (!kvPaged[buffer / 2])
      continue;
    // The pool's pages and the scratch page, each the same bytes.
    const uint64_t pageBytes = kv[buffer].size() / static_cast<uint64_t>(pages.pages() + 1);
    backend->copy(kv[buffer].address() + static_cast<uint64_t>(to) * pageBytes,
                  kv[buffer].address() + static_cast<uint64_t>(from) * pageBytes, pageBytes);
  }
}

std::vector<std::pair<DeviceAddress, uint64_t>>
Engine::Impl::ringSlices(int64_t conversation) const {
  std::vector<std::pair<DeviceAddress, uint64_t>> slices;
  for (size_t buffer = 0; buffer < kv.size(); ++buffer) {
    if (kvPaged[buffer / 2])
      continue;
    const uint64_t bytes = kv[buffer].size() / static_cast<uint64_t>(conversations);
    slices.emplace_back(kv[buffer].address() + static_cast<uint64_t>(conversation) * bytes, bytes);
  }
  return slices;
}

const Engine::Impl::SavedConversation &Engine::Impl::savedOne(int64_t number) const {
  const auto found = saved.find(number);
  if (found == saved.end())
    throw RuntimeError("no saved conversation " + std::to_string(number) + " (" +
                       std::to_string(saved.size()) + " saved)");
  return found->second;
}

bool Engine::canSave() const { return impl_->savable; }

uint64_t Engine::savedBytes() const {
  uint64_t bytes = 0;
  for (const auto &[address, size] : impl_->ringSlices(0))
    bytes += size;
  return bytes;
}

int64_t Engine::save(int64_t conversation) {
  Impl &impl = *impl_;
  // Refused before it is handed on (kiln-serve --nproc): the other ranks
  // make only calls that run.
  impl.checkConversation(conversation);
  if (!impl.savable)
    impl.fail("saving a conversation needs paged global KV caches (compile with kilnc "
              "--kv-page-tokens)");
  Impl::SavedConversation one;
  const std::vector<std::pair<DeviceAddress, uint64_t>> slices = impl.ringSlices(conversation);
  if (!impl.spareRings.empty()) {
    one.rings = std::move(impl.spareRings.back());
    impl.spareRings.pop_back();
  } else {
    // A device without room for the copy saves nothing (the caller may
    // forget instead); nothing was handed on yet.
    try {
      for (const auto &[address, bytes] : slices)
        one.rings.push_back(DeviceMemory::allocate(*impl.backend, bytes, "a saved conversation"));
    } catch (const RuntimeError &) {
      return 0;
    }
  }
  if (impl.observer)
    impl.observer(EngineCall{EngineCall::Kind::Save, conversation, 0, {}, {}, {}, impl.nextSaved});
  for (size_t i = 0; i < slices.size(); ++i)
    impl.backend->copy(one.rings[i].address(), slices[i].first, slices[i].second);
  one.pages = impl.pages.share(conversation, impl.pages.held(conversation));
  one.past = impl.past[conversation];
  one.written = impl.written[conversation];
  impl.backend->synchronize();
  const int64_t number = impl.nextSaved++;
  impl.saved.emplace(number, std::move(one));
  return number;
}

bool Engine::canRestore(int64_t number, int64_t keep) const {
  const Impl &impl = *impl_;
  const auto found = impl.saved.find(number);
  return found != impl.saved.end() && keep >= 0 && keep <= found->second.past &&
         found->second.written - keep <= impl.rollbackSlack;
}

void Engine::restore(int64_t conversation, int64_t number, int64_t keep) {
  Impl &impl = *impl_;
  impl.checkConversation(conversation);
  const Impl::SavedConversation &one = impl.savedOne(number);
  const std::string what = "restoring saved conversation " + std::to_string(number) + " (" +
                           std::to_string(one.past) + " positions) into conversation " +
                           std::to_string(conversation) + ": ";
  if (impl.past[conversation] != 0 || impl.pages.held(conversation) != 0)
    throw RuntimeError(what + "it holds " + std::to_string(impl.past[conversation]) +
                       " positions (forget it first)");
  if (!canRestore(number, keep))
    throw RuntimeError(what + "cannot keep " + std::to_string(keep) + " of them (" +
                       std::to_string(one.written) +
                       " were written, and the sliding layers' rings keep " +
                       std::to_string(impl.rollbackSlack) + " positions beyond their windows)");
  if (impl.observer)
    impl.observer(EngineCall{EngineCall::Kind::Restore, conversation, keep, {}, {}, {}, number});
  const int64_t pageTokens = impl.pages.pageTokens();
  const std::vector<int32_t> kept(one.pages.begin(),
                                  one.pages.begin() + (keep + pageTokens - 1) / pageTokens);
  impl.pages.adopt(conversation, kept);
  const std::vector<std::pair<DeviceAddress, uint64_t>> slices = impl.ringSlices(conversation);
  for (size_t i = 0; i < slices.size(); ++i)
    impl.backend->copy(slices[i].first, one.rings[i].address(), slices[i].second);
  impl.backend->synchronize();
  impl.past[conversation] = keep;
  impl.written[conversation] = one.written;
}

void Engine::dropSaved(int64_t number) {
  Impl &impl = *impl_;
  impl.savedOne(number); // throws for an unknown number
  if (impl.observer)
    impl.observer(EngineCall{EngineCall::Kind::DropSaved, 0, 0, {}, {}, {}, number});
  Impl::SavedConversation &one = impl.saved.at(number);
  impl.pages.drop(one.pages);
  impl.spareRings.push_back(std::move(one.rings));
  impl.saved.erase(number);
}

int64_t Engine::savedPast(int64_t number) const { return impl_->savedOne(number).past; }

int64_t Engine::savedKvPages(int64_t number) const {
  return static_cast<int64_t>(impl_->savedOne(number).pages.size());
}

int64_t Engine::distinctKvPages(const std::vector<int64_t> &saved) const {
  if (!impl_->pages.paged())
    return 0;
  std::vector<const std::vector<int32_t> *> holders;
  for (int64_t number : saved)
    holders.push_back(&impl_->savedOne(number).pages);
  return impl_->pages.distinct(holders);
}

} // namespace kiln
