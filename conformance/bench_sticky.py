"""History pages a Python SDK worker fetches for a long-history workflow,
without and with a sticky cache, against the same dwserver.

Usage: python conformance/bench_sticky.py BASE_URL [STEPS]   (STEPS: 550)

One workflow of STEPS sequential activities (about 2 history events each)
runs twice on a fresh queue: first on a Worker without a cache, then on a
Worker with `sticky_cache_capacity=16`. The script counts the workflow-task
polls and the history page requests (`POST …/workflow-tasks/{id}/history`)
the worker's SDK client made, by wrapping that client's request method, and
prints one line per run with the wall time and, for the sticky run, the
SDK's cache metrics. A poll answer carries the first page inline (up to the
SDK's page size), so the difference shows once a history outgrows it:
without a cache every task pages through the whole history; a worker whose
run the server held for it (`sticky_replay_mode: sticky_hit_expected`)
fetches only the tail after its cached prefix.
"""
import asyncio
import sys
import time
import uuid

import httpx
from durable_workflow import Client, Worker, activity, workflow

@activity.defn(name="step")
def step(i: int) -> int:
    return i

@workflow.defn(name="long_steps")
class LongSteps:
    def run(self, ctx, n):
        total = 0
        for i in range(n):
            total += yield ctx.schedule_activity("step", [i])
        return total

async def run(base, sticky, n):
    client = Client(base, namespace="default", timeout=30.0)
    calls = {"history": 0, "poll": 0}
    original = client._request
    async def counting(method, path, *a, **k):
        if path.endswith("/history"):
            calls["history"] += 1
        if path.endswith("/workflow-tasks/poll"):
            calls["poll"] += 1
        return await original(method, path, *a, **k)
    client._request = counting
    queue = f"pages-{uuid.uuid4().hex[:6]}"
    kw = {"sticky_cache_capacity": 16, "sticky_cache_ttl_seconds": 300} if sticky else {}
    w = Worker(client, task_queue=queue, workflows=[LongSteps], activities=[step],
               worker_id=f"w-{queue}", poll_timeout=2.0, shutdown_timeout=5.0, **kw)
    t = asyncio.create_task(w.run())
    started = time.monotonic()
    h = await client.start_workflow(workflow_type="long_steps", task_queue=queue, workflow_id=queue, input=[n])
    result = await client.get_result(h, timeout=300)
    elapsed = time.monotonic() - started
    metrics = w.sticky_cache_metrics() if sticky else None
    await w.stop(); t.cancel(); await asyncio.gather(t, return_exceptions=True)
    async with httpx.AsyncClient(base_url=base, headers={"X-Namespace": "default"}) as http:
        described = (await http.get(f"/api/workflows/{queue}")).json()
    await client.aclose()
    assert result == sum(range(n))
    events = described["history_length"]
    print(f"sticky={sticky} steps={n} history_events={events} workflow_polls={calls['poll']} "
          f"history_page_requests={calls['history']} wall={elapsed:.1f}s metrics={metrics}")

async def main(base):
    for sticky in (False, True):
        await run(base, sticky, int(sys.argv[2]) if len(sys.argv) > 2 else 550)

asyncio.run(main(sys.argv[1]))
