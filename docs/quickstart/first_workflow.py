"""The first workflow of docs/quickstart-server.md.

A worker and a client of the published Python SDK (``durable-workflow``,
pinned in conformance/requirements.txt) in one process: the worker runs
the ``greeter`` workflow, which calls the ``greet`` activity, sleeps on a
durable timer and then waits for an ``approve`` signal; the client starts
it, signals it once it waits, waits for its result and prints its history.

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
    def __init__(self) -> None:
        self.approved_by: str | None = None

    @workflow.signal("approve")
    def approve(self, who: str) -> None:
        self.approved_by = who

    def run(self, ctx, name):
        # Each `yield` is a durable step: the server records it in the
        # workflow's history, and a restarted worker replays from there.
        greeting = yield ctx.schedule_activity("greet", [name])
        yield ctx.start_timer(2)  # a durable timer, in seconds
        # Sleeps until the `approve` signal has set `approved_by`.
        yield ctx.wait_condition(lambda: self.approved_by is not None, key="approved")
        return f"{greeting}, approved by {self.approved_by}"


async def history_types(client: Client, workflow_id: str, run_id: str) -> list[str]:
    history = await client.get_history(workflow_id, run_id, page_size=100)
    return [event["event_type"] for event in history["events"]]


async def waits_for_a_signal(client: Client, workflow_id: str, run_id: str) -> bool:
    """Whether the run opens its condition wait within a minute."""
    for _ in range(600):
        if "ConditionWaitOpened" in await history_types(client, workflow_id, run_id):
            return True
        await asyncio.sleep(0.1)
    return False


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
        # The signal could be sent at once (the server keeps it until the
        # workflow reads it); waiting shows the run parked on its condition.
        if not await waits_for_a_signal(client, workflow_id, handle.run_id):
            print("the workflow never waited for its signal", file=sys.stderr)
            return 1
        await client.signal_workflow(workflow_id, "approve", args=["alice"])
        result = await client.get_result(handle, timeout=60)
        print(f"{workflow_id} returned {result!r}")
        types = await history_types(client, workflow_id, handle.run_id)
        print("history:", ", ".join(types))
        for expected in ("ActivityCompleted", "TimerFired", "SignalReceived", "WorkflowCompleted"):
            if expected not in types:
                print(f"no {expected} in the history", file=sys.stderr)
                return 1
        return 0 if result == "hello, world, approved by alice" else 1
    finally:
        await worker.stop()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await client.aclose()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1])))
