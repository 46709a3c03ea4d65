#!/usr/bin/env python3
"""Keeps a docs/ walkthrough honest: every repository path it names in
backquotes exists, and the files it says hold the worked example do.

  check_walkthrough.py SRC_ROOT DOC EXAMPLE_REGEX [PATH...]

PATHs are files the walkthrough points at as infrastructure: they must
exist but need not hold the example.
"""
import os
import re
import sys

root, doc, example = sys.argv[1], sys.argv[2], re.compile(sys.argv[3])
infrastructure = set(sys.argv[4:])
text = open(os.path.join(root, doc), encoding="utf-8").read()
paths = sorted(set(re.findall(r"`((?:dialects|compiler|passes|targets|test|docs|runtime|scripts)/[^`\s]+)`", text)))
status = 0
for path in paths:
    full = os.path.join(root, path)
    if not os.path.isfile(full):
        print(f"{doc}: names {path}, which does not exist")
        status = 1
        continue
    # The infrastructure a step points at need not mention the example;
    # every other file does.
    if path in infrastructure:
        continue
    if not example.search(open(full, encoding="utf-8").read()):
        print(f"{doc}: names {path} as part of the example, but it does not hold it")
        status = 1
print(f"{len(paths)} paths checked")
sys.exit(status)
