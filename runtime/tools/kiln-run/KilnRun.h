// kiln-run: generates tokens with a Kiln artifact: x86 on this CPU, nvptx on
// an NVIDIA GPU.
//
//   kiln-run ARTIFACT --weights DIR|synthetic:SEED --prompt-ids 1,2,3
//            --max-new-tokens N [--temperature T] [--top-p P] [--seed S]
//            [--context N] [--threads N] [--device N]
//
// Prints the generated token ids (comma-separated, the --prompt-ids format)
// and then the time to first token, the time per output token and the
// decode rate on `out`. Weight loading shows a progress bar on `err` when it
// is a terminal, then one summary line, which for an nvptx artifact names the
// GPU (its name and compute capability). Every error is one line on `err`
// and a non-zero exit: 2 for bad usage, 1 for anything else.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace kiln {

int kilnRunMain(const std::vector<std::string> &args, std::ostream &out, std::ostream &err,
                bool errIsTerminal);

} // namespace kiln
