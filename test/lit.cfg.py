# lit configuration for Kiln: tests live beside the tree they mirror
# (test/dialects/kiln, test/passes/<pass>, test/models/muse_spark, test/compiler).
import os

import lit.formats

config.name = "Kiln"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt", "unit", "fuzz"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.kiln_obj_root, "test")

# Kiln's tools first, then LLVM's FileCheck / not / count.
config.environment["PATH"] = os.pathsep.join(
    [config.kiln_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")]
)
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
