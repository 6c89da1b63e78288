"""Per-layer CPU per call: perf samples of a run with many calls minus one
with few, by layer (see scripts/bench_call_cost.py).

usage: call_cost_layers.py FEW.txt MANY.txt SAMPLE_HZ EXTRA_CALLS
"""

import collections
import re
import sys


def layers(path: str) -> collections.Counter[str]:
    tot: collections.Counter[str] = collections.Counter()
    for line in open(path):
        m = re.match(r"\s*([\d.]+)%\s+(\d+)\s+(\S+)\s+\[(.)\]\s+(.*)", line)
        if not m:
            continue
        n, dso, kind, sym = int(m[2]), m[3], m[4], m[5]
        if kind == "k":
            layer = "kernel"
        elif "_shoal" in dso:
            if "shoal_transport" in sym:
                layer = "transport"
            elif "shoal_core" in sym or "shoal_plan" in sym:
                layer = "core"
            elif "shoal_py" in sym or "pyo3" in sym or "_shoal::" in sym:
                layer = "binding"
            else:
                layer = "extension: std (alloc, hash, sync), unattributed"
        elif "python" in dso:
            layer = "python"
        elif "libc" in dso:
            layer = "libc (malloc, memcpy, locks)"
        else:
            layer = "other (numpy, vdso, ld)"
        tot[layer] += n
    return tot


small, big, freq, calls = layers(sys.argv[1]), layers(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
total = 0.0
for k in sorted(set(small) | set(big), key=lambda k: -(big[k] - small[k])):
    us = (big[k] - small[k]) / freq / calls * 1e6
    total += us
    print(f"  {k:50s} {us:6.3f} us/call")
print(f"  {'total':50s} {total:6.3f} us/call")
