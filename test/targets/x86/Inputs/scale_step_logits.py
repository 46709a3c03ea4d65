"""Writes a kiln reference with one decode step's logits scaled (the check
that compares decode steps' logits must see it).

  scale_step_logits.py REFERENCE STEP FACTOR > OUT

STEP counts the steps that keep logits (the first step has none), from 0."""
import sys

path, which, factor = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
seen = 0
for line in open(path):
    if line.startswith("step_logits "):
        if seen == which:
            line = "step_logits " + " ".join(repr(float(v) * factor) for v in line.split()[1:]) + "\n"
        seen += 1
    sys.stdout.write(line)
