# Shared by scripts/demo.sh and scripts/test.sh: install Debian packages by
# name (idempotent, quiet when present), configure and build with Ninja.
set -euo pipefail

KILN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KILN_BUILD=${KILN_BUILD:-$KILN_ROOT/build}
KILN_JOBS=${KILN_JOBS:-$(nproc)}

# What the compiler, runtime and tests build against.
KILN_PACKAGES=(
  cmake ninja-build ccache g++ python3
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools lld-22
  nlohmann-json3-dev libgtest-dev libdnnl-dev libflatbuffers-dev flatbuffers-compiler
  libxxhash-dev # artifact digests (header-only use)
  libpcre2-dev  # tokenizer pre-tokenizer patterns
  # kiln-serve's HTTP (Debian builds cpp-httplib with OpenSSL, zlib and
  # Brotli, whose headers its header then includes)
  libcpp-httplib-dev libssl-dev zlib1g-dev libbrotli-dev
  # the libFuzzer targets (clang's fuzzer runtime is its own package), and
  # the source-format test
  clang libclang-rt-14-dev clang-format
  rocm-device-libs libamdhip64-dev
  # oneDNN's CMake package config (the x86 GEMM benchmark's yardstick) asks
  # for OpenCL; without these, configuring stops on a fresh machine.
  ocl-icd-opencl-dev opencl-headers
)

kiln_log() { printf '\033[1m[kiln]\033[0m %s\n' "$*" >&2; }

kiln_install_packages() {
  local missing=() pkg
  for pkg in "${KILN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || {
      kiln_log "missing Debian packages (run as root to install): ${missing[*]}"
      exit 1
    }
    sudo="sudo"
  fi
  kiln_log "installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

# kiln_configure BUILD_DIR [cmake args...]
kiln_configure() {
  local dir=$1
  shift
  if [ ! -f "$dir/build.ninja" ]; then
    kiln_log "configuring $dir"
    cmake -S "$KILN_ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
  fi
}

# kiln_build BUILD_DIR [targets...]
kiln_build() {
  local dir=$1
  shift
  kiln_log "building in $dir ($KILN_JOBS jobs)"
  ninja -C "$dir" -j "$KILN_JOBS" "$@" | grep -v '^\[' || true
  test "${PIPESTATUS[0]}" -eq 0
}

# Test oracles from npm (not PyPI), into BUILD_DIR/oracles: Hugging Face's
# tokenizers.js and Jinja for JavaScript, which the tokenizer and chat
# template tests compare Kiln's with. Node and npm
# come from Debian where the machine has neither. Without the npm registry
# this fails: the oracle tests would be UNSUPPORTED and the run green without
# comparing with an independent tokenizer; KILN_ALLOW_NO_ORACLES=1 runs the
# rest all the same (an offline machine), saying so.
KILN_NPM_ORACLES=("@huggingface/tokenizers@0.2.0" "@huggingface/jinja@0.5.11")
kiln_install_oracles() {
  local dir=$1/oracles
  if ! command -v npm >/dev/null; then
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    kiln_log "installing nodejs npm (the test oracles' runtime)"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
  fi
  [ -f "$dir/node_modules/@huggingface/tokenizers/package.json" ] &&
    [ -f "$dir/node_modules/@huggingface/jinja/package.json" ] && return 0
  kiln_log "installing the npm test oracles into $dir: ${KILN_NPM_ORACLES[*]}"
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "${KILN_NPM_ORACLES[@]}" >/dev/null &&
    return 0
  if [ "${KILN_ALLOW_NO_ORACLES:-0}" = 1 ]; then
    kiln_log "WARNING: npm could not install ${KILN_NPM_ORACLES[*]}: the oracle tests will be UNSUPPORTED (KILN_ALLOW_NO_ORACLES=1)"
    return 0
  fi
  kiln_log "error: npm could not install ${KILN_NPM_ORACLES[*]} (the registry unreachable?): the tokenizer and chat template tests need them; KILN_ALLOW_NO_ORACLES=1 runs without them"
  return 1
}
