"""N 8-byte allreduce calls on one rank: the software path of a call
(Python, binding, core) with no peer to wait for.

Per-call CPU by layer, independent of the machine's load as far as CPU time
is (docs/benchmarks.md, "The call path's cost"): record a run with few calls
and one with many, and subtract per layer:

    for n in 1000 301000; do
        perf record -q -F 9999 -o n$n.data -- python scripts/bench_call_cost.py $n
        perf report -n -i n$n.data --no-children --sort dso,sym --stdio > n$n.txt
    done
    python scripts/call_cost_layers.py n1000.txt n301000.txt 9999 300000
"""

import sys

import numpy as np

import shoal

g = shoal.init()
x = np.ones(2, dtype=np.float32)
for _ in range(int(sys.argv[1])):
    g.allreduce(x)
shoal.finalize()
