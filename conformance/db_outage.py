"""PostgreSQL stopped under SDK load, then started again: the published
Python SDK drives a dwserver node whose store is a PostgreSQL cluster this
script makes, stops and restarts.

Usage: python db_outage.py DWSERVER_BINARY PG_BINDIR [OUTAGE_SECONDS [FREEZE_SECONDS]]

PG_BINDIR holds initdb, pg_ctl and psql (Debian: /usr/lib/postgresql/N/bin).
The script makes a cluster of its own in a temporary directory on a free
loopback port (as the `postgres` user when run as root: PostgreSQL refuses
to run as root), starts one dwserver on it (`DW_DATABASE_URL`), and runs
the crash test's Worker and four clients (conformance/crash.py: start, an
activity, an update waited to completion, a closing signal). Three seconds
in, it stops PostgreSQL (`pg_ctl stop -m fast`: every session is cut),
keeps the load on for OUTAGE_SECONDS (10), starts PostgreSQL again and
keeps the load on for five more seconds. While the database is down it
checks, every half second, that the node:

- still runs and answers `/api/health` (503 `not_serving`, store failed)
  within 5 s: no hang;
- answers `/api/ready` with 503, `checks.store: "unavailable"`;
- refuses a start with 503 `database_unavailable`, `retryable: true` and
  a `Retry-After` header, not a 500 and not a hang.

Once PostgreSQL is back, `/api/ready` must answer 200 within 60 s.

Then PostgreSQL hangs instead of stopping: five seconds after the restart
every process of the cluster is frozen with SIGSTOP for FREEZE_SECONDS (10;
0 skips it), which is what a node sees of a stalled host: connections are
accepted by the kernel and nothing answers, no session closes. The node
runs with second-long database timeouts (`DW_DATABASE_*_TIMEOUT_MS`, call
deadline 4 s). While frozen, every probe must be answered within 30 s (no
hang), every start refused with 503 `database_unavailable`, and
`/api/ready` must answer 503 at least once. After SIGCONT, `/api/ready`
must answer 200 within 60 s again, and the load goes on for five seconds.

At the end crash.py's checks hold: every acknowledged start, signal and update
is in its history, no activity completed twice, no run is stuck, and every
counter equals its rows. The node's log must hold no panic.

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

import httpx
from durable_workflow import Client

from crash import CLIENTS, check_counters, check_runs, drive, make_worker, summary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """A PostgreSQL cluster of this script's own."""

    def __init__(self, bindir: str, work: str) -> None:
        self.bindir = bindir
        self.dir = os.path.join(work, "pg")
        self.data = os.path.join(self.dir, "data")
        self.port = free_port()
        os.makedirs(self.dir)
        self.as_postgres: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(work, "postgres")
            shutil.chown(self.dir, "postgres")
            self.as_postgres = ["runuser", "-u", "postgres", "--"]
        self.run("initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8",
                 "--no-sync")

    def run(self, tool: str, *args: str) -> None:
        subprocess.run(self.as_postgres + [os.path.join(self.bindir, tool), *args], check=True,
                       stdout=subprocess.DEVNULL, cwd="/")

    def start(self) -> None:
        # fsync off: the test proves the node's behaviour, not the disk's.
        self.run("pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "log"), "-w", "-t", "60",
                 "-o", f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off",
                 "start")

    def stop(self) -> None:
        self.run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")

    def processes(self) -> list[int]:
        """The postmaster and its children (the backends, the helpers)."""
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            postmaster = int(f.readline())
        children = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    # pid (comm) state ppid …: comm may hold spaces.
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == postmaster:
                children.append(int(entry))
        return [postmaster, *children]

    def freeze(self) -> None:
        """SIGSTOP the postmaster (no new backends), then its children."""
        postmaster, *_ = self.processes()
        os.kill(postmaster, signal.SIGSTOP)
        for pid in self.processes()[1:]:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass

    def thaw(self) -> None:
        postmaster, *children = self.processes()
        for pid in children:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        os.kill(postmaster, signal.SIGCONT)

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"


