// kiln-dump FILE [--weights] [--steps]: prints what a Kiln artifact holds.
#include "runtime/tools/kiln-dump/KilnDump.h"

#include <iostream>

int main(int argc, char **argv) {
  return kiln::kilnDumpMain(std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr);
}
