#!/usr/bin/env bash
# The whole test suite: build everything, run ctest (lit + GoogleTest; GPU
# tests carry the label `cuda` or `hip` and run on GPU machines, not here), then
# build the runtime alone (-DKILN_BUILD_COMPILER=OFF) and run its tests.
source "$(dirname "$0")/lib.sh"

kiln_install_packages
kiln_configure "$KILN_BUILD"
kiln_install_oracles "$KILN_BUILD"
kiln_build "$KILN_BUILD"

RUNTIME_BUILD=${KILN_RUNTIME_BUILD:-$KILN_ROOT/build-runtime-only}
kiln_configure "$RUNTIME_BUILD" -DKILN_BUILD_COMPILER=OFF
kiln_build "$RUNTIME_BUILD"

status=0
kiln_log "runtime-only build: unit tests"
(cd "$RUNTIME_BUILD" && ctest --output-on-failure -j "$KILN_JOBS" -LE 'cuda|hip') || status=1
kiln_log "full build: all tests"
(cd "$KILN_BUILD" && ctest --output-on-failure -j "$KILN_JOBS" -LE 'cuda|hip') || status=1
exit $status
