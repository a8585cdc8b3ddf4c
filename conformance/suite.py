"""The conformance suite: the published Python SDK drives dwserver.

Usage: python suite.py BASE_URL

A Worker and a Client of the pinned ``durable-workflow`` SDK run the
workflows in ``workflows.py`` through every scenario below; each scenario
asserts what the SDK (and, where the SDK has no accessor, the documented
HTTP API) reports. The worker protocol version comes from
``DURABLE_WORKFLOW_WORKER_PROTOCOL_VERSION`` (the SDK's own setting), so the
runner runs this file once per version. Exit status 0 only when every
scenario passed.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import traceback
import uuid

import httpx
from durable_workflow import Client, Worker
from durable_workflow.errors import WorkflowCancelled, WorkflowTerminated, WorkflowTimedOut

from workflows import ACTIVITIES, QUEUE, WORKFLOWS

PENDING_ACTIVITIES = int(os.environ.get("DW_V2_LIMIT_PENDING_ACTIVITIES", "2000"))
PENDING_SIGNALS = int(os.environ.get("DW_V2_LIMIT_PENDING_SIGNALS", "10000"))
IDLE_QUEUE = "conformance-no-worker"


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class Suite:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.client = Client(base_url, namespace="default", timeout=30.0)
        self.http = httpx.AsyncClient(
            base_url=base_url,
            headers={"X-Namespace": "default", "X-Durable-Workflow-Control-Plane-Version": "2"},
            timeout=30.0,
        )

    async def describe_raw(self, workflow_id: str) -> dict:
        """The documented describe body (the SDK's dataclass drops `failures`)."""
        response = await self.http.get(f"/api/workflows/{workflow_id}")
        response.raise_for_status()
        return response.json()

    async def wait_for(self, what: str, predicate, timeout: float = 20.0):
        deadline = time.monotonic() + timeout
        while True:
            value = await predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.1)

    async def history_types(self, workflow_id: str, run_id: str) -> list[str]:
        history = await self.client.get_history(workflow_id, run_id, page_size=1000)
        return [event["event_type"] for event in history["events"]]

    # -- scenarios -------------------------------------------------------

    async def activity_timer_signal_condition_query(self) -> str:
        wid = new_id("journey")
        handle = await self.client.start_workflow(
            workflow_type="journey", task_queue=QUEUE, workflow_id=wid, input=["conformance"]
        )

        async def waiting():
            answer = await self.client.query_workflow(wid, "stage")
            return answer.get("result") == "waiting_for_approval"

        await self.wait_for("the workflow to wait for approval (query)", waiting)
        receipt = await self.client.signal_workflow(wid, "approve", args=["alice"])
        assert receipt["outcome"] == "signal_received", receipt
        result = await self.client.get_result(handle, timeout=30)
        assert result == {"greeting": "hello, conformance", "approved_by": "alice"}, result
        types = await self.history_types(wid, handle.run_id)
        for expected in ("ActivityCompleted", "TimerFired", "ConditionWaitOpened",
                         "SignalReceived", "ConditionWaitSatisfied", "WorkflowCompleted"):
            assert expected in types, (expected, types)
        described = await self.client.describe_workflow(wid)
        assert described.status == "completed", described
        return f"result {result}, {len(types)} history events"

    async def update_wait_for_completed(self) -> str:
        wid = new_id("counter")
        handle = await self.client.start_workflow(
            workflow_type="counter", task_queue=QUEUE, workflow_id=wid
        )
        first = await self.client.update_workflow(wid, "add", args=[5], wait_for="completed")
        assert first["update_status"] == "completed" and first["result"] == 5, first
        second = await self.client.update_workflow(
            wid, "add", args=[3], wait_for="completed", wait_timeout_seconds=20
        )
        assert second["result"] == 8, second
        await self.client.signal_workflow(wid, "close")
        result = await self.client.get_result(handle, timeout=30)
        assert result == 8, result
        return f"updates returned 5 then 8; workflow completed with {result}"

    async def _started_sleeper(self) -> tuple[str, object]:
        wid = new_id("sleeper")
        handle = await self.client.start_workflow(
            workflow_type="sleeper", task_queue=QUEUE, workflow_id=wid
        )

        async def timer_scheduled():
            return "TimerScheduled" in await self.history_types(wid, handle.run_id)

        await self.wait_for("the hour-long timer", timer_scheduled)
        return wid, handle

    async def cancel(self) -> str:
        wid, handle = await self._started_sleeper()
        await self.client.cancel_workflow(wid, reason="conformance cancel")
        described = await self.client.describe_workflow(wid)
        assert described.status == "cancelled", described.status
        try:
            await self.client.get_result(handle, timeout=10)
        except WorkflowCancelled:
            return "status cancelled; get_result raised WorkflowCancelled"
        raise AssertionError("get_result did not raise WorkflowCancelled")

    async def terminate(self) -> str:
        wid, handle = await self._started_sleeper()
        await self.client.terminate_workflow(wid, reason="conformance terminate")
        described = await self.client.describe_workflow(wid)
        assert described.status == "terminated", described.status
        try:
            await self.client.get_result(handle, timeout=10)
        except WorkflowTerminated:
            return "status terminated; get_result raised WorkflowTerminated"
        raise AssertionError("get_result did not raise WorkflowTerminated")

    async def activity_retry(self) -> str:
        wid = new_id("retrying")
        handle = await self.client.start_workflow(
            workflow_type="retrying", task_queue=QUEUE, workflow_id=wid, input=[wid]
        )
        result = await self.client.get_result(handle, timeout=30)
        assert result == f"{wid} succeeded on attempt 2", result
        types = await self.history_types(wid, handle.run_id)
        assert "ActivityFailed" not in types, types
        return result

    async def activity_start_to_close_timeout(self) -> str:
        wid = new_id("impatient")
        handle = await self.client.start_workflow(
            workflow_type="impatient", task_queue=QUEUE, workflow_id=wid, input=[2.5]
        )
        result = await self.client.get_result(handle, timeout=60)
        assert isinstance(result, dict) and result["category"] == "timeout", result
        assert "start_to_close" in result["message"], result
        types = await self.history_types(wid, handle.run_id)
        assert types.count("ActivityTimedOut") == 1, types
        return f"2 attempts timed out; the workflow caught ActivityFailed: {result['message']}"

    async def run_timeout(self) -> str:
        wid = new_id("brief")
        # Waits on a condition nothing satisfies: only its run timeout ends it.
        handle = await self.client.start_workflow(
            workflow_type="counter", task_queue=QUEUE, workflow_id=wid, run_timeout_seconds=2
        )
        try:
            await self.client.get_result(handle, timeout=30)
        except WorkflowTimedOut:
            pass
        else:
            raise AssertionError("get_result did not raise WorkflowTimedOut")
        described = await self.describe_raw(wid)
        assert described["status"] == "failed", described
        assert described["closed_reason"] == "timed_out", described
        return "status failed, closed_reason timed_out; get_result raised WorkflowTimedOut"

    async def workflow_task_failure_then_retry(self) -> str:
        wid = new_id("shaky")
        handle = await self.client.start_workflow(
            workflow_type="shaky", task_queue=QUEUE, workflow_id=wid, input=[wid]
        )
        result = await self.client.get_result(handle, timeout=60)
        assert result == f"hello, {wid}", result
        history = await self.client.get_history(wid, handle.run_id, page_size=1000)
        failed = [e for e in history["events"] if e["event_type"] == "WorkflowTaskFailed"]
        assert len(failed) == 1, [e["event_type"] for e in history["events"]]
        failure_type = failed[0]["payload"]["failure_type"]
        assert failure_type == "RuntimeCapabilityUnsupported", failed[0]
        return f"first task failed ({failure_type}), recorded once; the retry replayed over it and completed"

    async def fan_out_past_pending_activity_count(self) -> str:
        width = PENDING_ACTIVITIES + 5
        wid = new_id("fanout")
        await self.client.start_workflow(
            workflow_type="fan_out", task_queue=QUEUE, workflow_id=wid, input=[width]
        )

        async def failed():
            described = await self.describe_raw(wid)
            return described if described["status"] == "failed" else None

        described = await self.wait_for("the fan-out to fail", failed)
        failure = described["failures"][0]
        assert failure["failure_category"] == "structural_limit", failure
        assert failure["structural_limit_kind"] == "pending_activity_count", failure
        assert failure["structural_limit_configured"] == PENDING_ACTIVITIES, failure
        sdk_view = await self.client.describe_workflow(wid)
        assert sdk_view.status == "failed", sdk_view
        small = new_id("fanout-ok")
        handle = await self.client.start_workflow(
            workflow_type="fan_out", task_queue=QUEUE, workflow_id=small, input=[3]
        )
        assert await self.client.get_result(handle, timeout=30) == 0 + 1 + 2
        return (f"width {width} failed with {failure['structural_limit_kind']} "
                f"{failure['structural_limit_value']}/{failure['structural_limit_configured']}; width 3 completed")

    async def signal_past_pending_signal_count(self) -> str:
        wid = new_id("unprocessed")
        # No worker polls this queue, so every signal stays pending.
        await self.client.start_workflow(
            workflow_type="counter", task_queue=IDLE_QUEUE, workflow_id=wid
        )
        for i in range(PENDING_SIGNALS):
            await self.client.signal_workflow(wid, "close", request_id=f"{wid}-{i}")
        try:
            await self.client.signal_workflow(wid, "close", request_id=f"{wid}-over")
        except Exception as refused:  # the SDK's typed signal failure
            body = getattr(refused, "body", None) or getattr(getattr(refused, "__cause__", None), "body", None)
            assert getattr(refused, "status", 409) == 409, refused
            assert isinstance(body, dict) and body.get("reason") == "structural_limit_exceeded", body
            assert body["structural_limit_kind"] == "pending_signal_count", body
        else:
            raise AssertionError("the signal past pending_signal_count was accepted")
        described = await self.client.describe_workflow(wid)
        assert described.status == "running", described.status
        await self.client.terminate_workflow(wid, reason="cleanup")
        return f"{PENDING_SIGNALS} signals accepted, the next refused; run stayed running"

    SCENARIOS = [
        "activity_timer_signal_condition_query",
        "update_wait_for_completed",
        "cancel",
        "terminate",
        "activity_retry",
        "activity_start_to_close_timeout",
        "run_timeout",
        "workflow_task_failure_then_retry",
        "fan_out_past_pending_activity_count",
        "signal_past_pending_signal_count",
    ]


