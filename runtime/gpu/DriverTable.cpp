#include "runtime/gpu/DriverTable.h"

#include <cstdio>
#include <stdexcept>

namespace kiln::gpu {
namespace {

// A table method called without the capability its has*() denies: a
// GpuBackend bug.
[[noreturn]] void missing(const DriverTable &table, const char *what) {
  throw std::logic_error(std::string(table.vendor()) + " driver table: " + what +
                         " called where the table says it has none");
}

} // namespace

std::string gibibytes(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return text;
}

CallResult DriverTable::copy2D(DeviceAddress, uint64_t, DeviceAddress, uint64_t, uint64_t, uint64_t,
                               Stream) {
  missing(*this, "copy2D");
}

CallResult DriverTable::blocksPerMultiprocessor(int *, Function, unsigned, unsigned) {
  missing(*this, "blocksPerMultiprocessor");
}

CallResult DriverTable::query(Stream) { missing(*this, "query"); }
CallResult DriverTable::queryEvent(Event) { missing(*this, "queryEvent"); }
CallResult DriverTable::createEvent(Event *, bool) { missing(*this, "createEvent"); }
CallResult DriverTable::recordEvent(Event, Stream) { missing(*this, "recordEvent"); }
CallResult DriverTable::waitEvent(Event) { missing(*this, "waitEvent"); }
CallResult DriverTable::elapsed(float *, Event, Event) { missing(*this, "elapsed"); }
void DriverTable::destroyEvent(Event) noexcept {}

void DriverTable::checkTensorMap(const TensorMapSpec &, int, const std::string &) const {
  missing(*this, "checkTensorMap");
}
void DriverTable::encodeTensorMap(void *, const TensorMapSpec &, const BufferArgument &,
                                  const std::string &) const {
  missing(*this, "encodeTensorMap");
}

CallResult DriverTable::getIpcHandle(void *, DeviceAddress) { missing(*this, "getIpcHandle"); }
CallResult DriverTable::openIpcHandle(DeviceAddress *, const void *) {
  missing(*this, "openIpcHandle");
}
void DriverTable::closeIpcHandle(DeviceAddress) noexcept {}

std::unique_ptr<Collectives> DriverTable::connect(GpuBackend &, const RankInfo &,
                                                  std::vector<CommGroupSpec>) {
  return nullptr;
}

} // namespace kiln::gpu
