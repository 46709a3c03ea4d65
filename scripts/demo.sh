#!/usr/bin/env bash
# The main job: build Kiln, compile the default model (Muse Spark Open
# 816B-A42B) to kiln graph IR and print its report.
source "$(dirname "$0")/lib.sh"

CONFIG=${1:-muse-spark-open-816b-a42b}
kiln_install_packages
kiln_configure "$KILN_BUILD"
kiln_build "$KILN_BUILD" kilnc
kiln_log "compiling $CONFIG to graph IR: $KILN_BUILD/$CONFIG.graph.mlir"
"$KILN_BUILD/bin/kilnc" "$CONFIG" --report -o "$KILN_BUILD/$CONFIG.graph.mlir"
