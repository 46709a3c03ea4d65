// kiln-dump: a readable summary of a Kiln artifact. The logic lives here, in
// a library, so that tests can run it on artifacts they build.
#pragma once

#include "runtime/artifact/Artifact.h"

#include <iosfwd>
#include <string>
#include <vector>

namespace kiln {

struct DumpOptions {
  bool weights = false; // every weight binding
  bool steps = false;   // every step of every entry point
};

// Prints the summary of `artifact` (see kiln-dump --help).
void dumpArtifact(const Artifact &artifact, const DumpOptions &options, std::ostream &out);

// The command line: `args` without the program name. Returns the exit code:
// 0 done (or --help), 1 the artifact cannot be read (its one-line reason on
// `err`), 2 bad usage.
int kilnDumpMain(const std::vector<std::string> &args, std::ostream &out, std::ostream &err);

} // namespace kiln
