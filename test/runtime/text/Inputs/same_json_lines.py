"""Compares two files of JSON lines (Kiln's and the oracle's) value by value;
prints how many agree and how many texts used merged tokens (ids past the 256
bytes and below the added tokens), or the first difference, exiting 1."""
import json
import sys

ours = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
theirs = [json.loads(line) for line in open(sys.argv[2], encoding="utf-8")]
if len(ours) != len(theirs):
    sys.exit(f"{len(ours)} lines against {len(theirs)}")
merged = 0
for n, (a, b) in enumerate(zip(ours, theirs)):
    if a != b:
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                sys.exit(f"text {n}: {key} differs:\n  kiln: {a.get(key)!r}\n  oracle: {b.get(key)!r}")
    merged += any(256 <= i < 710 for i in a["ids"])
print(f"{len(ours)} texts identical, {merged} of them with merged tokens")
