"""Redis killed for 15 s under SDK load: the published Python SDK drives a
dwserver whose polling cache is a redis-server this script starts, kills
and restarts.

Usage: python redis_outage.py DWSERVER_BINARY [OUTAGE_SECONDS]

It starts a redis-server on a free port and a dwserver on it
(`DW_REDIS_URL`), and runs a Worker and four clients that start workflows
and signal them through the SDK. Three seconds in, it SIGKILLs the
redis-server, keeps the load on for OUTAGE_SECONDS (15), restarts the
redis-server on the same port and keeps the load on for five more seconds.
Then it checks, once Redis is back:

- every start the server answered 2xx is there and completes;
- every start answered with an error is absent, or a retry of it (the
  SDK's `duplicate_policy="use-existing"`) answers the same run;
- every signal answered 2xx is in its run's history, and one answered
  with an error is absent or, resent with the same request id, answers
  the same receipt; no request id is in a history twice.

Exit status 0 only when all of that holds.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

from durable_workflow import Client, Worker, workflow
from durable_workflow.errors import WorkflowAlreadyStarted

QUEUE = "redis-outage"
CLIENTS = 4


@workflow.defn(name="outage_order")
class OutageOrder:
    """Waits for its closing signal, then completes."""

    def __init__(self) -> None:
        self.closed = False

    @workflow.signal("close")
    def close(self) -> None:
        self.closed = True

    def run(self, ctx, order):
        yield ctx.wait_condition(lambda: self.closed, key="closed")
        return order


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(port: int) -> subprocess.Popen:
    redis = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return redis
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"redis-server did not listen on {port} in 30 s")


def start_dwserver(binary: str, redis_port: int, work: str) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ)
    env.update(
        DW_BIND="127.0.0.1:0",
        DW_AUTH="none",
        DW_SERVER_ID="redis-outage",
        DW_DATABASE_PATH=os.path.join(work, "runs.sqlite"),
        DW_POLLING_CACHE_PATH=os.path.join(work, "polling"),
        DW_REDIS_URL=f"redis://127.0.0.1:{redis_port}",
        RUST_LOG="warn",
    )
    log = open(os.path.join(work, "dwserver.log"), "w")
    server = subprocess.Popen([binary], env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    line = server.stdout.readline().strip()
    if not line.startswith("listening on "):
        raise AssertionError(f"dwserver did not start: {line!r}")
    return server, "http://" + line.removeprefix("listening on ")


async def drive(client: Client, prefix: str, sent: list[dict], stop: asyncio.Event) -> None:
    """Starts a workflow and sends its closing signal, again and again,
    recording each request's answer (2xx or the error) without retrying."""
    n = 0
    while not stop.is_set():
        wid = f"{prefix}{n}"
        n += 1
        record = {"id": wid, "start": None, "signal": None, "signal_request": f"close-{wid}"}
        sent.append(record)
        try:
            await client.start_workflow(
                workflow_type="outage_order", task_queue=QUEUE, workflow_id=wid, input=[wid]
            )
            record["start"] = "ok"
        except Exception as e:  # the outage answered it (or the transport failed)
            record["start"] = f"{type(e).__name__}: {e}"
        try:
            receipt = await client.signal_workflow(wid, "close", request_id=record["signal_request"])
            record["signal"] = "ok"
            record["receipt"] = receipt
        except Exception as e:
            record["signal"] = f"{type(e).__name__}: {e}"
        await asyncio.sleep(0.05)


async def exists(client: Client, wid: str) -> bool:
    try:
        await client.describe_workflow(wid)
        return True
    except Exception as e:
        if "not found" in str(e).lower() or "404" in str(e):
            return False
        raise


