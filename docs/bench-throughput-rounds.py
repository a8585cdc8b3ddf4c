#!/usr/bin/env python3
"""Runs docs/bench-throughput.sh several times and summarizes the rounds.

One run of the benchmark measures each deployment once, a minute or two
apart, on a machine whose load moves: two runs of the same binary have
differed by more than 30 % in SDK completions per second. What one round
does say reliably is how its deployments compare with each other, since
they met nearly the same load. So this prints, per deployment, the median
and range of each rate over the rounds, and, per round, the ratios the
issue's targets name (starts / raw SQLite commits on sqlite-1; pg-3 / pg-1
for starts and for each SDK's completions) with their median over rounds.

    docs/bench-throughput-rounds.py ROUNDS [SECONDS] [CONNECTIONS] [SDK_CONCURRENCY]

The environment is passed on unchanged (DW_BENCH_POSTGRES_URL,
DW_BENCH_REDIS_URL, SDKS, RESULT_POLL_MS, DWSERVER, ...). Each round's
full output is kept in a directory printed at the start. Exit status: 0,
or the first failing round's.
"""

import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def tables(text):
    """Each markdown table of `text` as (header line before it, rows as dicts)."""
    found = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("| ---"):
            head = [c.strip() for c in lines[i].strip("|").split("|")]
            rows = []
            j = i + 2
            while j < len(lines) and lines[j].startswith("| "):
                cells = [c.strip() for c in lines[j].strip("|").split("|")]
                rows.append(dict(zip(head, cells)))
                j += 1
            title = lines[i - 1] if i > 0 else ""
            found.append((title, rows))
            i = j
        else:
            i += 1
    return found


def number(cell):
    """The first number in a table cell (commas dropped), or None."""
    match = re.search(r"-?[\d,]+(?:\.\d+)?", cell or "")
    return float(match.group(0).replace(",", "")) if match else None


def round_figures(text):
    """{(deployment, figure): value} of one run's output."""
    figures = {}
    raw = re.search(r"synchronous=FULL: (\d+) commits/s", text)
    if raw:
        figures[("raw", "commits/s")] = float(raw.group(1))
    for title, rows in tables(text):
        rust = title.startswith("completed: Rust SDK")
        for row in rows:
            name = row.get("deployment")
            if rust:
                figures[(name, "Rust SDK completed/s")] = number(row.get("completed/s"))
            else:
                figures[(name, "starts/s")] = number(row.get("starts/s"))
                figures[(name, "Python SDK completed/s")] = number(row.get("completed/s"))
    return {k: v for k, v in figures.items() if v is not None}


def ratios(figures):
    """The targets' ratios of one round."""
    out = {}
    raw = figures.get(("raw", "commits/s"))
    starts = figures.get(("sqlite-1", "starts/s"))
    if raw and starts:
        out["sqlite-1 starts / raw commits"] = starts / raw
    for figure in ("starts/s", "Python SDK completed/s", "Rust SDK completed/s"):
        one, three = figures.get(("pg-1", figure)), figures.get(("pg-3", figure))
        if one and three:
            out[f"pg-3 / pg-1, {figure}"] = three / one
    return out


def main():
    if len(sys.argv) < 2 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        print("usage: docs/bench-throughput-rounds.py ROUNDS [SECONDS] [CONNECTIONS] [SDK_CONCURRENCY]",
              file=sys.stderr)
        return 2
    rounds = int(sys.argv[1])
    keep = tempfile.mkdtemp(prefix="bench-rounds-")
    print(f"{rounds} rounds of docs/bench-throughput.sh {' '.join(sys.argv[2:])}; outputs in {keep}", flush=True)
    per_round = []
    for n in range(1, rounds + 1):
        with open(f"{keep}/round-{n}.txt", "w") as out:
            done = subprocess.run(
                [os.path.join(HERE, "bench-throughput.sh"), *sys.argv[2:]],
                stdout=out, stderr=subprocess.STDOUT, check=False)
        text = open(f"{keep}/round-{n}.txt").read()
        if done.returncode != 0:
            print(text[-2000:], file=sys.stderr)
            print(f"round {n} failed (exit {done.returncode})", file=sys.stderr)
            return done.returncode
        figures = round_figures(text)
        per_round.append((figures, ratios(figures)))
        load = os.getloadavg()[0]
        shown = ", ".join(f"{k} {v:.2f}" for k, v in per_round[-1][1].items())
        print(f"round {n} (load {load:.1f}): {shown}", flush=True)

    print()
    print("| deployment | figure | median | min | max |")
    print("| --- | --- | --- | --- | --- |")
    order = {"raw": 0, "sqlite-1": 1, "pg-1": 2, "pg-3": 3}
    keys = sorted({k for figures, _ in per_round for k in figures},
                  key=lambda k: (order.get(k[0], 9), k[1]))
    for key in keys:
        values = [figures[key] for figures, _ in per_round if key in figures]
        print(f"| {key[0]} | {key[1]} | {statistics.median(values):,.1f} | {min(values):,.1f} | {max(values):,.1f} |")
    print()
    print("| ratio in each round | median | rounds |")
    print("| --- | --- | --- |")
    for name in per_round[0][1]:
        values = [r[name] for _, r in per_round if name in r]
        print(f"| {name} | {statistics.median(values):.2f} | {', '.join(f'{v:.2f}' for v in values)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
