#!/usr/bin/env python3
"""Times commands side by side, alternating them run by run.

hyperfine runs all runs of one command, then all of the next: on a machine
whose load changes from one second to the next, the two commands then meet
different loads. Here each round runs every command once, in an order that
turns round each round (A B C, C B A, ...), so each command meets the same
load. Prints each command's median wall time with its quartiles and the
ratio of every command's median to the last one's (the reference), plus
the median of the per-round ratios, and the load average before and after.

Usage: docs/bench-alternate.py [--runs N] [--warmup N] CMD... REFERENCE
  each command is one shell word list, e.g.
  docs/bench-alternate.py --runs 60 'dwlint check --format short' \\
      "rg -c -g '*.rs' -e server: -e dw_ ."
Output and exit codes of the commands are ignored (dwlint exits 1 on the
sparse tree: the widened policy reports the repository's own literals).
"""

import argparse
import shlex
import statistics
import subprocess
import time


def run(argv):
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


def loadavg():
    with open("/proc/loadavg", encoding="ascii") as f:
        return " ".join(f.read().split()[:3])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("commands", nargs="+")
    args = parser.parse_args()
    commands = [shlex.split(c) for c in args.commands]
    for _ in range(args.warmup):
        for argv in commands:
            run(argv)
    print(f"load average before: {loadavg()}")
    times = [[] for _ in commands]
    for round_ in range(args.runs):
        order = range(len(commands))
        if round_ % 2:
            order = reversed(order)
        for i in order:
            times[i].append(run(commands[i]))
    print(f"load average after:  {loadavg()}")
    reference = statistics.median(times[-1])
    for text, t in zip(args.commands, times):
        q1, median, q3 = statistics.quantiles(t, n=4)
        line = f"{median * 1000:8.1f} ms  (quartiles {q1 * 1000:.1f}-{q3 * 1000:.1f}, min {min(t) * 1000:.1f})  {text}"
        if t is not times[-1]:
            per_round = statistics.median(a / b for a, b in zip(t, times[-1]))
            line += f"\n{'':12}{median / reference:.2f} x the last command's median (median per-round ratio {per_round:.2f})"
        print(line)


if __name__ == "__main__":
    main()
