"""Runs a tool with one argument built from bytes a shell line cannot hold
(bytes that are not UTF-8, 100 KB of text) and checks how its refusal
echoes it: a non-zero exit, the refusal first on stderr (a usage text may
follow it), no line longer than 400 bytes, no byte that is not UTF-8, the
argument cut with its size given (issue 19).

usage: echo_check.py WORKDIR TOOL ARG... -- where ARG may hold {BAD} (a
short argument holding 0xff and a control character) or {HUGE} (100 KB)."""
import os
import subprocess
import sys

BAD = b"id\xff\x01x"
# One argument may hold at most 128 KiB (MAX_ARG_STRLEN).
HUGE = b"7" * 100000


def expand(arg):
    raw = os.fsencode(arg)
    return raw.replace(b"{BAD}", BAD).replace(b"{HUGE}", HUGE)


def main():
    workdir, tool, *args = sys.argv[1:]
    argv = [tool] + [expand(a) for a in args]
    result = subprocess.run(argv, cwd=workdir, capture_output=True, timeout=120)
    err = result.stderr
    name = " ".join(args)[:80]
    problems = []
    if result.returncode == 0:
        problems.append("exit status 0")
    if result.returncode < 0:
        problems.append(f"killed by signal {-result.returncode}")
    try:
        err.decode("utf-8")
    except UnicodeDecodeError as error:
        problems.append(f"stderr is not UTF-8 ({error})")
    lines = [l for l in err.splitlines() if l.strip()]
    if not lines:
        problems.append("nothing on stderr")
    longest = max((len(l) for l in lines), default=0)
    if longest > 400:
        problems.append(f"a line of {longest} bytes on stderr")
    if b"\xff" in err or b"\x01" in err:
        problems.append("a raw byte of the argument echoed")
    if problems:
        print(f"{tool} {name}: " + "; ".join(problems))
        print(err[:800].decode("utf-8", "replace"))
        return 1
    print(f"refused: {tool} {name}: {lines[0].decode()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
