"""The crash test: the published Python SDK drives dwserver nodes behind a
load balancer while nodes are SIGKILLed and restarted.

Usage: python crash.py BALANCER_URL WORK_DIR KILLS DATABASE_URL

WORK_DIR holds, per node N (1..3), `start-node-N` (starts the node in the
background and writes its pid to `node-N.pid`) and `node-N.log`. While a
Worker and clients run workflows through the balancer, a killer SIGKILLs a
random node KILLS times, restarting it each time (retrying while its id's
registration from before the kill is still live). Then it checks:

- every start, signal and update the server acknowledged is in the
  workflow's history;
- no activity completed twice (one ActivityCompleted per workflow);
- no run is stuck: every started workflow completes with the expected
  result once the nodes are back;
- the store's counters equal their rows (task queue state, run series and
  summaries against the rows they count, read from DATABASE_URL with psql).

Exit status 0 only when all of that holds.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
import uuid

from durable_workflow import Client, Worker, activity, workflow
from durable_workflow.errors import WorkflowAlreadyStarted

QUEUE = "crash"
WORKFLOWS = 48
CLIENTS = 4

_charges: dict[str, int] = {}


@activity.defn(name="charge")
def charge(order: str) -> str:
    _charges[order] = _charges.get(order, 0) + 1
    return f"charged {order}"


@workflow.defn(name="crash_order")
class CrashOrder:
    """An activity, an update, then a signal that closes it."""

    def __init__(self) -> None:
        self.total = 0
        self.closed = False

    @workflow.update("add")
    def add(self, amount: int) -> int:
        self.total += amount
        return self.total

    @workflow.signal("close")
    def close(self) -> None:
        self.closed = True

    def run(self, ctx, order):
        receipt = yield ctx.schedule_activity("charge", [order])
        yield ctx.wait_condition(lambda: self.closed, key="closed")
        return {"receipt": receipt, "total": self.total}


def alive(pid: int) -> bool:
    """Whether `pid` runs (not gone, not a zombie awaiting its reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


class Killer:
    def __init__(self, work: str, kills: int) -> None:
        self.work = work
        self.kills = kills
        self.done = 0
        self.restart_attempts = 0

    def pid(self, n: int) -> int:
        with open(os.path.join(self.work, f"node-{n}.pid")) as f:
            return int(f.read().strip())

    def listening(self, n: int) -> int:
        with open(os.path.join(self.work, f"node-{n}.log"), errors="replace") as f:
            return sum(1 for line in f if line.startswith("listening on "))

    async def restart(self, n: int) -> None:
        deadline = time.monotonic() + 120
        before = self.listening(n)
        while True:
            self.restart_attempts += 1
            subprocess.run([os.path.join(self.work, f"start-node-{n}")], check=True)
            pid = self.pid(n)
            while True:
                if self.listening(n) > before:
                    return
                if not alive(pid):
                    break  # refused (its old registration is still live): again
                if time.monotonic() > deadline:
                    raise AssertionError(f"node-{n} did not come back in 120 s")
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)

    async def run(self, stop: asyncio.Event) -> None:
        rng = random.Random(int(os.environ.get("DW_CRASH_SEED", "0")) or None)
        while self.done < self.kills:
            await asyncio.sleep(rng.uniform(0.5, 2.0))
            n = rng.randint(1, 3)
            os.kill(self.pid(n), signal.SIGKILL)
            self.done += 1
            print(f"  kill {self.done}/{self.kills}: node-{n}", flush=True)
            await self.restart(n)
        stop.set()