async def probe_outage(base: str, observed: dict) -> list[str]:
    """One look at the node while its database is down: what is wrong."""
    failures = []
    async with httpx.AsyncClient(base_url=base, timeout=5.0) as http:
        try:
            health = await http.get("/api/health")
            if health.status_code != 503 or health.json().get("checks", {}).get("store") != "failed":
                failures.append(f"/api/health while the database is down: {health.status_code} {health.text}")
            observed["health"] += 1
            ready = await http.get("/api/ready")
            if ready.status_code != 503 or ready.json().get("checks", {}).get("store") != "unavailable":
                failures.append(f"/api/ready while the database is down: {ready.status_code} {ready.text}")
            observed["ready"] += 1
            start = await http.post("/api/workflows", json={
                "workflow_id": f"outage-probe-{uuid.uuid4().hex[:8]}", "workflow_type": "crash_order",
                "task_queue": "outage-probe", "input": {"codec": "json", "blob": "[\"x\"]"},
            })
            body = start.json()
            if (start.status_code != 503 or body.get("reason") != "database_unavailable"
                    or body.get("retryable") is not True or start.headers.get("retry-after") is None):
                failures.append(f"a start while the database is down: {start.status_code} "
                                f"{dict(start.headers)} {start.text}")
            observed["starts_refused"] += 1
        except httpx.TimeoutException as e:
            failures.append(f"the node did not answer within 5 s while the database was down: {e!r}")
    return failures


async def probe_freeze(base: str, observed: dict) -> list[str]:
    """One look at the node while its database hangs: what is wrong."""
    failures = []
    async with httpx.AsyncClient(base_url=base, timeout=30.0) as http:
        try:
            await http.get("/api/health")
            ready = await http.get("/api/ready")
            if ready.status_code == 503 and ready.json().get("checks", {}).get("store") == "unavailable":
                observed["frozen_not_ready"] += 1
            elif ready.status_code != 503:
                observed["frozen_ready"] += 1
            start = await http.post("/api/workflows", json={
                "workflow_id": f"freeze-probe-{uuid.uuid4().hex[:8]}", "workflow_type": "crash_order",
                "task_queue": "outage-probe", "input": {"codec": "json", "blob": "[\"x\"]"},
            })
            body = start.json()
            if (start.status_code != 503 or body.get("reason") != "database_unavailable"
                    or body.get("retryable") is not True):
                failures.append(f"a start while the database hangs: {start.status_code} {start.text}")
            observed["frozen_starts_refused"] += 1
        except httpx.TimeoutException as e:
            failures.append(f"the node did not answer within 30 s while the database hung: {e!r}")
    return failures


