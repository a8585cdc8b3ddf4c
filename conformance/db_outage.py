"""PostgreSQL stopped under SDK load, then started again: the published
Python SDK drives a dwserver node whose store is a PostgreSQL cluster this
script makes, stops and restarts.

Usage: python db_outage.py DWSERVER_BINARY PG_BINDIR [OUTAGE_SECONDS]

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

Once PostgreSQL is back, `/api/ready` must answer 200 within 60 s, and
then crash.py's checks hold: every acknowledged start, signal and update
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


async def main(dwserver: str, bindir: str, outage_seconds: float) -> int:
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
        observed = {"health": 0, "ready": 0, "starts_refused": 0}
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
            async with httpx.AsyncClient(base_url=base, timeout=5.0) as http:
                while True:
                    try:
                        if (await http.get("/api/ready")).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    if time.monotonic() - back > 60:
                        failures.append("/api/ready did not answer 200 within 60 s of the restart")
                        break
                    await asyncio.sleep(0.1)
            timings["ready_after_restart"] = time.monotonic() - back
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
            pg.stop()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    # A CI timeout's SIGTERM still stops the node and the cluster (finally).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2], seconds)))
