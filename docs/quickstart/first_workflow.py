"""The first workflow of docs/quickstart-server.md.

A worker and a client of the published Python SDK (``durable-workflow``,
pinned in conformance/requirements.txt) in one process: the worker runs
the ``greeter`` workflow, which calls the ``greet`` activity and then
sleeps on a durable timer; the client starts it, waits for its result and
prints its history.

    python docs/quickstart/first_workflow.py http://127.0.0.1:8080

The tokens come from QUICKSTART_OPERATOR_TOKEN (starting the workflow,
reading it) and QUICKSTART_WORKER_TOKEN (polling for its tasks), the
values dwserver was started with.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

from durable_workflow import Client, Worker, activity, workflow

TASK_QUEUE = "quickstart"


@activity.defn(name="greet")
def greet(name: str) -> str:
    return f"hello, {name}"


@workflow.defn(name="greeter")
class Greeter:
    def run(self, ctx, name):
        # Each `yield` is a durable step: the server records it in the
        # workflow's history, and a restarted worker replays from there.
        greeting = yield ctx.schedule_activity("greet", [name])
        yield ctx.start_timer(2)  # a durable timer, in seconds
        return greeting


async def main(base_url: str) -> int:
    client = Client(
        base_url,
        control_token=os.environ["QUICKSTART_OPERATOR_TOKEN"],
        worker_token=os.environ["QUICKSTART_WORKER_TOKEN"],
        namespace="default",
        timeout=30.0,
    )
    worker = Worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[Greeter],
        activities=[greet],
        poll_timeout=5.0,
        shutdown_timeout=10.0,
    )
    running = asyncio.create_task(worker.run())
    try:
        workflow_id = f"greeter-{uuid.uuid4().hex[:8]}"
        handle = await client.start_workflow(
            workflow_type="greeter",
            task_queue=TASK_QUEUE,
            workflow_id=workflow_id,
            input=["world"],
        )
        result = await client.get_result(handle, timeout=60)
        print(f"{workflow_id} returned {result!r}")
        history = await client.get_history(workflow_id, handle.run_id, page_size=100)
        types = [event["event_type"] for event in history["events"]]
        print("history:", ", ".join(types))
        for expected in ("ActivityCompleted", "TimerFired", "WorkflowCompleted"):
            if expected not in types:
                print(f"no {expected} in the history", file=sys.stderr)
                return 1
        return 0 if result == "hello, world" else 1
    finally:
        await worker.stop()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await client.aclose()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1])))