async def drive(client: Client, prefix: str, ids: list[str], acked: dict, stop: asyncio.Event) -> None:
    """Runs workflow after workflow through start, update and signal,
    retrying what was not acknowledged until it is, until the killer is
    done (and at least WORKFLOWS / CLIENTS of them)."""
    while not stop.is_set() or len([w for w in ids if w.startswith(prefix)]) < WORKFLOWS // CLIENTS:
        wid = f"{prefix}{len(ids)}"
        ids.append(wid)
        acked[wid] = {"start": False, "updates": 0, "signals": 0, "errors": []}
        # Start until acknowledged (or found started: a start whose answer
        # was lost with its node).
        while True:
            try:
                await client.start_workflow(
                    workflow_type="crash_order", task_queue=QUEUE, workflow_id=wid, input=[wid]
                )
                acked[wid]["start"] = True
                break
            except WorkflowAlreadyStarted:
                break
            except Exception as e:  # a node died under the request
                acked[wid]["errors"].append(f"start: {type(e).__name__}")
                await asyncio.sleep(0.2)
        # One update; not retried (an unacknowledged one need not be there).
        try:
            result = await client.update_workflow(
                wid, "add", args=[5], wait_for="completed", wait_timeout_seconds=20
            )
            if result.get("update_status") == "completed":
                acked[wid]["updates"] += 1
        except Exception as e:
            acked[wid]["errors"].append(f"update: {type(e).__name__}")
        # The closing signal until acknowledged.
        while True:
            try:
                receipt = await client.signal_workflow(wid, "close")
                if receipt.get("outcome") == "signal_received":
                    acked[wid]["signals"] += 1
                    break
            except Exception as e:
                acked[wid]["errors"].append(f"signal: {type(e).__name__}")
            await asyncio.sleep(0.2)


def psql(database_url: str, sql: str) -> str:
    return subprocess.run(
        ["psql", "-qAt", database_url, "-c", sql], check=True, capture_output=True, text=True
    ).stdout.strip()


COUNTER_CHECKS = {
    "task_queue_state equals its dispatch_tasks": """
        WITH t AS (SELECT namespace, task_queue,
            SUM((kind = 'workflow' AND status = 'ready')::int) AS wr,
            SUM((kind = 'workflow' AND status = 'leased')::int) AS wl,
            SUM((kind = 'activity' AND status = 'ready')::int) AS ar,
            SUM((kind = 'activity' AND status = 'leased')::int) AS al
          FROM dispatch_tasks WHERE kind IN ('workflow', 'activity') GROUP BY namespace, task_queue)
        SELECT COUNT(*) FROM task_queue_state q FULL JOIN t USING (namespace, task_queue)
        WHERE COALESCE(q.workflow_ready, 0) <> COALESCE(t.wr, 0)
           OR COALESCE(q.workflow_leased, 0) <> COALESCE(t.wl, 0)
           OR COALESCE(q.activity_ready, 0) <> COALESCE(t.ar, 0)
           OR COALESCE(q.activity_leased, 0) <> COALESCE(t.al, 0)""",
    "workflow_run_series started equals the runs": """
        SELECT ABS((SELECT COALESCE(SUM(started), 0) FROM workflow_run_series)
                   - (SELECT COUNT(*) FROM runs))""",
    "workflow_run_series completed equals the completed runs": """
        SELECT ABS((SELECT COALESCE(SUM(completed), 0) FROM workflow_run_series)
                   - (SELECT COUNT(*) FROM runs WHERE status = 'completed'))""",
    "run_summaries follow every run": """
        SELECT (SELECT COUNT(*) FROM runs)
             - (SELECT COUNT(*) FROM run_summaries s JOIN runs r
                ON r.id = s.run_id AND r.status = s.status)""",
}


def make_worker(client: Client) -> Worker:
    """The SDK worker of the crash_order workflows."""
    return Worker(
        client,
        task_queue=QUEUE,
        workflows=[CrashOrder],
        activities=[charge],
        worker_id=f"crash-{os.getpid()}",
        poll_timeout=5.0,
        shutdown_timeout=10.0,
    )


