# lit configuration for Kiln: tests live beside the tree they mirror
# (test/dialects/kiln, test/passes/<pass>, test/models/muse_spark, test/compiler).
import os

import lit.formats

config.name = "Kiln"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt", "unit", "fuzz"]
config.test_source_root = os.path.dirname(__file__)
# The sanitized tools' run (KILN_LIT_TOOLS_FIRST, below) keeps its outputs
# apart: ctest runs it beside the plain suites, which use the same %t names.
config.test_exec_root = os.path.join(
    config.kiln_obj_root,
    "test-sanitized" if os.environ.get("KILN_LIT_TOOLS_FIRST") else "test")

# Kiln's tools first, then LLVM's FileCheck / not / count. KILN_LIT_TOOLS_FIRST
# names a folder of tools to use before those (the runtime's tools built under
# ASan and UBSan: the lit-sanitized-tools test); the rest still come from here.
_tools_first = [os.environ["KILN_LIT_TOOLS_FIRST"]] if os.environ.get("KILN_LIT_TOOLS_FIRST") else []
config.environment["PATH"] = os.pathsep.join(
    _tools_first + [config.kiln_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")]
)
for _name in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
    if _name in os.environ:
        config.environment[_name] = os.environ[_name]
config.substitutions.append(("%kiln_src", config.kiln_src_root))
config.substitutions.append(("%configs", os.path.join(config.kiln_src_root, "models", "muse_spark", "configs")))

# ptxas from CUDA (every machine of this project has CUDA 13 at /usr/local/cuda):
# the NVPTX tests assemble what kilnc emits.
import shutil
_ptxas = shutil.which("ptxas") or ("/usr/local/cuda/bin/ptxas" if os.path.exists("/usr/local/cuda/bin/ptxas") else None)
if _ptxas:
    config.available_features.add("ptxas")
    config.substitutions.append(("ptxas", _ptxas))

# The ROCm device libraries (Debian: rocm-device-libs), which the AMDGCN
# code objects link: the AMDGCN tests compile and inspect what kilnc emits.
if os.path.isdir("/usr/lib/x86_64-linux-gnu/amdgcn/bitcode"):
    config.available_features.add("rocm-device-libs")

# Helper scripts in Inputs/ run with lit's own Python.
import sys
config.substitutions.append(("%python", sys.executable))

# This CPU's x86 families (docs/x86.md), for tests that run kernels compiled
# for a named CPU other than the host's: cpu-avx2 (FMA family), cpu-avx512bf16,
# cpu-amx. Tests for the host's own CPU (kilnc --cpu=host) need none.
def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()
_flags = _cpu_flags()
if {"avx2", "fma"} <= _flags:
    config.available_features.add("cpu-avx2")
if "avx512_bf16" in _flags:
    config.available_features.add("cpu-avx512bf16")
if {"amx_tile", "amx_bf16"} <= _flags:
    config.available_features.add("cpu-amx")

# Hugging Face's tokenizers.js from npm (scripts/test.sh installs it into the
# build's oracles/): the tokenizer tests compare Kiln's tokenizer with it.
_oracles = os.path.join(config.kiln_obj_root, "oracles")
if shutil.which("node") and os.path.isfile(
        os.path.join(_oracles, "node_modules", "@huggingface", "tokenizers", "package.json")):
    config.available_features.add("tokenizers-js")
    config.substitutions.append(("%oracles", _oracles))
if "tokenizers-js" in config.available_features and os.path.isfile(
        os.path.join(_oracles, "node_modules", "@huggingface", "jinja", "package.json")):
    config.available_features.add("jinja-js")
