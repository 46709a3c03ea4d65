"""Checks an AMDGPU code object from kilnc against what the chip allows.

usage: check_code_object.py READELF HSACO KERNELS_MLIR CHIP CHIPS_DEF

Reads the kernel metadata note (llvm-readelf --notes) and requires that the
object holds exactly the kernels the generated MLIR declares (gpu.func
@kiln_...), each in wavefronts of the chip's size, without register spills or
a dynamic stack, and within the chip's register and LDS limits, as the chip
table (runtime/core/Chips.def) gives them. SGPR spills are allowed (they go
to VGPR lanes, not memory) and listed; VGPR spills (scratch memory) fail.
Prints one line per problem and exits 1.
"""
import re
import subprocess
import sys

# The chip table's columns (runtime/core/Chips.def). On CDNA one unified file
# of 512 VGPRs per lane holds at most 256 architectural ones and the rest
# accumulation registers (AGPRs; LLVM's vgpr_count is the unified total and
# agpr_count the AGPR part); sgpr_count includes VCC, FLAT_SCRATCH and
# XNACK_MASK.
COLUMNS = ["target", "kind", "chip", "features", "matrix", "warp", "units", "shared_kib",
           "vgprs", "registers", "sgprs", "memory_gib", "elf_mach", "products"]


def chip_limits(chips_def, chip):
    for line in open(chips_def):
        m = re.match(r"^KILN_CHIP\((.*)\)\s*$", line)
        if not m:
            continue
        fields = [f.strip().strip('"') for f in re.findall(r'"[^"]*"|[^,]+', m.group(1))]
        row = dict(zip(COLUMNS, fields))
        if row["chip"] == chip:
            return {"warp": row["warp"], "vgpr": int(row["vgprs"]),
                    "vgpr_agpr": int(row["registers"]), "sgpr": int(row["sgprs"]),
                    "lds": int(row["shared_kib"]) * 1024}
    sys.exit(f"{chips_def}: no row for chip {chip}")


def kernel_metadata(readelf, hsaco):
    notes = subprocess.run([readelf, "--notes", hsaco], check=True, capture_output=True,
                           text=True).stdout
    kernels, current = {}, None
    for line in notes.splitlines():
        start = re.match(r"^  - \.([a-z_]+):\s*(\S*)$", line)  # each kernel's map
        if start:
            current = {"agpr_count": 0}  # chips without AGPRs (RDNA) have no such key
            line = "    ." + start.group(1) + ": " + start.group(2)
        m = re.match(r"^    \.([a-z_]+):\s+(\S+)$", line)
        if current is not None and m:
            current[m.group(1)] = m.group(2)
            if m.group(1) == "name":
                kernels[m.group(2)] = current
    return kernels


def main():
    readelf, hsaco, mlir, chip, chips_def = sys.argv[1:6]
    limits = chip_limits(chips_def, chip)
    declared = set(re.findall(r"gpu\.func @(kiln_\w+)", open(mlir).read()))
    found = kernel_metadata(readelf, hsaco)
    errors = []
    if not declared:
        errors.append(f"{mlir}: no gpu.func kernels declared")
    for name in sorted(declared - found.keys()):
        errors.append(f"{name}: declared in the kernel module but missing from the code object")
    for name in sorted(found.keys() - declared):
        errors.append(f"{name}: in the code object but not declared")
    for name, md in sorted(found.items()):
        vgpr, agpr = int(md["vgpr_count"]), int(md["agpr_count"])
        checks = [
            (md["wavefront_size"] == limits["warp"],
             f"wavefront_size {md['wavefront_size']}, expected {limits['warp']}"),
            (vgpr - agpr <= limits["vgpr"],
             f"{vgpr - agpr} architectural VGPRs > {limits['vgpr']}"),
            (vgpr <= limits["vgpr_agpr"], f"{vgpr} VGPRs with AGPRs > {limits['vgpr_agpr']}"),
            (int(md["sgpr_count"]) <= limits["sgpr"], f"{md['sgpr_count']} SGPRs > {limits['sgpr']}"),
            (int(md["group_segment_fixed_size"]) <= limits["lds"],
             f"{md['group_segment_fixed_size']} bytes of LDS > {limits['lds']}"),
            (md["vgpr_spill_count"] == "0", f"spills {md['vgpr_spill_count']} VGPRs to scratch"),
            (md["uses_dynamic_stack"] == "false", "uses a dynamic stack"),
        ]
        errors += [f"{name}: {message}" for ok, message in checks if not ok]
    spilling = [f"{n} ({md['sgpr_spill_count']})" for n, md in sorted(found.items())
                if md["sgpr_spill_count"] != "0"]
    if spilling:
        print("SGPR spills to VGPR lanes: " + ", ".join(spilling))
    for error in errors:
        print(error)
    if errors:
        return 1
    print(f"{len(found)} kernels within {chip} limits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