async def check_runs(client: Client, ids: list[str], acked: dict, stuck_after: float = 180) -> list[str]:
    """What is wrong with the workflows `drive` ran, once the servers are
    back: a run not completed within `stuck_after` seconds, an
    acknowledged start, signal or update missing from its history, an
    activity completed twice."""
    failures: list[str] = []
    # No stuck runs: every workflow completes, with its update's total.
    deadline = time.monotonic() + stuck_after
    for wid in ids:
        while True:
            try:
                described = await client.describe_workflow(wid)
                if described.status == "completed":
                    break
            except Exception:
                pass
            if time.monotonic() > deadline:
                failures.append(f"{wid} is stuck (not completed {stuck_after:.0f} s after the faults ended)")
                break
            await asyncio.sleep(0.2)

    for wid in ids:
        described = await client.describe_workflow(wid)
        history = await client.get_history(wid, described.run_id, page_size=1000)
        types = [e["event_type"] for e in history["events"]]
        if types.count("WorkflowStarted") != 1:
            failures.append(f"{wid}: {types.count('WorkflowStarted')} WorkflowStarted")
        if types.count("ActivityCompleted") != 1:
            failures.append(f"{wid}: {types.count('ActivityCompleted')} ActivityCompleted: {types}")
        received = types.count("SignalReceived")
        if received < acked[wid]["signals"]:
            failures.append(f"{wid}: {acked[wid]['signals']} signals acknowledged, {received} in history")
        updates = sum(1 for t in types if t == "UpdateCompleted")
        if updates < acked[wid]["updates"]:
            failures.append(f"{wid}: {acked[wid]['updates']} updates acknowledged, {updates} completed in history: {types}")
        if types and types[-1] != "WorkflowCompleted":
            failures.append(f"{wid}: history ends with {types[-1]}")
    return failures


def check_counters(database_url: str) -> list[str]:
    """Each counter of COUNTER_CHECKS that differs from its rows."""
    failures = []
    for name, sql in COUNTER_CHECKS.items():
        off = psql(database_url, sql)
        if off != "0":
            failures.append(f"counters: {name}: off by {off}")
    return failures


def summary(ids: list[str], acked: dict) -> str:
    """What the clients did, in one line."""
    runs = sum(1 for wid in ids if acked[wid]["start"])
    errors = sum(len(acked[wid]["errors"]) for wid in ids)
    return (f"  {len(ids)} workflows ({runs} starts acknowledged at once, the rest after a retry "
            f"found them), {sum(a['updates'] for a in acked.values())} updates and "
            f"{sum(a['signals'] for a in acked.values())} signals acknowledged, {errors} requests "
            f"failed under the faults and were retried or dropped; activity attempts run by the "
            f"worker: {sum(_charges.values())} for {len(_charges)} orders")


async def main(base_url: str, work: str, kills: int, database_url: str) -> int:
    client = Client(base_url, namespace="default", timeout=30.0)
    worker = make_worker(client)
    running = asyncio.create_task(worker.run())
    run = uuid.uuid4().hex[:8]
    ids: list[str] = []
    acked: dict = {}
    stop = asyncio.Event()
    killer = Killer(work, kills)
    started = time.monotonic()
    kill_task = asyncio.create_task(killer.run(stop))
    await asyncio.gather(
        *(drive(client, f"crash-{run}-{c}-", ids, acked, stop) for c in range(CLIENTS)),
        kill_task,
    )
    print(f"  {kills} kills and {killer.restart_attempts} restart attempts in "
          f"{time.monotonic() - started:.0f} s; every node is back", flush=True)
    failures: list[str] = []
    if running.done():
        failures.append(f"the worker stopped: {running.exception()!r}")
    failures += await check_runs(client, ids, acked)
    failures += check_counters(database_url)

    await worker.stop()
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    await client.aclose()
    print(summary(ids, acked), flush=True)
    for failure in failures:
        print("  FAIL", failure, flush=True)
    print(f"crash test: {'passed' if not failures else f'{len(failures)} failures'}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])))