async def main(binary: str, outage: float) -> int:
    work = tempfile.mkdtemp(prefix="dw-redis-outage-")
    port = free_port()
    redis = start_redis(port)
    server, base_url = start_dwserver(binary, port, work)
    print(f"dwserver on {base_url}, redis-server on {port} (work dir {work})", flush=True)
    failures: list[str] = []
    client = Client(base_url, namespace="default", timeout=30.0)
    worker = Worker(
        client, task_queue=QUEUE, workflows=[OutageOrder], activities=[],
        worker_id=f"outage-{os.getpid()}", poll_timeout=5.0, shutdown_timeout=10.0,
    )
    running = asyncio.create_task(worker.run())
    try:
        run = uuid.uuid4().hex[:8]
        sent: list[dict] = []
        stop = asyncio.Event()
        load = [asyncio.create_task(drive(client, f"outage-{run}-{c}-", sent, stop)) for c in range(CLIENTS)]
        await asyncio.sleep(3)
        redis.send_signal(signal.SIGKILL)
        redis.wait()
        killed_at = len(sent)
        print(f"  redis-server killed after {killed_at} workflows; {outage:.0f} s without it", flush=True)
        await asyncio.sleep(outage)
        redis = start_redis(port)
        during = len(sent) - killed_at
        print(f"  redis-server back after {during} workflows sent without it", flush=True)
        await asyncio.sleep(5)
        stop.set()
        await asyncio.gather(*load)

        started_ok = [r for r in sent if r["start"] == "ok"]
        start_errors = [r for r in sent if r["start"] != "ok"]
        absent = retried_same = 0
        for r in start_errors:
            if not await exists(client, r["id"]):
                absent += 1
                continue
            described = await client.describe_workflow(r["id"])
            try:
                handle = await client.start_workflow(
                    workflow_type="outage_order", task_queue=QUEUE, workflow_id=r["id"],
                    input=[r["id"]], duplicate_policy="use-existing",
                )
            except WorkflowAlreadyStarted:
                # Already closed: the run completed, so its start was whole.
                if described.status == "completed":
                    retried_same += 1
                    continue
                failures.append(f"{r['id']}: start answered {r['start']}, written, and a retry refused")
                continue
            if handle.run_id == described.run_id:
                retried_same += 1
            else:
                failures.append(f"{r['id']}: a retry answered run {handle.run_id}, the store has {described.run_id}")
        # Every signal answered with an error is resent with its request id
        # (what the SDK's callers do), so every run that exists can close.
        resent_same = 0
        for r in sent:
            if r["signal"] == "ok" or not await exists(client, r["id"]):
                continue
            try:
                await client.signal_workflow(r["id"], "close", request_id=r["signal_request"])
                resent_same += 1
            except Exception as e:
                failures.append(f"{r['id']}: resending its signal failed: {type(e).__name__}: {e}")

        # Every run there completes, and its history holds its signal once.
        deadline = time.monotonic() + 120
        present = 0
        for r in sent:
            if not await exists(client, r["id"]):
                if r["start"] == "ok":
                    failures.append(f"{r['id']}: start answered 2xx but the run is not there")
                continue
            present += 1
            while True:
                described = await client.describe_workflow(r["id"])
                if described.status == "completed":
                    break
                if time.monotonic() > deadline:
                    failures.append(f"{r['id']}: not completed 120 s after the outage ({described.status})")
                    break
                await asyncio.sleep(0.2)
            history = await client.get_history(r["id"], described.run_id, page_size=1000)
            types = [e["event_type"] for e in history["events"]]
            if types.count("WorkflowStarted") != 1:
                failures.append(f"{r['id']}: {types.count('WorkflowStarted')} WorkflowStarted")
            received = types.count("SignalReceived")
            if received != 1:
                failures.append(f"{r['id']}: {received} SignalReceived for one request id (signal answered {r['signal']})")
        signal_errors = sum(1 for r in sent if r["signal"] != "ok")
        print(
            f"  {len(sent)} workflows: {len(started_ok)} starts answered 2xx (all present), "
            f"{len(start_errors)} answered an error ({absent} absent, {retried_same} written and "
            f"retried to the same run); {len(sent) - signal_errors} signals answered 2xx, "
            f"{signal_errors} an error ({resent_same} resent with their request id); "
            f"{present} runs completed, each with its signal once",
            flush=True,
        )
        if during == 0:
            failures.append("no workflow was sent while Redis was down")
        if running.done():
            failures.append(f"the worker stopped: {running.exception()!r}")
    finally:
        await worker.stop()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await client.aclose()
        server.terminate()
        server.wait(timeout=30)
        redis.kill()
        redis.wait()
    if failures:
        print(f"  dwserver's log: {work}/dwserver.log", flush=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
    for failure in failures[:50]:
        print("  FAIL", failure, flush=True)
    print(f"redis outage under SDK load: {'passed' if not failures else f'{len(failures)} failures'}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 15.0
    sys.exit(asyncio.run(main(sys.argv[1], seconds)))
