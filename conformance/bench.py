"""Throughput and start latency with the published SDK driving dwserver.

Usage: python bench.py BASE_URL [--concurrency 16] [--seconds 30]

One SDK Worker process (the pinned `durable-workflow`, `workflows.py`)
serves the queue; this process's Client keeps CONCURRENCY workflows in
flight: each loop starts a `quick` workflow (one activity), waits for its
result, and starts the next. It prints workflows completed per second and
the p50/p99 latency of `start_workflow` (the HTTP round trip of the start),
the CPU seconds the SDK's two processes (client and worker) used, and the
same as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid

from durable_workflow import Client, Worker

from workflows import ACTIVITIES, WORKFLOWS

QUEUE = "bench"


async def serve(base_url: str, concurrency: int) -> None:
    client = Client(base_url, namespace="default", timeout=60.0)
    worker = Worker(
        client,
        task_queue=QUEUE,
        workflows=WORKFLOWS,
        activities=ACTIVITIES,
        max_concurrent_workflow_tasks=concurrency,
        max_concurrent_activity_tasks=concurrency,
        poll_timeout=5.0,
    )
    await worker.run()


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, round((len(sorted_values) - 1) * p))
    return sorted_values[index]


async def drive(base_url: str, concurrency: int, seconds: float) -> dict:
    client = Client(base_url, namespace="default", timeout=60.0)
    starts: list[float] = []
    completed = 0
    failed = 0
    deadline = time.monotonic() + seconds

    async def loop(n: int) -> None:
        nonlocal completed, failed
        i = 0
        while time.monotonic() < deadline:
            i += 1
            began = time.perf_counter()
            handle = await client.start_workflow(
                workflow_type="quick", task_queue=QUEUE,
                workflow_id=f"bench-{n}-{i}-{uuid.uuid4().hex[:6]}", input=["bench"],
            )
            starts.append(time.perf_counter() - began)
            try:
                await client.get_result(handle, poll_interval=0.02, timeout=60)
                completed += 1
            except Exception:
                failed += 1

    began = time.monotonic()
    await asyncio.gather(*(loop(n) for n in range(concurrency)))
    elapsed = time.monotonic() - began
    await client.aclose()
    starts.sort()
    return {
        "concurrency": concurrency,
        "seconds": round(elapsed, 2),
        "completed": completed,
        "failed": failed,
        "workflows_completed_per_second": round(completed / elapsed, 2),
        "start_latency_ms_p50": round(percentile(starts, 0.50) * 1000, 2),
        "start_latency_ms_p99": round(percentile(starts, 0.99) * 1000, 2),
        "start_latency_ms_mean": round(statistics.fmean(starts) * 1000, 2) if starts else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("base_url")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.base_url, args.concurrency))
        return 0
    worker = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), args.base_url, "--serve",
         "--concurrency", str(args.concurrency)],
        cwd=os.path.dirname(os.path.abspath(__file__)),
    )
    try:
        time.sleep(2.0)  # registration and first polls
        result = asyncio.run(drive(args.base_url, args.concurrency, args.seconds))
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    cpu = lambda who: resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
    result["sdk_client_cpu_seconds"] = round(cpu(resource.RUSAGE_SELF), 2)
    result["sdk_worker_cpu_seconds"] = round(cpu(resource.RUSAGE_CHILDREN), 2)
    print(
        f"{result['concurrency']} concurrent workflows for {result['seconds']} s: "
        f"{result['completed']} completed ({result['failed']} failed), "
        f"{result['workflows_completed_per_second']} workflows/s; start latency "
        f"p50 {result['start_latency_ms_p50']} ms, p99 {result['start_latency_ms_p99']} ms; "
        f"SDK CPU: client {result['sdk_client_cpu_seconds']} s, worker {result['sdk_worker_cpu_seconds']} s"
    )
    print(json.dumps(result))
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