async def wait_ready(base: str, since: float, failures: list[str], what: str) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=5.0) as http:
        while True:
            try:
                if (await http.get("/api/ready")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() - since > 60:
                failures.append(f"/api/ready did not answer 200 within 60 s of {what}")
                return
            await asyncio.sleep(0.1)


async def main(dwserver: str, bindir: str, outage_seconds: float, freeze_seconds: float) -> int:
    work = tempfile.mkdtemp(prefix="dw-db-outage-")
    pg = Postgres(bindir, work)
    pg.start()
    node = None
    try:
        subprocess.run([os.path.join(bindir, "psql"), "-q", pg.url("postgres"), "-c",
                        "CREATE DATABASE dw_outage"], check=True)
        database_url = pg.url("dw_outage")
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log_path = os.path.join(work, "node.log")
        env = {k: v for k, v in os.environ.items() if not k.startswith("DW_")}
        env.update({
            "DW_AUTH": "none", "DW_SERVER_ID": "outage-node", "DW_BIND": f"127.0.0.1:{port}",
            "DW_DATABASE_URL": database_url, "DW_POLLING_CACHE_PATH": os.path.join(work, "waits"),
            # Second-long timeouts, so the freeze is seen within the phase.
            "DW_DATABASE_CONNECT_TIMEOUT_MS": "2000", "DW_DATABASE_STATEMENT_TIMEOUT_MS": "2000",
            "DW_DATABASE_LOCK_TIMEOUT_MS": "1000", "DW_DATABASE_CALL_TIMEOUT_MS": "4000",
        })
        with open(log_path, "ab") as log:
            node = subprocess.Popen([dwserver], env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while True:
            with open(log_path, errors="replace") as f:
                if any(line.startswith("listening on ") for line in f):
                    break
            if node.poll() is not None or time.monotonic() > deadline:
                print(open(log_path, errors="replace").read(), flush=True)
                raise AssertionError("dwserver did not start")
            await asyncio.sleep(0.1)

        client = Client(base, namespace="default", timeout=30.0)
        worker = make_worker(client)
        running = asyncio.create_task(worker.run())
        run = uuid.uuid4().hex[:8]
        ids: list[str] = []
        acked: dict = {}
        stop = asyncio.Event()
        failures: list[str] = []
        observed = {"health": 0, "ready": 0, "starts_refused": 0, "frozen_not_ready": 0,
                    "frozen_ready": 0, "frozen_starts_refused": 0}
        timings: dict[str, float] = {}

        async def outage() -> None:
            await asyncio.sleep(3)
            await asyncio.to_thread(pg.stop)
            down = time.monotonic()
            print(f"  PostgreSQL stopped ({len(ids)} workflows started so far)", flush=True)
            while time.monotonic() - down < outage_seconds:
                if node.poll() is not None:
                    failures.append(f"dwserver exited while the database was down ({node.returncode})")
                    break
                failures.extend(await probe_outage(base, observed))
                await asyncio.sleep(0.5)
            await asyncio.to_thread(pg.start)
            back = time.monotonic()
            print(f"  PostgreSQL started again after {back - down:.1f} s", flush=True)
            await wait_ready(base, back, failures, "the restart")
            timings["ready_after_restart"] = time.monotonic() - back
            await asyncio.sleep(5)
            if freeze_seconds > 0:
                await asyncio.to_thread(pg.freeze)
                frozen = time.monotonic()
                print(f"  PostgreSQL frozen (SIGSTOP; {len(ids)} workflows started so far)", flush=True)
                try:
                    while time.monotonic() - frozen < freeze_seconds:
                        if node.poll() is not None:
                            failures.append(f"dwserver exited while the database hung ({node.returncode})")
                            break
                        failures.extend(await probe_freeze(base, observed))
                        await asyncio.sleep(0.5)
                finally:
                    await asyncio.to_thread(pg.thaw)
                thawed = time.monotonic()
                print(f"  PostgreSQL thawed (SIGCONT) after {thawed - frozen:.1f} s", flush=True)
                await wait_ready(base, thawed, failures, "the thaw")
                timings["ready_after_thaw"] = time.monotonic() - thawed
                await asyncio.sleep(5)
            stop.set()

        await asyncio.gather(
            *(drive(client, f"outage-{run}-{c}-", ids, acked, stop) for c in range(CLIENTS)),
            outage(),
        )
        print(f"  ready {timings.get('ready_after_restart', float('nan')):.2f} s after the restart; "
              f"while down: {observed['health']} health, {observed['ready']} ready and "
              f"{observed['starts_refused']} start probes answered 503", flush=True)
        if observed["starts_refused"] == 0:
            failures.append("no probe ran while the database was down")
        if freeze_seconds > 0:
            print(f"  ready {timings.get('ready_after_thaw', float('nan')):.2f} s after the thaw; "
                  f"while frozen: {observed['frozen_starts_refused']} start probes answered 503, "
                  f"/api/ready 503 {observed['frozen_not_ready']} times, 200 {observed['frozen_ready']} times",
                  flush=True)
            if observed["frozen_starts_refused"] == 0:
                failures.append("no probe ran while the database hung")
            if observed["frozen_not_ready"] == 0:
                failures.append("/api/ready never answered 503 while the database hung")
        if running.done():
            failures.append(f"the worker stopped: {running.exception()!r}")
        failures += await check_runs(client, ids, acked)
        failures += check_counters(database_url)
        if node.poll() is not None:
            failures.append(f"dwserver exited ({node.returncode})")
        with open(log_path, errors="replace") as f:
            panics = [line.strip() for line in f if "panicked" in line]
        if panics:
            failures.append(f"the node's log holds panics: {panics[:3]}")

        await worker.stop()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await client.aclose()
        print(summary(ids, acked), flush=True)
        for failure in failures:
            print("  FAIL", failure, flush=True)
        if failures:
            print("--- node log (last 40 lines)", flush=True)
            print("".join(open(log_path, errors="replace").readlines()[-40:]), flush=True)
        print(f"database outage: {'passed' if not failures else f'{len(failures)} failures'}", flush=True)
        return 1 if failures else 0
    finally:
        if node is not None and node.poll() is None:
            node.terminate()
            try:
                node.wait(timeout=30)
            except subprocess.TimeoutExpired:
                node.kill()
        try:
            pg.thaw()
        except (OSError, ValueError):
            pass
        try:
            pg.stop()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    # A CI timeout's SIGTERM still stops the node and the cluster (finally).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
    freeze = float(sys.argv[4]) if len(sys.argv) > 4 else 10.0
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2], seconds, freeze)))
