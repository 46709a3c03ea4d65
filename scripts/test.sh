#!/usr/bin/env bash
# The whole test suite: build everything, run ctest (lit + GoogleTest, and the
# libFuzzer targets for a bounded time; GPU tests carry the label `cuda` or
# `hip` and run on GPU machines, not here), then build the runtime alone
# (-DKILN_BUILD_COMPILER=OFF) and run its tests, plainly and under ASan and
# UBSan, and the x86 tools' lit tests with those sanitized tools.
source "$(dirname "$0")/lib.sh"

kiln_install_packages
# The full build's ctest also runs the x86 tools' lit tests with the
# runtime's tools from the sanitized build below (lit-sanitized-tools).
ASAN_BUILD=${KILN_ASAN_BUILD:-$KILN_ROOT/build-asan}
kiln_configure "$KILN_BUILD" "-DKILN_SANITIZED_TOOLS_DIR=$ASAN_BUILD/bin"
kiln_install_oracles "$KILN_BUILD"
kiln_build "$KILN_BUILD"

RUNTIME_BUILD=${KILN_RUNTIME_BUILD:-$KILN_ROOT/build-runtime-only}
kiln_configure "$RUNTIME_BUILD" -DKILN_BUILD_COMPILER=OFF
kiln_build "$RUNTIME_BUILD"

# The runtime again under AddressSanitizer and UndefinedBehaviorSanitizer
# (any report fails its test): the x86 tools' code paths, the loader, the
# engine, the tokenizer, the server's parts.
kiln_configure "$ASAN_BUILD" -DKILN_BUILD_COMPILER=OFF -DKILN_BUILD_FUZZERS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" \
  "-DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=address,undefined"
kiln_build "$ASAN_BUILD"

status=0
kiln_log "runtime under ASan and UBSan: unit tests"
(cd "$ASAN_BUILD" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --output-on-failure -j "$KILN_JOBS" -LE 'cuda|hip|fuzz') || status=1
kiln_log "runtime-only build: unit tests"
(cd "$RUNTIME_BUILD" && ctest --output-on-failure -j "$KILN_JOBS" -LE 'cuda|hip') || status=1
kiln_log "full build: all tests"
(cd "$KILN_BUILD" && ctest --output-on-failure -j "$KILN_JOBS" -LE 'cuda|hip') || status=1
exit $status
