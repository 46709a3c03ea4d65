// kiln-run ARTIFACT --weights ... --prompt-ids ...: see KilnRun.h.
#include "runtime/tools/kiln-run/KilnRun.h"

#include <iostream>

#include <unistd.h>

int main(int argc, char **argv) {
  return kiln::kilnRunMain(std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr,
                           ::isatty(STDERR_FILENO) != 0);
}
