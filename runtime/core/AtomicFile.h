// Writing a file so that readers see either the old file or the whole new
// one, never a partial write: kilnc's artifacts, IR and references, and the
// checkpoint writer's config and index files all go through this.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace kiln {

// A file that could not be written; what() names it and says why.
class FileWriteError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// Writes `size` bytes to a new temporary file in the directory of `path`,
// fsyncs it, renames it over `path` and fsyncs the directory. On failure the
// temporary file is removed, `path` is left as it was, and a FileWriteError
// says "<path>: cannot write: <reason>".
void writeFileAtomically(const std::string &path, const void *data, size_t size);
inline void writeFileAtomically(const std::string &path, const std::string &text) {
  writeFileAtomically(path, text.data(), text.size());
}

} // namespace kiln
