"""Counts the SASS instructions of each function in `cuobjdump -sass` output (NOP, EXIT and the
final self-branch left out) and prints them per element (argv[2]: elements per thread) with the
most frequent opcodes."""
import collections
import re
import sys

func = None
counts = collections.OrderedDict()
ops = collections.defaultdict(collections.Counter)
for line in open(sys.argv[1]):
    m = re.search(r"Function : (\S+)", line)
    if m:
        func = m.group(1)
        counts[func] = 0
        continue
    m = re.match(r"\s+/\*[0-9a-f]{4}\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)", line)
    if m and func:
        op = m.group(2).split(".")[0]
        if op in ("NOP", "EXIT", "BRA"):
            continue
        counts[func] += 1
        ops[func][op] += 1
per = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
for f, n in counts.items():
    top = ", ".join(f"{o} {c}" for o, c in ops[f].most_common(6))
    print(f"  {f:16s} {n:5d} instructions, {n / per:6.2f} per element  ({top})")