async def main(base_url: str) -> int:
    protocol = os.environ.get("DURABLE_WORKFLOW_WORKER_PROTOCOL_VERSION", "1.20")
    suite = Suite(base_url)
    worker = Worker(
        suite.client,
        task_queue=QUEUE,
        workflows=WORKFLOWS,
        activities=ACTIVITIES,
        worker_id=f"conformance-{protocol}-{os.getpid()}",
        poll_timeout=5.0,
        shutdown_timeout=10.0,
    )
    running = asyncio.create_task(worker.run())
    failures = 0
    print(f"conformance: worker protocol {protocol} against {base_url}")
    for name in Suite.SCENARIOS:
        started = time.monotonic()
        try:
            detail = await asyncio.wait_for(getattr(suite, name)(), timeout=90)
            print(f"  PASS {name} ({time.monotonic() - started:.1f}s): {detail}")
        except Exception:
            failures += 1
            print(f"  FAIL {name} ({time.monotonic() - started:.1f}s)")
            traceback.print_exc()
        if running.done():
            print("  the worker stopped:", running.exception())
            failures += 1
            break
    await worker.stop()
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    await suite.http.aclose()
    await suite.client.aclose()
    total = len(Suite.SCENARIOS)
    print(f"conformance (protocol {protocol}): {total - failures}/{total} scenarios passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1])))
