// Files a user names as inputs (configs, checkpoints, artifacts, references)
// are looked at before they are opened: open(2) on a FIFO blocks until some
// writer appears, so a FIFO given where a file is expected would hang the
// tool before any check. stat(2) does not block.
#pragma once

#include <cstdint>
#include <string>

namespace kiln {

// Empty when `path` names a regular file (following symlinks); otherwise why
// it is no input file, for an error message: "no such file or directory",
// "a FIFO, not a regular file".
std::string inputFileProblem(const std::string &path);

// Why open(2) of `path` failed with `error`, for a message: what the path
// is when it is no regular file (a socket refuses to open with ENXIO),
// else "cannot open: " and the error's text.
std::string openFailure(const std::string &path, int error);

// The whole of the regular file at `path`, at most `maxBytes`: opened
// without blocking and checked through the descriptor (what is read is what
// was checked). Throws
// std::runtime_error "<path>: <why>" (inputFileProblem's reasons, "N bytes,
// more than <what> may hold (at most M)", a read that fails).
std::string readInputFile(const std::string &path, uint64_t maxBytes, const std::string &what);

} // namespace kiln
