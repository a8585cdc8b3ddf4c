"""Throughput and start latency with the published SDK driving dwserver.

Usage: python bench.py BASE_URL [--concurrency 64] [--seconds 30]
       [--poll-interval-ms 50] [--worker-slots 16] [--server-pid PID]

One SDK Worker process (the pinned `durable-workflow`, `workflows.py`)
serves the queue; this process's Client keeps CONCURRENCY workflows in
flight: each loop starts a `quick` workflow (one activity), waits for its
result, and starts the next. Before the window opens one workflow runs to
completion (the worker has registered and polls). Over the window it counts
completed workflows, the latency of each `start_workflow` (the HTTP round
trip of the start), and the CPU seconds (user + system, from
/proc/<pid>/stat) of the SDK's two processes (client and worker) and, with
--server-pid, of dwserver. Prints one JSON line with the same keys as the
Rust SDK's driver (conformance/rust/src/bin/bench.rs); `conformance/bench`
runs both and prints them side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid

from durable_workflow import Client, Worker

from workflows import ACTIVITIES, WORKFLOWS

QUEUE = "bench"


async def serve(base_url: str, slots: int) -> None:
    client = Client(base_url, namespace="default", timeout=60.0)
    worker = Worker(
        client,
        task_queue=QUEUE,
        workflows=WORKFLOWS,
        activities=ACTIVITIES,
        max_concurrent_workflow_tasks=slots,
        max_concurrent_activity_tasks=slots,
        poll_timeout=5.0,
    )
    await worker.run()


def cpu_seconds(pid: int | str) -> float:
    """A process's user + system CPU seconds from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of stat(5); after ')' the 12th and 13th.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, round((len(sorted_values) - 1) * p))
    return sorted_values[index]


async def drive(base_url: str, concurrency: int, seconds: float, poll_interval: float,
                worker_slots: int, cpu_pids: dict[str, int | str]) -> dict:
    client = Client(base_url, namespace="default", timeout=60.0)
    starts: list[float] = []
    completed = 0
    failed = 0

    # Warm-up: one workflow end to end, outside the window.
    warm = await client.start_workflow(
        workflow_type="quick", task_queue=QUEUE,
        workflow_id=f"bench-warm-{uuid.uuid4().hex}", input=["warm"],
    )
    await client.get_result(warm, poll_interval=poll_interval, timeout=120)

    deadline = time.monotonic() + seconds

    async def loop(n: int) -> None:
        nonlocal completed, failed
        i = 0
        while time.monotonic() < deadline:
            i += 1
            began = time.perf_counter()
            try:
                handle = await client.start_workflow(
                    workflow_type="quick", task_queue=QUEUE,
                    workflow_id=f"bench-{n}-{i}-{uuid.uuid4().hex[:6]}", input=["bench"],
                )
            except Exception as error:
                print(f"start: {error!r}", file=sys.stderr)
                failed += 1
                continue
            starts.append(time.perf_counter() - began)
            try:
                await client.get_result(handle, poll_interval=poll_interval, timeout=120)
                completed += 1
            except Exception as error:
                print(f"result: {error!r}", file=sys.stderr)
                failed += 1

    cpu_before = {who: cpu_seconds(pid) for who, pid in cpu_pids.items()}
    began = time.monotonic()
    await asyncio.gather(*(loop(n) for n in range(concurrency)))
    elapsed = time.monotonic() - began
    cpu = {who: cpu_seconds(pid) - cpu_before[who] for who, pid in cpu_pids.items()}
    await client.aclose()
    starts.sort()
    sdk_cpu = cpu["client"] + cpu["worker"]
    server_cpu = cpu.get("server")

    def per_workflow_ms(seconds_used: float) -> float | None:
        return round(seconds_used * 1000 / completed, 2) if completed else None

    return {
        "sdk": "python",
        "concurrency": concurrency,
        "poll_interval_ms": round(poll_interval * 1000),
        "worker_slots": worker_slots,
        "seconds": round(elapsed, 2),
        "completed": completed,
        "failed": failed,
        "workflows_completed_per_second": round(completed / elapsed, 2),
        "start_latency_ms_p50": round(percentile(starts, 0.50) * 1000, 2),
        "start_latency_ms_p99": round(percentile(starts, 0.99) * 1000, 2),
        "start_latency_ms_mean": round(statistics.fmean(starts) * 1000, 2) if starts else None,
        "sdk_processes": 2,
        "sdk_client_cpu_seconds": round(cpu["client"], 2),
        "sdk_worker_cpu_seconds": round(cpu["worker"], 2),
        "sdk_cpu_seconds": round(sdk_cpu, 2),
        "sdk_cpu_ms_per_workflow": per_workflow_ms(sdk_cpu),
        "server_cpu_seconds": None if server_cpu is None else round(server_cpu, 2),
        "server_cpu_ms_per_workflow": None if server_cpu is None else per_workflow_ms(server_cpu),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("base_url")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--poll-interval-ms", type=float, default=50.0)
    parser.add_argument("--worker-slots", type=int, default=16)
    parser.add_argument("--server-pid", type=int)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.base_url, args.worker_slots))
        return 0
    worker = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), args.base_url, "--serve",
         "--worker-slots", str(args.worker_slots)],
        cwd=os.path.dirname(os.path.abspath(__file__)),
    )
    pids: dict[str, int | str] = {"client": "self", "worker": worker.pid}
    if args.server_pid:
        pids["server"] = args.server_pid
    try:
        result = asyncio.run(drive(args.base_url, args.concurrency, args.seconds,
                                   args.poll_interval_ms / 1000, args.worker_slots, pids))
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    print(json.dumps(result))
    return 1 if result["failed"] or not result["completed"] else 0


if __name__ == "__main__":
    sys.exit(main())
