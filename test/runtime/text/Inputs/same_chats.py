"""Compares Kiln's chat renderings with the oracle's: the same text and ids
for each chat, and an error on both sides where the template raises.
  same_chats.py KILN_LINES ORACLE_LINES"""
import json
import sys

ours = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
theirs = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8")]
if len(ours) != len(theirs):
    sys.exit(f"{len(ours)} chats against {len(theirs)}")
errors = 0
for n, (a, b) in enumerate(zip(ours, theirs)):
    if ("error" in a) != ("error" in b):
        sys.exit(f"chat {n}: kiln {a} against oracle {b}")
    if "error" in a:
        errors += 1
        if "Unknown role: robot" not in a["error"] or "Unknown role: robot" not in b["error"]:
            sys.exit(f"chat {n}: errors {a['error']!r} / {b['error']!r}")
        continue
    if a["text"] != b["text"]:
        sys.exit(f"chat {n}: text differs:\n  kiln:   {a['text']!r}\n  oracle: {b['text']!r}")
    if a["ids"] != b["ids"]:
        sys.exit(f"chat {n}: ids differ")
print(f"{len(ours)} chats: {len(ours) - errors} identical texts and ids, {errors} refused by both")
