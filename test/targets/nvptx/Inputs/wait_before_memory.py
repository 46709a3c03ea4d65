"""Checks a PTX module: in every .entry, griddepcontrol.wait comes before the
first instruction that touches memory other than the kernel's parameters
(global, shared, generic loads and stores, atomics, reductions, bulk and
asynchronous copies, tensor-map prefetches), and launch_dependents after it.
A kernel launched with programmatic stream serialization may start while the
one before it still runs: anything it read or wrote before the wait could
race with that kernel. Prints the entries checked; exits 1 naming the first
entry that breaks the rule."""
import re
import sys

MEMORY = re.compile(r"^\s*(?:@!?%p\d+\s+)?(ld|st|atom|red|cp|prefetch|mbarrier|wgmma|multimem)\b")
text = open(sys.argv[1]).read()
entries = re.findall(r"\.entry\s+(\w+)\s*\((.*?)\n\}", text, re.S)
if not entries:
    sys.exit("no .entry in " + sys.argv[1])
for name, body in entries:
    # Skip the parameter list: the body begins after its closing ")".
    body = body[body.index(")") + 1:]
    wait = launch = None
    for number, line in enumerate(body.splitlines()):
        line = line.split("//")[0]
        if "griddepcontrol.wait" in line and wait is None:
            wait = number
        elif "griddepcontrol.launch_dependents" in line and launch is None:
            launch = number
        m = MEMORY.match(line)
        if m and not line.strip().startswith("ld.param"):
            if wait is None:
                sys.exit(f"{name}: '{line.strip()}' before griddepcontrol.wait")
    if wait is None or launch is None or launch < wait:
        sys.exit(f"{name}: griddepcontrol.wait then launch_dependents expected "
                 f"(wait at {wait}, launch_dependents at {launch})")
print(f"{len(entries)} entries wait for the grid before them before touching memory")
