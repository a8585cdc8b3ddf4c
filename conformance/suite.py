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
import functools
import hashlib
import hmac
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
import traceback
import uuid

import httpx
import durable_workflow._activity_process as activity_process
from durable_workflow import Client, Worker, WorkflowStreamAppendItem, serializer
from durable_workflow.client import ScheduleAction, ScheduleSpec
from durable_workflow.history_bundle_verify import verify_bundle
from durable_workflow.errors import (
    DurableWorkflowError,
    ScheduleNotFound,
    ServerError,
    UpdateRejected,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowTerminated,
    WorkflowTimedOut,
)

from workflows import (
    ACTIVITIES, BUILD_QUEUE, COOPERATIVE_QUEUE, EARLY_QUEUE, PEER_NAMESPACE, PEER_QUEUE, PREPARED_QUEUE, QUEUE, SESSION_QUEUE, STICKY_QUEUE, VALIDATOR_QUEUE,
    WORKFLOWS, CooperativeActivityWait, CooperativeChildParent, CooperativeCleanup, CooperativeNexusCaller,
    BuildProbeV1, BuildProbeV2,
    CooperativeWaitingChild, CooperativeActivityAbandon, GuardedCounter, InboxEarly, PreparedLocal, PreparedLocalCancelled, PreparedLocalPolicy,
    PreparedLocalPolicyGroup, SessionSteps,
    Quick, StickySteps, arm_hold, greet, heal_redrive, linger_marked, linger_then_mark, local_runs, prepared_double, prepared_pause,
    redrive_calls, reverse, session_whoami,
)

PENDING_ACTIVITIES = int(os.environ.get("DW_V2_LIMIT_PENDING_ACTIVITIES", "2000"))
PENDING_SIGNALS = int(os.environ.get("DW_V2_LIMIT_PENDING_SIGNALS", "10000"))
IDLE_QUEUE = "conformance-no-worker"
# The webhook the runner registers (DW_WEBHOOKS=conformance@default=<secret>).
WEBHOOK_SECRET = os.environ.get("DW_CONFORMANCE_WEBHOOK_SECRET", "")


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# How long one scenario may take (main), unless it says otherwise.
SCENARIO_TIMEOUT = 90.0

# The SDK runs a cooperative or prepared local callback in two spawned
# interpreters (a supervisor and the callback), each importing the SDK,
# and gives them at most 5 s of its own to report ready (and as long to
# confirm a stop or a join). That is about 0.5 s of CPU: at load 13-21 on
# a 2-core machine it took longer, the SDK abandoned the workflow task it
# was running the callback on, and the server recorded the lost claim, as
# it should. Each such lapse is noted here (observed only: the SDK behaves
# as it would) with the task queue of the worker whose callback it was, so
# a scenario can tell a machine too loaded for the SDK's bound from a
# failure of the server, and its own worker's lapses from another's.
CALLBACK_PROCESS_LAPSES: list[tuple[str | None, str]] = []
# A start cut off after this long was the machine's speed: a callback
# process reports ready in well under a second on an idle one.
CALLBACK_START_LAPSE = 2.0


def _note_callback_queue() -> None:
    """Keeps the task queue of each callback's worker on its process
    handle (the SDK keeps only the serialized invocation)."""
    original = activity_process.SupervisedCallback.__init__

    def noted(self, invocation, *args, **kwargs):
        original(self, invocation, *args, **kwargs)
        self.conformance_queue = getattr(getattr(invocation, "info", None), "task_queue", None)

    activity_process.SupervisedCallback.__init__ = noted


_note_callback_queue()


def _observe_callback_process(method: str) -> None:
    original = getattr(activity_process.SupervisedCallback, method)

    async def observed(self, *args, **kwargs):
        began = time.monotonic()
        try:
            return await original(self, *args, **kwargs)
        except BaseException as error:
            waited = time.monotonic() - began
            # The SDK's own 5 s (TimeoutError), or the same bound its
            # prepared-local runner puts around a start (which cancels it).
            timed_out = isinstance(error, TimeoutError) or (
                method == "start" and isinstance(error, asyncio.CancelledError)
                and waited >= CALLBACK_START_LAPSE)
            unjoined = (isinstance(error, activity_process.CallbackProcessLost)
                        and "has not confirmed shutdown" in str(error))
            if timed_out or unjoined:
                CALLBACK_PROCESS_LAPSES.append((
                    getattr(self, "conformance_queue", None),
                    f"{method}: {type(error).__name__} after {waited:.1f}s"))
            raise

    setattr(activity_process.SupervisedCallback, method, observed)


for _method in ("start", "stop", "close"):
    _observe_callback_process(_method)


def prepared_queue(attempt: int) -> str:
    """The prepared-local worker's queue for `attempt` of its scenario: a
    retry never meets a run an abandoned attempt left behind."""
    return PREPARED_QUEUE if attempt == 1 else f"{PREPARED_QUEUE}-attempt-{attempt}"


def retried_when_callback_processes_lapse(tries: int = 5, queue_of=prepared_queue):
    """Runs a scenario whose worker runs callbacks in supervised processes
    up to `tries` times: an attempt that failed while a callback process of
    its own worker (on `queue_of(attempt)`) passed the SDK's own bound
    (CALLBACK_PROCESS_LAPSES) exercised the machine's speed, not the
    server, and is run again with a new worker on a new queue (the scenario
    takes the attempt's number). Each retry prints the failure and the
    lapses that excused it. A failure with no lapse of its own worker's
    (another worker's lapse excuses nothing), and any failure of the last
    attempt, fails the scenario: each attempt runs every assertion, so a
    wrong result fails it unless it comes and goes, and comes only with a
    lapse (conformance/test_retry.py checks this)."""

    def wrap(scenario):
        @functools.wraps(scenario)
        async def run(self):
            for attempt in range(1, tries + 1):
                seen = len(CALLBACK_PROCESS_LAPSES)
                try:
                    return await scenario(self, attempt)
                except Exception as error:
                    queue = queue_of(attempt)
                    lapses = [text for lapsed_on, text in CALLBACK_PROCESS_LAPSES[seen:] if lapsed_on == queue]
                    if not lapses:
                        raise
                    cause = (f"{scenario.__name__}: attempt {attempt} of {tries} failed ({type(error).__name__}: "
                             f"{error}) after the SDK's callback processes on {queue} lapsed "
                             f"({'; '.join(lapses)}) at load {os.getloadavg()[0]:.1f}")
                    if attempt == tries:
                        print(f"    {cause}; not run again: the scenario fails")
                        raise
                    print(f"    {cause}; running it again")

        run.timeout = SCENARIO_TIMEOUT * tries
        return run

    return wrap


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

    async def webhook(self, event: dict, signed_at: int | None = None) -> tuple[int, dict]:
        """One delivery to the `conformance` webhook, signed as documented:
        HMAC-SHA256 of "<timestamp>.<body>" under the shared secret."""
        body = json.dumps(event).encode()
        timestamp = str(signed_at if signed_at is not None else int(time.time()))
        digest = hmac.new(WEBHOOK_SECRET.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
        response = await self.http.post(
            "/api/bridge-adapters/webhook/conformance",
            content=body,
            headers={
                "Content-Type": "application/json",
                "X-Durable-Workflow-Webhook-Timestamp": timestamp,
                "X-Durable-Workflow-Webhook-Signature": f"sha256={digest.hexdigest()}",
            },
        )
        return response.status_code, response.json()

    # -- scenarios -------------------------------------------------------

    async def activity_timer_signal_condition_query(self) -> str:
        wid = new_id("journey")
        handle = await self.client.start_workflow(
            workflow_type="journey", task_queue=QUEUE, workflow_id=wid, input=["conformance"]
        )

        async def waiting():
            answer = await self.client.query_workflow(wid, "stage")
            if answer.get("result") != "waiting_for_approval":
                return False
            # A query replays the history there is, which may already hold
            # the TimerFired whose workflow task has not recorded the open
            # wait yet (with DW_QUEUE_DRIVER=sqs the timer fires apart from
            # the poll that leases that task): a signal now would satisfy
            # the condition before it opens. Signal once the wait is open.
            return "ConditionWaitOpened" in await self.history_types(wid, handle.run_id)

        await self.wait_for("the workflow to wait for approval (query, history)", waiting)
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

    async def webhook_start_signal_update(self) -> str:
        """A provider's JSON, delivered through the signed webhook, reaches
        the SDK's workflow code as its arguments: a start, a signal (and its
        re-signed retry, answered as the first) and an update."""
        assert WEBHOOK_SECRET, "DW_CONFORMANCE_WEBHOOK_SECRET is not set (see conformance/run)"
        wid = new_id("webhook-journey")
        status, started = await self.webhook({
            "action": "start_workflow", "idempotency_key": f"{wid}-start",
            "target": {"workflow_type": "journey", "task_queue": QUEUE, "workflow_id": wid},
            "input": ["webhook"],
        })
        assert status == 202 and started["outcome"] == "accepted", (status, started)

        async def waiting():
            answer = await self.client.query_workflow(wid, "stage")
            return answer.get("result") == "waiting_for_approval"

        await self.wait_for("the webhook-started workflow to wait for approval", waiting)
        signal = {
            "action": "signal_workflow", "idempotency_key": f"{wid}-approve",
            "target": {"workflow_id": wid, "signal_name": "approve"}, "input": "bob",
        }
        # The retry is signed a second before the first delivery, from one
        # reading of the clock: read twice, a tick between could give both
        # the same timestamp, hence the same signature, a replay (409).
        signed_at = int(time.time())
        status, first = await self.webhook(signal, signed_at=signed_at)
        assert status == 202, (status, first)
        status, retried = await self.webhook(signal, signed_at=signed_at - 1)
        assert status == 200 and retried["outcome"] == "duplicate", (status, retried)
        assert retried["signal_id"] == first["signal_id"], (first, retried)
        handle = self.client.get_workflow_handle(wid, run_id=started["run_id"])
        result = await self.client.get_result(handle, timeout=30)
        assert result == {"greeting": "hello, webhook", "approved_by": "bob"}, result
        types = await self.history_types(wid, started["run_id"])
        assert types.count("SignalReceived") == 1, types

        counter = new_id("webhook-counter")
        await self.client.start_workflow(workflow_type="counter", task_queue=QUEUE, workflow_id=counter)
        status, update = await self.webhook({
            "action": "update_workflow", "idempotency_key": f"{counter}-add",
            "target": {"workflow_id": counter, "update_name": "add"}, "input": [7],
        })
        assert status == 202 and update["control_plane_outcome"] == "update_accepted", (status, update)
        status, waited = await self.webhook({
            "action": "update_workflow", "idempotency_key": f"{counter}-add-and-wait",
            "target": {"workflow_id": counter, "update_name": "add", "wait_for": "completed",
                       "wait_timeout_seconds": 20},
            "input": [3],
        })
        assert status == 202 and waited["update_status"] == "completed", (status, waited)
        envelope = waited["result_envelope"]
        returned = serializer.decode(envelope["blob"], envelope["codec"])
        assert returned == 10, waited
        await self.client.signal_workflow(counter, "close")
        total = await self.client.get_result(self.client.get_workflow_handle(counter), timeout=30)
        assert total == 10, total
        return (f"webhook start -> {result}; retried signal answered duplicate; updates added 7 "
                f"then 3 (the awaited one answered {returned}); total {total}")

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

    async def update_validator(self) -> str:
        """An update a workflow's validator guards: a worker declaring the
        validator runs it (replaying the run's state) before the server
        accepts the update. Approved deposits are accepted and applied;
        rejected ones reach the caller as UpdateRejected and leave no trace
        in history."""
        protocol = os.environ.get("DURABLE_WORKFLOW_WORKER_PROTOCOL_VERSION", "1.20")
        info = (await self.http.get("/api/cluster/info")).json()
        capabilities = info["worker_protocol"]["server_capabilities"]
        assert capabilities["update_validation_tasks"] is True, capabilities
        worker = Worker(
            self.client,
            task_queue=VALIDATOR_QUEUE,
            workflows=[GuardedCounter],
            worker_id=f"conformance-validators-{protocol}-{os.getpid()}",
            poll_timeout=5.0,
            shutdown_timeout=10.0,
        )
        running = asyncio.create_task(worker.run())
        try:
            wid = new_id("guarded")
            handle = await self.client.start_workflow(
                workflow_type="guarded_counter", task_queue=VALIDATOR_QUEUE, workflow_id=wid
            )
            first = await self.client.update_workflow(wid, "deposit", args=[30], wait_for="completed")
            assert first["update_status"] == "completed" and first["result"] == 30, first
            rejected = []
            for amount in (-5, 80):
                try:
                    await self.client.update_workflow(wid, "deposit", args=[amount], wait_for="completed")
                except UpdateRejected as refused:
                    rejected.append(str(refused))
                else:
                    raise AssertionError(f"a deposit of {amount} was accepted")
            assert "positive" in rejected[0] and "past 100" in rejected[1], rejected
            accepted = await self.client.update_workflow(wid, "deposit", args=[20])
            assert accepted["update_status"] == "accepted" and accepted["update_id"], accepted
            await self.client.signal_workflow(wid, "close")
            result = await self.client.get_result(handle, timeout=30)
            if running.done():
                raise AssertionError(f"the validating worker stopped: {running.exception()!r}")
        finally:
            await worker.stop()
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
        assert result == 50, result
        history = await self.client.get_history(wid, handle.run_id, page_size=1000)
        accepted_events = [e for e in history["events"] if e["event_type"] == "UpdateAccepted"]
        assert len(accepted_events) == 2, [e["event_type"] for e in history["events"]]
        return (f"deposits 30 and 20 approved and applied (total {result}); -5 and 80 rejected "
                f"by the validator ({rejected[1]!r}), neither in history")

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

    async def signal_during_task(self) -> str:
        """A signal that arrives while the workflow's task runs is recorded
        after that task's events: the SDK's replay applies it at the wait
        the task opened, not at the wait the task satisfied."""
        wid = new_id("during")
        entered, release = arm_hold(wid)
        try:
            handle = await self.client.start_workflow(
                workflow_type="signal_during_task", task_queue=QUEUE, workflow_id=wid, input=[wid]
            )

            async def first_wait_open():
                return "ConditionWaitOpened" in await self.history_types(wid, handle.run_id)

            await self.wait_for("the first condition wait to open", first_wait_open)
            await self.client.signal_workflow(wid, "item", args=["a"])
            # The task the first signal woke is now running workflow code.
            await self.wait_for("the woken task to hold", lambda: asyncio.to_thread(entered.wait, 0.2))
            receipt = await self.client.signal_workflow(wid, "item", args=["b"])
            assert receipt["outcome"] == "signal_received", receipt
        finally:
            release.set()
        await self.client.signal_workflow(wid, "item", args=["c"])
        result = await self.client.get_result(handle, timeout=30)
        assert result == ["a", "b", "c"], result
        history = await self.client.get_history(wid, handle.run_id, page_size=1000)
        order = [
            (e["event_type"], e["payload"].get("condition_key") or e["payload"].get("signal_name"))
            for e in history["events"]
            if e["event_type"] in ("SignalReceived", "ConditionWaitOpened", "ConditionWaitSatisfied")
        ]
        # The second signal follows the woken task's events: its wait 'rest'.
        second = order.index(("SignalReceived", "item"), order.index(("SignalReceived", "item")) + 1)
        assert order.index(("ConditionWaitOpened", "rest")) < second, order
        return f"result {result}; the signal sent mid-task recorded after the task opened 'rest'"

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
        assert described.status in ("running", "waiting"), described.status
        await self.client.terminate_workflow(wid, reason="cleanup")
        return f"{PENDING_SIGNALS} signals accepted, the next refused; run stayed running"

    async def schedules(self) -> str:
        sid = new_id("sched")
        handle = await self.client.create_schedule(
            schedule_id=sid,
            spec=ScheduleSpec(cron_expressions=["30 9 * * *"], timezone="Europe/Kyiv"),
            action=ScheduleAction(workflow_type="quick", task_queue=QUEUE, input=[sid]),
            overlap_policy="buffer_one",
            memo={"owner": "conformance"},
            note="created by the conformance suite",
        )
        described = await handle.describe()
        assert described.status == "active", described
        assert described.spec["timezone"] == "Europe/Kyiv", described.spec
        assert described.overlap_policy == "buffer_one", described
        assert described.next_fire_at and described.fires_count == 0, described

        fired = await handle.trigger()
        assert fired.outcome == "triggered" and fired.workflow_id, fired
        # buffer_one: a second trigger waits for the first run to close.
        second = await handle.trigger()
        assert second.outcome in ("buffered", "triggered"), second
        result = await self.client.get_result(
            self.client.get_workflow_handle(fired.workflow_id, run_id=fired.run_id), timeout=30
        )
        assert result == f"hello, {sid}", result
        run = await self.client.describe_workflow(fired.workflow_id)
        assert run.memo == {"owner": "conformance"}, run.memo

        async def buffered_fire_started():
            d = await handle.describe()
            return d if d.fires_count == 2 and d.info["buffer_depth"] == 0 else None

        described = await self.wait_for("the buffered fire to start", buffered_fire_started)
        actions = described.info["recent_actions"]
        expected = ["started", "buffered", "started"] if second.outcome == "buffered" else ["started", "started"]
        assert [a["outcome"] for a in actions] == expected, actions

        await handle.pause(note="maintenance")
        paused = await handle.describe()
        assert paused.status == "paused" and paused.next_fire_at is None, paused
        assert paused.note == "maintenance", paused
        listed = await self.client.list_schedules(status="paused", workflow_type="quick")
        assert sid in [s.schedule_id for s in listed.schedules], listed
        await handle.resume()
        await handle.update(jitter_seconds=60, note="updated")
        updated = await handle.describe()
        assert updated.status == "active" and updated.jitter_seconds == 60, updated
        assert updated.action["workflow_type"] == "quick", updated.action

        await handle.delete()
        try:
            await handle.describe()
        except ScheduleNotFound:
            pass
        else:
            raise AssertionError("a deleted schedule still describes")
        # The audit history outlives the delete; paged three at a time.
        events = [e async for e in self.client.iter_schedule_history(sid, limit=3)]
        kinds = [e.event_type for e in events]
        assert kinds[0] == "ScheduleCreated" and kinds[-1] == "ScheduleDeleted", kinds
        assert [e.sequence for e in events] == list(range(1, len(events) + 1)), events
        for kind in ("ScheduleTriggerBuffered", "SchedulePaused", "ScheduleResumed",
                     "ScheduleUpdated"):
            assert kind in kinds, kinds
        started = [e for e in events if e.event_type == "ScheduleTriggered"]
        assert len(started) >= 2 and all(e.workflow_run_id for e in started), started
        return (f"created in Europe/Kyiv, triggered ({result}), second trigger {second.outcome} "
                f"and started once the first run closed; paused, listed, resumed, updated, "
                f"deleted; {len(events)} audit events read after the delete")

    async def search_attribute_upserts(self) -> str:
        existing = (await self.client.list_search_attributes()).custom_attributes
        for name, kind in (("ConformanceStage", "keyword"), ("ConformanceStep", "int")):
            if name not in existing:  # the other protocol version's run registered it
                await self.client.create_search_attribute(name, kind)
        wid = new_id("tagger")
        handle = await self.client.start_workflow(
            workflow_type="tagger", task_queue=QUEUE, workflow_id=wid, input=["tagged"]
        )
        result = await self.client.get_result(handle, timeout=30)
        assert result == "hello, tagged", result
        described = await self.client.describe_workflow(wid)
        assert described.search_attributes == {"ConformanceStep": 2}, described.search_attributes
        listed = await self.client.list_workflows(workflow_type="tagger")
        mine = [w for w in listed.executions if w.workflow_id == wid]
        assert mine and mine[0].search_attributes == {"ConformanceStep": 2}, listed
        types = await self.history_types(wid, handle.run_id)
        assert types.count("SearchAttributesUpserted") == 2, types
        return "set two attributes, then changed one and removed the other; describe and list agree"
    async def search_attribute_upsert_unregistered(self) -> str:
        # dwserver fails the workflow task itself (it used to refuse the
        # completion with a 422, which stops a Rust SDK worker); the worker
        # keeps running and the retry passes once the attribute exists.
        name = "Unregistered" + uuid.uuid4().hex[:12]
        wid = new_id("tag-unregistered")
        handle = await self.client.start_workflow(
            workflow_type="tag_unregistered", task_queue=QUEUE, workflow_id=wid, input=[name, "red"]
        )

        async def task_failed():
            history = await self.client.get_history(wid, handle.run_id, page_size=1000)
            failed = [e for e in history["events"] if e["event_type"] == "WorkflowTaskFailed"]
            return failed[0] if failed else None

        failed = await self.wait_for("the refused upsert's WorkflowTaskFailed", task_failed)
        message = failed["payload"]["message"]
        assert name in message and "not a registered" in message, failed
        assert failed["payload"]["failure_type"] == "SearchAttributeUpsertRefused", failed
        await self.client.create_search_attribute(name, "keyword")
        result = await self.client.get_result(handle, timeout=60)
        assert result == "hello, red", result
        described = await self.client.describe_workflow(wid)
        assert described.search_attributes == {name: "red"}, described.search_attributes
        types = await self.history_types(wid, handle.run_id)
        assert types.count("WorkflowTaskFailed") == 1, types
        assert types.count("SearchAttributesUpserted") == 1, types
        return f"task failed naming {name}; registered, the retry upserted it and the run completed"

    async def ensure_nexus_catalog(self) -> None:
        """conformance/greetings/greet, bound to the `quick` workflow."""
        base = "/api/service-endpoints"
        for path, body in [
            (base, {"endpoint_name": "conformance"}),
            (f"{base}/conformance/services", {"service_name": "greetings"}),
            (
                f"{base}/conformance/services/greetings/operations",
                {
                    "operation_name": "greet",
                    "operation_mode": "sync",
                    "handler_binding_kind": "start_workflow",
                    "handler_binding": {"workflow_type": "quick", "task_queue": QUEUE},
                },
            ),
        ]:
            response = await self.http.post(path, json=body)
            # A second protocol run finds the catalog already registered.
            assert response.status_code in (201, 409), response.text

    async def nexus_operation(self) -> str:
        """The SDK's execute_nexus_operation against a catalogued operation
        bound to the `quick` workflow: the call starts it and, waiting for
        completion, answers its result; the same idempotency key replays."""
        await self.ensure_nexus_catalog()
        key = new_id("nexus")
        result = await self.client.execute_nexus_operation(
            "conformance", "greetings", "greet", ["nexus"],
            wait_for="completed", wait_timeout_seconds=30, idempotency_key=key,
        )
        assert result.accepted and result.status == "completed", result
        value = serializer.decode_envelope(result.result)
        assert value == "hello, nexus", value
        again = await self.client.execute_nexus_operation(
            "conformance", "greetings", "greet", ["nexus"],
            wait_for="accepted", idempotency_key=key,
        )
        assert again.service_call_id == result.service_call_id, (again, result)
        assert again.response_or_failure_surface["idempotent_replay"] is True, again
        return f"service call {result.service_call_id} completed with {value!r}; the replay answered the same call"

    async def nexus_from_workflow(self) -> str:
        """ctx.call_nexus_service from workflow code: the operation's
        workflow runs and its result resumes the caller; an operation the
        catalog lacks raises NexusOperationFailed at the call."""
        await self.ensure_nexus_catalog()
        wid = new_id("nexus-caller")
        handle = await self.client.start_workflow(
            workflow_type="nexus_caller", task_queue=QUEUE, workflow_id=wid, input=["from-workflow"]
        )
        result = await self.client.get_result(handle, timeout=60)
        assert result["greeting"] == "hello, from-workflow", result
        assert "not found" in (result["missing"] or ""), result
        assert result["admitted"] == "started", result
        history = await self.client.get_history(wid, handle.run_id, page_size=1000)
        events = history["events"]
        started = [e["payload"] for e in events if e["event_type"] == "ServiceCallStarted"]
        completed = [e["payload"] for e in events if e["event_type"] == "ServiceCallCompleted"]
        failed = [e["payload"] for e in events if e["event_type"] == "ServiceCallFailed"]
        assert len(started) == 2 and len(completed) == 1 and len(failed) == 1, [e["event_type"] for e in events]
        assert started[1]["operation_mode"] == "async" and started[1]["wait_for"] == "accepted", started[1]
        assert completed[0]["sequence"] == started[0]["sequence"], (started, completed)
        linked = await self.describe_raw(started[0]["linked_workflow_instance_id"])
        assert linked["status"] == "completed" and linked["workflow_type"] == "quick", linked
        assert not [e for e in events if e["event_type"] == "WorkflowTaskFailed"]
        return (f"call {started[0]['service_call_id']} ran {linked['workflow_id']} and resumed the caller "
                f"with {result['greeting']!r}; the missing operation raised NexusOperationFailed; "
                f"the async call resumed at its admission")

    async def nexus_cross_namespace(self) -> str:
        """ctx.call_nexus_service(..., target_namespace=...) reaches another
        namespace's catalog: the call and its workflow live there (a worker
        of that namespace runs it) and the result resumes the caller; an
        operation whose allow list leaves the caller's namespace out raises
        NexusOperationFailed (rejected_forbidden) and starts nothing."""
        response = await self.http.post("/api/namespaces", json={"name": PEER_NAMESPACE})
        assert response.status_code in (200, 201, 409), response.text
        peer = {"X-Namespace": PEER_NAMESPACE}
        base = "/api/service-endpoints"
        binding = {"workflow_type": "quick", "task_queue": PEER_QUEUE}
        for path, body in [
            (base, {"endpoint_name": "peer"}),
            (f"{base}/peer/services", {"service_name": "greetings"}),
            (f"{base}/peer/services/greetings/operations",
             {"operation_name": "greet", "operation_mode": "sync",
              "handler_binding_kind": "start_workflow", "handler_binding": binding}),
            (f"{base}/peer/services/greetings/operations",
             {"operation_name": "guarded", "operation_mode": "sync",
              "handler_binding_kind": "start_workflow", "handler_binding": binding,
              "boundary_policy": {"allow_callers": ["partners"]}}),
        ]:
            response = await self.http.post(path, json=body, headers=peer)
            # A second protocol run finds the catalog already registered.
            assert response.status_code in (201, 409), response.text
        peer_client = Client(self.base_url, namespace=PEER_NAMESPACE, timeout=30.0)
        protocol = os.environ.get("DURABLE_WORKFLOW_WORKER_PROTOCOL_VERSION", "1.20")
        worker = Worker(
            peer_client, task_queue=PEER_QUEUE, workflows=[Quick], activities=[greet],
            worker_id=f"conformance-peer-{protocol}-{os.getpid()}", poll_timeout=5.0, shutdown_timeout=10.0,
        )
        running = asyncio.create_task(worker.run())
        try:
            wid = new_id("nexus-peer-caller")
            handle = await self.client.start_workflow(
                workflow_type="nexus_peer_caller", task_queue=QUEUE, workflow_id=wid, input=["peer"]
            )
            result = await self.client.get_result(handle, timeout=60)
        finally:
            await worker.stop()
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
        assert result["greeting"] == "hello, peer", result
        assert "not on the operation's allow list" in (result["refused"] or ""), result
        history = await self.client.get_history(wid, handle.run_id, page_size=1000)
        events = history["events"]
        started = [e["payload"] for e in events if e["event_type"] == "ServiceCallStarted"]
        failed = [e["payload"] for e in events if e["event_type"] == "ServiceCallFailed"]
        assert len(started) == 1 and len(failed) == 1, [e["event_type"] for e in events]
        assert started[0]["target_namespace"] == PEER_NAMESPACE, started[0]
        assert started[0]["caller_namespace"] == "default", started[0]
        assert failed[0]["outcome"] == "rejected_forbidden", failed[0]
        assert failed[0]["exception_type"] == "caller_namespace_not_allowed", failed[0]
        linked_id = started[0]["linked_workflow_instance_id"]
        linked = await self.http.get(f"/api/workflows/{linked_id}", headers=peer)
        assert linked.status_code == 200, linked.text
        assert linked.json()["status"] == "completed", linked.json()
        elsewhere = await self.http.get(f"/api/workflows/{linked_id}")
        assert elsewhere.status_code == 404, elsewhere.text
        assert not [e for e in events if e["event_type"] == "WorkflowTaskFailed"]
        return (f"call {started[0]['service_call_id']} ran {linked_id} in {PEER_NAMESPACE} and resumed "
                f"the caller with {result['greeting']!r}; the guarded operation refused the caller")

    async def nexus_start_options(self) -> str:
        """ctx.call_nexus_service with start options: the operation's
        workflow starts with the named id, memo and search attributes, the
        call records the business key, and the connection names the
        server's queue driver (DW_QUEUE_DRIVER, which reaches the server
        from this environment); a second call naming the id after that run
        ended starts a new run of it."""
        await self.ensure_nexus_catalog()
        attribute = "NexusRegion"
        response = await self.http.post("/api/search-attributes", json={"name": attribute, "type": "keyword"})
        assert response.status_code in (201, 409), response.text
        wid = new_id("nexus-options")
        target = new_id("invoice")
        handle = await self.client.start_workflow(
            workflow_type="nexus_start_options", task_queue=QUEUE, workflow_id=wid,
            input=[target, attribute, os.environ.get("DW_QUEUE_DRIVER") or "database"],
        )
        result = await self.client.get_result(handle, timeout=60)
        assert result == {"first": "hello, options", "again": "hello, again"}, result
        history = await self.client.get_history(wid, handle.run_id, page_size=1000)
        started = [e["payload"] for e in history["events"] if e["event_type"] == "ServiceCallStarted"]
        assert len(started) == 2, [e["event_type"] for e in history["events"]]
        assert {s["linked_workflow_instance_id"] for s in started} == {target}, started
        first_run, second_run = (s["linked_workflow_run_id"] for s in started)
        assert first_run != second_run, started
        linked = await self.http.get(f"/api/workflows/{target}/runs/{first_run}")
        assert linked.status_code == 200, linked.text
        described = linked.json()
        assert described["memo"] == {"order": 7}, described
        assert described["search_attributes"].get(attribute) == "eu", described
        call = await self.http.get(
            "/api/service-endpoints/conformance/services/greetings/operations/greet/service-calls/"
            f"{started[0]['service_call_id']}"
        )
        assert call.json()["business_key"] == "order-7", call.text
        return (f"{target} started with its memo, {attribute} and business key; a second call "
                f"after it ended started run {second_run}")

    async def workflow_output_stream(self) -> str:
        wid = new_id("streamer")
        handle = await self.client.start_workflow(
            workflow_type="streamer", task_queue=QUEUE, workflow_id=wid, input=[3]
        )
        run_id = handle.run_id
        assert run_id, handle
        # The subscriber may start before the workflow opened the stream.
        page = await self.client.subscribe_workflow_stream(
            wid, run_id, "progress", from_offset=0, wait_seconds=20
        )
        if len(page.items) < 3:
            more = await self.client.subscribe_workflow_stream(
                wid, run_id, "progress", from_offset=page.next_offset, wait_seconds=20
            )
            page.items.extend(more.items)
            page.next_offset = more.next_offset
        assert [item.offset for item in page.items] == [0, 1, 2], page
        assert [item.payload for item in page.items] == [{"step": i} for i in range(3)], page
        assert all(item.origin == "workflow" for item in page.items), page
        # Resuming from next_offset while the producer is quiet: empty, not terminal.
        quiet = await self.client.subscribe_workflow_stream(
            wid, run_id, "progress", from_offset=page.next_offset, wait_seconds=1
        )
        assert quiet.items == [] and not quiet.terminal, quiet
        assert quiet.stream.pending_items == 0, quiet.stream
        # A client appends to its own stream of the same run, idempotently.
        notes = [
            WorkflowStreamAppendItem(payload="first", idempotency_key="note-1"),
            WorkflowStreamAppendItem(payload_reference="s3://bucket/notes/2", item_type="ref"),
        ]
        appended = await self.client.append_workflow_stream(wid, run_id, "notes", notes)
        assert appended.accepted_offsets == [0, 1] and appended.accepted_count == 2, appended
        again = await self.client.append_workflow_stream(wid, run_id, "notes", notes[:1])
        assert again.accepted_offsets == [0] and again.deduplicated_count == 1, again
        # The rest arrives once the workflow is signalled; the stream ends closed.
        await self.client.signal_workflow(wid, "more")
        rest = [
            item
            async for item in self.client.iter_workflow_stream(
                wid, run_id, "progress", from_offset=page.next_offset, wait_seconds=20
            )
        ]
        assert [(item.offset, item.payload, item.item_type) for item in rest] == [
            (3, {"step": 3}, "final")
        ], rest
        assert await self.client.get_result(handle, timeout=30) == 4
        described = await self.client.describe_workflow_stream(wid, run_id, "progress")
        assert described.status == "closed" and described.total_items == 4, described
        assert described.retention_seconds == 600, described
        streams = {s.stream_name: s for s in await self.client.list_workflow_streams(wid, run_id)}
        assert set(streams) == {"notes", "progress"}, streams
        # The run's end closed the client's stream with it.
        assert streams["notes"].status == "closed", streams["notes"]
        read = await self.client.subscribe_workflow_stream(wid, run_id, "notes")
        assert read.terminal and read.items[1].payload_reference == "s3://bucket/notes/2", read
        return (f"4 items from workflow code read in resumable pages, 2 client items "
                f"(1 deduplicated), both streams closed with the run")

    async def large_payload_through_external_storage(self) -> str:
        """A 3 MiB input (past the 2 MiB payload_size_bytes and request body
        limits) and its 3 MiB result go through the runtime external payload
        transport: history holds only hashed reference envelopes."""
        wid = new_id("mirror")
        text = "".join(chr(0x61 + (i * 7) % 26) for i in range(3 * 1024 * 1024))
        handle = await self.client.start_workflow(
            workflow_type="mirror", task_queue=QUEUE, workflow_id=wid, input=[text]
        )
        result = await self.client.get_result(handle, timeout=60)
        assert result["length"] == len(text) and result["reversed"] == text[::-1], result["length"]
        response = await self.http.get(f"/api/workflows/{wid}/runs/{handle.run_id}/history")
        response.raise_for_status()
        raw = response.text
        assert len(raw) < 256 * 1024, f"history carries payload bytes ({len(raw)} bytes)"
        references = raw.count("durable-workflow.v2.runtime-external-payload-reference.v1")
        assert references >= 3, (references, raw[:2000])
        metrics = await self.http.get("/api/system/metrics", params={"namespace": "default"})
        metrics.raise_for_status()
        usage = metrics.json()["metrics"]["dw_runtime_external_payload_namespace_usage"]
        assert usage["used_objects"] >= 3 and usage["used_bytes"] > 3 * 1024 * 1024, usage
        stored = ""
        database = os.environ.get("DW_CONFORMANCE_DATABASE")
        if database:
            # The store itself records the structural-limit contract's
            # envelope with the hash; the API above answered the SDK's.
            with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
                rows = [payload for (payload,) in db.execute(
                    "SELECT h.payload FROM history_events h JOIN runs r ON r.id = h.run_id "
                    "WHERE r.workflow_id = ?", (wid,))]
            text = "\n".join(rows)
            contract = text.count('"durable-workflow.v2.external-payload-reference.v1"')
            assert contract >= 3 and "runtime-external-payload-reference" not in text, text[:2000]
            assert text.count('"uri":"dw-runtime://external-payloads/v1/ep_') == contract, text[:2000]
            stored = f"; the store holds {contract} external-payload-reference.v1 envelopes"
        return (f"3 MiB in and out; history {len(raw)} bytes with {references} references; "
                f"namespace stores {usage['used_objects']} payloads, {usage['used_bytes']} bytes"
                + stored)

    async def local_activity(self) -> str:
        wid = new_id("local")
        handle = await self.client.start_workflow(
            workflow_type="local_then_timer", task_queue=QUEUE, workflow_id=wid, input=[wid]
        )
        result = await self.client.get_result(handle, timeout=30)
        assert result == 42, result
        runs = local_runs(wid)
        assert runs == 1, f"the local activity ran {runs} times"
        history = await self.client.get_history(wid, handle.run_id, page_size=1000)
        local = [e for e in history["events"] if (e.get("payload") or {}).get("execution_mode") == "local"]
        assert [e["event_type"] for e in local] == ["ActivityScheduled", "ActivityCompleted"], local
        return "ran once in the workflow worker, recorded as a marker, replayed after the timer"

    async def version_marker(self) -> str:
        wid = new_id("versioned")
        handle = await self.client.start_workflow(
            workflow_type="versioned", task_queue=QUEUE, workflow_id=wid
        )
        result = await self.client.get_result(handle, timeout=30)
        assert result == {"version": 2, "patched": True}, result
        history = await self.client.get_history(wid, handle.run_id, page_size=1000)
        markers = [e["payload"] for e in history["events"] if e["event_type"] == "VersionMarkerRecorded"]
        assert [(m["change_id"], m["version"]) for m in markers] == [("new-pricing", 2), ("fix-rounding", 1)], markers
        return f"result {result}; markers {[(m['change_id'], m['version']) for m in markers]}"

    async def continue_as_new_chain(self) -> str:
        wid = new_id("chain")
        handle = await self.client.start_workflow(
            workflow_type="chain", task_queue=QUEUE, workflow_id=wid, input=[2, []]
        )

        async def last_run_closed():
            described = await self.describe_raw(wid)
            return described if described["status"] == "completed" else None

        last = await self.wait_for("the chain's last run to complete", last_run_closed, timeout=30)
        assert last["run_id"] != handle.run_id, last
        assert last["continued_from_run_id"] is not None, last
        # The workflow-level result is the last run's (the SDK's get_result
        # reads the history of the run its handle names, so ask for the
        # workflow's current run instead of the first one).
        current = await self.client.get_result(self.client.get_workflow_handle(wid), timeout=30)
        assert current == {"links": 3, "trail": [2, 1, 0]}, current
        response = await self.http.get(f"/api/workflows/{wid}/runs")
        response.raise_for_status()
        runs = sorted(response.json()["runs"], key=lambda r: int(r["run_id"]))
        assert [r["status"] for r in runs] == ["continued_as_new", "continued_as_new", "completed"], runs
        assert runs[0]["run_id"] == handle.run_id, runs
        for earlier, later in zip(runs, runs[1:]):
            assert earlier["continued_to_run_id"] == later["run_id"], (earlier, later)
            assert later["continued_from_run_id"] == earlier["run_id"], (earlier, later)
        first = await self.client.get_history(wid, handle.run_id, page_size=1000)
        types = [e["event_type"] for e in first["events"]]
        assert types[-1] == "WorkflowContinuedAsNew", types
        closing = first["events"][-1]["payload"]
        assert closing["continued_to_run_id"] == runs[1]["run_id"], closing
        # Each run's history is its own: it starts over with the new input.
        second = await self.client.get_history(wid, runs[1]["run_id"], page_size=1000)
        assert second["events"][0]["event_type"] == "WorkflowStarted", second["events"][0]
        assert second["events"][0]["payload"]["continued_from_run_id"] == handle.run_id, second["events"][0]
        return f"3 runs {[r['status'] for r in runs]}; result {current}"

    async def memo_upserts(self) -> str:
        wid = new_id("memo")
        handle = await self.client.start_workflow(
            workflow_type="memo_keeper", task_queue=QUEUE, workflow_id=wid, input=["ada"],
            memo={"origin": "conformance"},
        )
        result = await self.client.get_result(handle, timeout=60)
        assert result == "hello, ada", result
        described = await self.describe_raw(wid)
        assert described["memo"] == {"origin": "conformance", "stage": "greeted"}, described["memo"]
        history = await self.client.get_history(wid, handle.run_id, page_size=1000)
        upserts = [e["payload"] for e in history["events"] if e["event_type"] == "MemoUpserted"]
        assert len(upserts) == 2, [e["event_type"] for e in history["events"]]
        first_merged = serializer.decode_envelope(upserts[0]["merged"])
        assert first_merged == {"origin": "conformance", "stage": "started", "customer": "ada"}, first_merged
        failed = [e for e in history["events"] if e["event_type"] == "WorkflowTaskFailed"]
        assert not failed, failed
        return f"memo {described['memo']}; 2 MemoUpserted events replayed, merged {first_merged}"

    async def message_stream(self) -> str:
        wid = new_id("inbox")
        handle = await self.client.start_workflow(
            workflow_type="inbox_reader", task_queue=QUEUE, workflow_id=wid, input=[3]
        )

        async def waiting():
            history = await self.client.get_history(wid, handle.run_id, page_size=1000)
            return any(e["event_type"] == "ConditionWaitOpened" for e in history["events"])

        # Appended back to back: a message that arrives while the task the
        # previous one woke is running is recorded after that task's events.
        await self.wait_for("the workflow to wait on its stream", waiting)
        first = await handle.append_message("orders", "order-1", ["apples", 3])
        assert first["position"] == 1 and first["retained"] is False, first
        retried = await handle.append_message("orders", "order-1", ["apples", 3])
        assert retried["position"] == 1 and retried["retained"] is True, retried
        other = await handle.append_message("audit", "note-1", ["not read"])
        assert other["position"] == 1, other
        await handle.append_message("orders", "order-2", ["pears", 5])
        await handle.append_message("orders", "order-3", ["plums", 7])
        result = await self.client.get_result(handle, timeout=60)
        expected = [
            {"id": "order-1", "position": 1, "arguments": ["apples", 3]},
            {"id": "order-2", "position": 2, "arguments": ["pears", 5]},
            {"id": "order-3", "position": 3, "arguments": ["plums", 7]},
        ]
        assert result == expected, result
        history = await self.client.get_history(wid, handle.run_id, page_size=1000)
        received = [e for e in history["events"] if e["event_type"] == "SignalReceived"]
        assert len(received) == 4, [e["event_type"] for e in history["events"]]
        failed = [e for e in history["events"] if e["event_type"] == "WorkflowTaskFailed"]
        assert not failed, failed
        return "3 messages read in order from stream 'orders' (a retried append kept position 1), 4 deliveries"

    async def message_stream_continue_as_new(self) -> str:
        wid = new_id("inbox-chain")
        handle = await self.client.start_workflow(
            workflow_type="inbox_chain", task_queue=QUEUE, workflow_id=wid, input=[[]]
        )

        async def waiting_after(position):
            described = await self.describe_raw(wid)
            history = await self.client.get_history(wid, described["run_id"], page_size=1000)
            return any(e["event_type"] == "ConditionWaitOpened"
                       and e["payload"].get("condition_key") == f"message-stream:orders:{position}"
                       for e in history["events"]) and described["run_id"]

        await self.wait_for("the first run to wait on its stream", lambda: waiting_after(0))
        await handle.append_message("orders", "m-1", ["one"])
        # The successor's first wait is keyed after the carried cursor (1).
        successor = await self.wait_for("the successor to wait after position 1", lambda: waiting_after(1))
        assert successor != handle.run_id, (successor, handle.run_id)
        history = await self.client.get_history(wid, successor, page_size=1000)
        checkpoints = [e for e in history["events"] if e["event_type"] == "SignalReceived"]
        assert len(checkpoints) == 1, checkpoints
        await handle.append_message("orders", "m-2", ["two"])
        await handle.append_message("orders", "m-3", ["three"])
        # The workflow's current run (the handle names the first one).
        result = await self.client.get_result(self.client.get_workflow_handle(wid), timeout=60)
        assert result == ["m-1", ["m-2", 2], ["m-3", 3]], result
        return f"run {handle.run_id} read m-1 and continued; run {successor} started at cursor 1 and read m-2, m-3"

    async def message_stream_carried_before_wait(self) -> str:
        wid = new_id("inbox-carry")
        handle = await self.client.start_workflow(
            workflow_type="inbox_carry", task_queue=QUEUE, workflow_id=wid, input=[[]]
        )

        async def history_of(run_id):
            return (await self.client.get_history(wid, run_id, page_size=1000))["events"]

        async def waiting_after(position):
            described = await self.describe_raw(wid)
            events = await history_of(described["run_id"])
            return any(e["event_type"] == "ConditionWaitOpened"
                       and e["payload"].get("condition_key") == f"message-stream:orders:{position}"
                       for e in events) and described["run_id"]

        async def opened(key):
            return any(e["event_type"] == "ConditionWaitOpened" and e["payload"].get("condition_key") == key
                       for e in await history_of(handle.run_id))

        await self.wait_for("the first run to wait on its stream", lambda: waiting_after(0))
        await handle.append_message("orders", "m-1", [1])
        # The first run read m-1 and waits for `carry`: m-2 and m-3 stay
        # unread, and continue-as-new carries them into the next run.
        await self.wait_for("the first run to wait for carry", lambda: opened("carry"))
        await handle.append_message("orders", "m-2", [2])
        await handle.append_message("orders", "m-3", [3])
        current = self.client.get_workflow_handle(wid)
        await self.client.signal_workflow(wid, "carry", request_id=f"{wid}-carry")
        successor = await self.wait_for("the successor to wait after position 3", lambda: waiting_after(3))
        assert successor != handle.run_id, (successor, handle.run_id)
        # Its next task replays the carried deliveries it read without waiting.
        await current.append_message("orders", "m-4", [4])

        async def settled():
            described = await self.describe_raw(wid)
            failed = [e["payload"].get("message") for e in await history_of(successor)
                      if e["event_type"] == "WorkflowTaskFailed"]
            return (failed or None) if described["status_bucket"] == "running" else ["closed"]

        outcome = await self.wait_for("the successor to close or fail a task", settled, timeout=60)
        assert outcome == ["closed"], f"the successor's replay failed: {outcome}"
        result = await self.client.get_result(current, timeout=60)
        assert result == ["m-1", "m-2", "m-3", "m-4"], result
        return f"run {successor} read the carried m-2, m-3 and replayed them after m-4"

    async def message_stream_appended_before_first_task(self) -> str:
        wid = new_id("inbox-early")
        handle = await self.client.start_workflow(
            workflow_type="inbox_early", task_queue=EARLY_QUEUE, workflow_id=wid, input=[None]
        )
        # No worker polls this queue yet: both messages precede the run's first task.
        await handle.append_message("orders", "m-1", [1])
        await handle.append_message("orders", "m-2", [2])
        protocol = os.environ.get("DURABLE_WORKFLOW_WORKER_PROTOCOL_VERSION", "1.20")
        worker = Worker(
            self.client, task_queue=EARLY_QUEUE, workflows=[InboxEarly],
            worker_id=f"conformance-early-{protocol}-{os.getpid()}",
            poll_timeout=5.0, shutdown_timeout=10.0,
        )
        running = asyncio.create_task(worker.run())
        try:
            async def events():
                return (await self.client.get_history(wid, handle.run_id, page_size=1000))["events"]

            async def waiting_after_two():
                return any(e["event_type"] == "ConditionWaitOpened"
                           and e["payload"].get("condition_key") == "message-stream:orders:2"
                           for e in await events())

            await self.wait_for("the run to wait after position 2", waiting_after_two)
            # Its next task replays the two messages it read without waiting.
            await handle.append_message("orders", "m-3", [3])

            async def settled():
                described = await self.describe_raw(wid)
                failed = [e["payload"].get("message") for e in await events()
                          if e["event_type"] == "WorkflowTaskFailed"]
                return (failed or None) if described["status_bucket"] == "running" else ["closed"]

            outcome = await self.wait_for("the run to close or fail a task", settled, timeout=60)
            assert outcome == ["closed"], f"the replay failed: {outcome}"
            result = await self.client.get_result(handle, timeout=60)
        finally:
            await worker.stop()
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
        assert result == ["m-1", "m-2", "m-3"], result
        return "m-1, m-2 appended before the first task were read by waiting, then m-3"

    async def child_workflows(self) -> str:
        wid = new_id("family")
        handle = await self.client.start_workflow(
            workflow_type="family", task_queue=QUEUE, workflow_id=wid, input=["kid"]
        )
        result = await self.client.get_result(handle, timeout=60)
        assert result["greeting"] == "hello, kid", result
        failed = result["failed"]
        assert failed is not None and "the kid refused" in failed["message"], result
        assert failed["child_workflow_type"] == "kid", result
        history = await self.client.get_history(wid, handle.run_id, page_size=1000)
        events = history["events"]
        scheduled = [e["payload"] for e in events if e["event_type"] == "ChildWorkflowScheduled"]
        completed = [e["payload"] for e in events if e["event_type"] == "ChildRunCompleted"]
        failures = [e["payload"] for e in events if e["event_type"] == "ChildRunFailed"]
        assert len(scheduled) == 2 and len(completed) == 1 and len(failures) == 1, [e["event_type"] for e in events]
        assert scheduled[0]["parent_close_policy"] == "terminate", scheduled[0]
        assert completed[0]["sequence"] == scheduled[0]["sequence"], (completed, scheduled)
        assert failures[0]["sequence"] == scheduled[1]["sequence"], (failures, scheduled)
        assert failures[0]["child_workflow_run_id"] == failed["child_workflow_run_id"], (failures, failed)
        child = await self.describe_raw(scheduled[0]["child_workflow_instance_id"])
        assert child["status"] == "completed", child
        assert child["parent_run_id"] == handle.run_id, child
        return (f"child returned {result['greeting']!r}; the failing child raised ChildWorkflowFailed "
                f"({failed['message']!r}); parent history {len(events)} events")

    async def sticky_execution(self) -> str:
        """A worker with a sticky cache: the server acknowledges it, holds each
        next task of the run for that worker and announces a cache hit."""
        protocol = os.environ.get("DURABLE_WORKFLOW_WORKER_PROTOCOL_VERSION", "1.20")
        worker = Worker(
            self.client,
            task_queue=STICKY_QUEUE,
            workflows=[StickySteps],
            activities=[greet, reverse],
            worker_id=f"conformance-sticky-{protocol}-{os.getpid()}",
            poll_timeout=5.0,
            shutdown_timeout=10.0,
            sticky_cache_capacity=16,
            sticky_cache_ttl_seconds=60,
        )
        running = asyncio.create_task(worker.run())
        try:
            wid = new_id("sticky")
            handle = await self.client.start_workflow(
                workflow_type="sticky_steps", task_queue=STICKY_QUEUE, workflow_id=wid, input=["ada"]
            )
            result = await self.client.get_result(handle, timeout=60)
            assert result == "ada ,olleh", result
            if running.done():
                raise AssertionError(f"the sticky worker stopped: {running.exception()!r}")
            metrics = worker.sticky_cache_metrics()
        finally:
            await worker.stop()
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
        # Four workflow tasks: the first replays cold, the other three were
        # held for this worker and found in its cache.
        assert metrics["hit"] >= 3 and metrics["forced_cold_replay"] == 0, metrics
        types = await self.history_types(wid, handle.run_id)
        assert "WorkflowTaskFailed" not in types, types
        return f"sticky cache metrics {metrics}"

    async def worker_session(self) -> str:
        """Activities of one worker session run on the worker holding it: a
        worker that names the session's requirement, never the one beside it
        on the same queue that does not."""
        protocol = os.environ.get("DURABLE_WORKFLOW_WORKER_PROTOCOL_VERSION", "1.20")
        holder_id = f"conformance-gpu-{protocol}-{os.getpid()}"
        workers = [
            Worker(
                self.client, task_queue=SESSION_QUEUE, workflows=[SessionSteps],
                activities=[session_whoami], worker_id=holder_id, capabilities=["gpu"],
                poll_timeout=5.0, shutdown_timeout=10.0,
            ),
            Worker(
                self.client, task_queue=SESSION_QUEUE, workflows=[SessionSteps],
                activities=[session_whoami], worker_id=f"conformance-plain-{protocol}-{os.getpid()}",
                poll_timeout=5.0, shutdown_timeout=10.0,
            ),
        ]
        running = [asyncio.create_task(w.run()) for w in workers]
        try:
            wid = new_id("session")
            handle = await self.client.start_workflow(
                workflow_type="session_steps", task_queue=SESSION_QUEUE, workflow_id=wid, input=[wid]
            )
            result = await self.client.get_result(handle, timeout=60)
            for task in running:
                if task.done():
                    raise AssertionError(f"a session worker stopped: {task.exception()!r}")
        finally:
            for w in workers:
                await w.stop()
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        assert result == [holder_id] * 3, result
        history = await self.client.get_history(wid, handle.run_id, page_size=1000)
        scheduled = [e["payload"] for e in history["events"] if e["event_type"] == "ActivityScheduled"]
        assert len(scheduled) == 3, scheduled
        assert all(p["worker_session"]["session_id"] == wid for p in scheduled), scheduled
        return f"3 session activities ran on {holder_id}, none on the worker without the requirement"

    async def durable_selection(self) -> str:
        """`ctx.select`: the server records the first member to finish as the
        one winner (SelectionResolved, which the SDK checks field by field on
        replay); the workflow cancels the loser (SelectionOperationCancelled)
        and awaiting it raises DurableOperationCancelled."""
        wid = new_id("selector")
        handle = await self.client.start_workflow(
            workflow_type="selector", task_queue=QUEUE, workflow_id=wid, input=["ada"]
        )
        result = await self.client.get_result(handle, timeout=60)
        assert result == {"winner": "greeting", "value": "hello, ada", "loser": "cancelled timer"}, result
        history = await self.client.get_history(wid, handle.run_id, page_size=1000)
        events = history["events"]
        resolved = [e["payload"] for e in events if e["event_type"] == "SelectionResolved"]
        cancelled = [e["payload"] for e in events if e["event_type"] == "SelectionOperationCancelled"]
        assert len(resolved) == 1 and resolved[0]["member_key"] == "greeting", resolved
        assert resolved[0]["outcome"] == "completed", resolved
        assert len(cancelled) == 1 and cancelled[0]["member_key"] == "deadline", cancelled
        assert "TimerFired" not in [e["event_type"] for e in events], [e["event_type"] for e in events]
        failed = [e for e in events if e["event_type"] == "WorkflowTaskFailed"]
        assert not failed, failed
        return (f"winner {resolved[0]['member_key']} ({resolved[0]['resolution_event_type']}), "
                f"loser {cancelled[0]['operation_kind']} cancelled")

    async def cooperative_cancellation(self) -> str:
        """Cooperative cancellation (protocol 1.20): the request stays pending
        on the run, the worker delivers it at the timer the workflow waits
        on, the workflow runs a cleanup activity and ends as cancelled. A
        1.19 worker cannot take part: the SDK refuses to start one that asks
        for the capability."""
        protocol = os.environ.get("DURABLE_WORKFLOW_WORKER_PROTOCOL_VERSION", "1.20")
        worker = Worker(
            self.client, task_queue=COOPERATIVE_QUEUE, workflows=[CooperativeCleanup],
            activities=[greet], worker_id=f"conformance-coop-{protocol}-{os.getpid()}",
            capabilities=["cooperative_cancellation"], poll_timeout=5.0, shutdown_timeout=10.0,
        )
        running = asyncio.create_task(worker.run())
        if protocol != "1.20":
            try:
                await asyncio.wait_for(asyncio.shield(running), timeout=30)
            except RuntimeError as refused:
                assert "1.20" in str(refused), refused
                return f"the {protocol} worker refuses the capability: {refused}"
            finally:
                await worker.stop()
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
            raise AssertionError(f"a {protocol} worker started with cooperative_cancellation")
        try:
            wid = new_id("cooperative")
            handle = await self.client.start_workflow(
                workflow_type="cooperative_cleanup", task_queue=COOPERATIVE_QUEUE, workflow_id=wid,
                input=["ada"],
            )
            deadline = time.monotonic() + 60
            while "TimerScheduled" not in await self.history_types(wid, handle.run_id):
                assert time.monotonic() < deadline, "the workflow never started its timer"
                if running.done():
                    raise AssertionError(f"the cooperative worker stopped: {running.exception()!r}")
                await asyncio.sleep(0.1)
            first = await self.client.request_workflow_cancellation(
                wid, reason="conformance cooperative", cleanup_timeout_seconds=120,
            )
            again = await self.client.request_workflow_cancellation(wid, run_id=handle.run_id)
            assert first["duplicate"] is False and again["duplicate"] is True, (first, again)
            request = first["cancellation_request"]
            assert again["cancellation_request"]["request_id"] == request["request_id"], (first, again)
            try:
                await self.client.get_result(handle, timeout=60)
                raise AssertionError("get_result did not raise WorkflowCancelled")
            except WorkflowCancelled:
                pass
            if running.done():
                raise AssertionError(f"the cooperative worker stopped: {running.exception()!r}")
        finally:
            await worker.stop()
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
        described = await self.client.describe_workflow(wid)
        assert described.status == "cancelled", described.status
        history = await self.client.get_history(wid, handle.run_id, page_size=1000)
        events = history["events"]
        types = [e["event_type"] for e in events]
        assert "WorkflowTaskFailed" not in types, types
        requested = types.index("CooperativeCancellationRequested")
        delivered = types.index("CooperativeCancellationDelivered")
        delivery = events[delivered]["payload"]
        assert delivery["workflow_command_id"] == request["request_id"], delivery
        assert delivery["call_kind"] == "timer", delivery
        cleanup = [i for i, t in enumerate(types) if t == "ActivityCompleted"]
        assert requested < delivered < cleanup[0], types
        assert types[-1] == "WorkflowCancelled", types
        assert "TimerFired" not in types, types
        return (f"request {request['request_id']} delivered at the timer (sequence {delivery['sequence']}); "
                f"cleanup ran; closed cancelled ({len(types)} events)")

    async def cooperative_activity_abandon(self) -> str:
        """An activity whose cancellation_policy is abandon (protocol 1.20):
        a cooperative cancellation is delivered at it at once, its attempt is
        told nothing (no cancel_requested, no ActivityCancelled), the
        workflow ends cancelled with the activity listed on its
        WorkflowCancelled event as abandoned, and the attempt runs on to its
        end after the close: its completion is accepted and recorded on the
        activity's row, with nothing appended to the closed run's history.
        A 1.19 worker refuses the capability."""
        protocol = os.environ.get("DURABLE_WORKFLOW_WORKER_PROTOCOL_VERSION", "1.20")
        worker = Worker(
            self.client, task_queue=COOPERATIVE_QUEUE, workflows=[CooperativeActivityAbandon],
            activities=[linger_then_mark], worker_id=f"conformance-coop-abandon-{protocol}-{os.getpid()}",
            capabilities=["cooperative_cancellation"], poll_timeout=5.0, shutdown_timeout=30.0,
        )
        running = asyncio.create_task(worker.run())
        if protocol != "1.20":
            try:
                await asyncio.wait_for(asyncio.shield(running), timeout=30)
            except RuntimeError as refused:
                assert "1.20" in str(refused), refused
                return f"the {protocol} worker refuses the capability: {refused}"
            finally:
                await worker.stop()
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
            raise AssertionError(f"a {protocol} worker started with cooperative_cancellation")
        folder = tempfile.mkdtemp(prefix="dw-conformance-abandon-")
        marker = os.path.join(folder, "attempt")
        database = os.environ.get("DW_CONFORMANCE_DATABASE")
        try:
            wid = new_id("coop-abandon")
            handle = await self.client.start_workflow(
                workflow_type="cooperative_activity_abandon", task_queue=COOPERATIVE_QUEUE,
                workflow_id=wid, input=[marker, 6],
            )
            deadline = time.monotonic() + 60
            while not os.path.exists(marker):
                assert time.monotonic() < deadline, "the activity never started"
                assert not running.done(), f"the worker stopped: {running.exception()!r}"
                await asyncio.sleep(0.05)
            await self.client.request_workflow_cancellation(
                wid, reason="conformance abandon", cleanup_timeout_seconds=120,
            )
            try:
                await self.client.get_result(handle, timeout=60)
                raise AssertionError("get_result did not raise WorkflowCancelled")
            except WorkflowCancelled:
                pass
            closed = (await self.client.get_history(wid, handle.run_id, page_size=1000))["events"]
            # The attempt runs on to its end after the close.
            deadline = time.monotonic() + 60
            while "finished" not in open(marker, encoding="utf-8").read():
                assert time.monotonic() < deadline, "the abandoned attempt never finished"
                assert not running.done(), f"the worker stopped: {running.exception()!r}"
                await asyncio.sleep(0.1)
            # Its completion is accepted: the closed run's pending
            # activities (the abandoned one) reach zero.
            deadline = time.monotonic() + 60
            while True:
                described = await self.http.get(f"/api/workflows/{wid}")
                described.raise_for_status()
                if described.json()["pending"]["activities"] == 0:
                    break
                assert time.monotonic() < deadline, f"the abandoned activity never completed: {described.json()}"
                await asyncio.sleep(0.1)
            stored = "its completion accepted: no activity pending"
            if database:
                with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
                    rows = db.execute(
                        "SELECT a.status FROM activities a JOIN runs r ON r.id = a.run_id "
                        "WHERE r.workflow_id = ?", (wid,)).fetchall()
                assert rows == [("completed",)], rows
                stored += ", completed on its row"
            assert not running.done(), f"the worker stopped: {running.exception()!r}"
        finally:
            await worker.stop()
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            shutil.rmtree(folder, ignore_errors=True)
        types = [e["event_type"] for e in closed]
        assert "WorkflowTaskFailed" not in types, types
        assert "ActivityCancelled" not in types and "ActivityCompleted" not in types, types
        delivery = closed[types.index("CooperativeCancellationDelivered")]["payload"]
        assert delivery["call_kind"] == "activity" and delivery["sequence"] == 1, delivery
        assert types[-1] == "WorkflowCancelled", types
        abandoned = closed[-1]["payload"]["abandoned_activities"]
        assert [a["sequence"] for a in abandoned] == [1], abandoned
        after = (await self.client.get_history(wid, handle.run_id, page_size=1000))["events"]
        assert len(after) == len(closed), [e["event_type"] for e in after]
        assert (await self.client.describe_workflow(wid)).status == "cancelled"
        return (f"delivered at the activity at once, closed cancelled with it listed as abandoned; "
                f"the attempt ran to its end after the close ({stored}); history unchanged "
                f"({len(types)} events)")

    async def cooperative_cancellation_waits(self) -> str:
        """Cooperative cancellation that waits for cleanup (protocol 1.20): a
        delivery at a child whose cancellation_policy is
        wait_cancellation_completed parks the parent's claim while the child
        (given a request of its own) cleans up, and lands once the child has
        ended; a delivery at a running activity with that policy parks until
        the worker has stopped the attempt's callback and acknowledged it
        (acknowledge-cancellation closes it as ActivityCancelled); a delivery
        at a Nexus call waiting for its outcome parks while the operation's
        workflow run (given a request of its own) cleans up. A 1.19
        worker cannot take part: the SDK refuses to start one that asks for
        the capability, and refuses the policies without it."""
        protocol = os.environ.get("DURABLE_WORKFLOW_WORKER_PROTOCOL_VERSION", "1.20")
        worker = Worker(
            self.client, task_queue=COOPERATIVE_QUEUE,
            workflows=[CooperativeChildParent, CooperativeWaitingChild, CooperativeActivityWait,
                       CooperativeNexusCaller],
            activities=[greet, linger_marked], worker_id=f"conformance-coop-waits-{protocol}-{os.getpid()}",
            capabilities=["cooperative_cancellation"], poll_timeout=5.0, shutdown_timeout=10.0,
        )
        running = asyncio.create_task(worker.run())
        if protocol != "1.20":
            try:
                await asyncio.wait_for(asyncio.shield(running), timeout=30)
            except RuntimeError as refused:
                assert "1.20" in str(refused), refused
                return f"the {protocol} worker refuses the capability: {refused}"
            finally:
                await worker.stop()
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
            raise AssertionError(f"a {protocol} worker started with cooperative_cancellation")

        def alive() -> None:
            if running.done():
                raise AssertionError(f"the cooperative worker stopped: {running.exception()!r}")

        marker = os.path.join(tempfile.mkdtemp(prefix="dw-conformance-"), "attempt-running")
        try:
            # A child that must clean up first.
            parent_id = new_id("coop-parent")
            parent = await self.client.start_workflow(
                workflow_type="cooperative_child_parent", task_queue=COOPERATIVE_QUEUE,
                workflow_id=parent_id, input=["ada"],
            )
            child_id = f"{parent.run_id}:child:1"
            deadline = time.monotonic() + 60
            while True:
                alive()
                assert time.monotonic() < deadline, "the child never started its timer"
                try:
                    child = await self.client.describe_workflow(child_id)
                    if "TimerScheduled" in await self.history_types(child_id, child.run_id):
                        break
                except Exception:  # not started yet
                    pass
                await asyncio.sleep(0.1)
            await self.client.request_workflow_cancellation(
                parent_id, reason="conformance waits", cleanup_timeout_seconds=120,
            )
            try:
                await self.client.get_result(parent, timeout=90)
                raise AssertionError("get_result did not raise WorkflowCancelled")
            except WorkflowCancelled:
                pass
            alive()

            # A running activity that must stop first.
            activity_id = new_id("coop-activity")
            waiting = await self.client.start_workflow(
                workflow_type="cooperative_activity_wait", task_queue=COOPERATIVE_QUEUE,
                workflow_id=activity_id, input=[marker],
            )
            deadline = time.monotonic() + 60
            while not os.path.exists(marker):
                alive()
                assert time.monotonic() < deadline, "the activity's attempt never ran"
                await asyncio.sleep(0.1)
            await self.client.request_workflow_cancellation(
                activity_id, reason="conformance waits", cleanup_timeout_seconds=120,
            )
            try:
                await self.client.get_result(waiting, timeout=90)
                raise AssertionError("get_result did not raise WorkflowCancelled")
            except WorkflowCancelled:
                pass
            alive()
            # A Nexus call whose operation's run must clean up first.
            base = "/api/service-endpoints"
            for path, body in [
                (base, {"endpoint_name": "conformance"}),
                (f"{base}/conformance/services", {"service_name": "cooperative"}),
                (f"{base}/conformance/services/cooperative/operations", {
                    "operation_name": "linger", "operation_mode": "sync",
                    "handler_binding_kind": "start_workflow",
                    "handler_binding": {"workflow_type": "cooperative_waiting_child",
                                        "task_queue": COOPERATIVE_QUEUE},
                }),
            ]:
                response = await self.http.post(path, json=body)
                assert response.status_code in (201, 409), response.text
            caller_id = new_id("coop-nexus")
            caller = await self.client.start_workflow(
                workflow_type="cooperative_nexus_caller", task_queue=COOPERATIVE_QUEUE,
                workflow_id=caller_id, input=["nexus"],
            )
            deadline = time.monotonic() + 60
            linked_id = None
            while True:
                alive()
                assert time.monotonic() < deadline, "the operation's run never reached its timer"
                events = (await self.client.get_history(caller_id, caller.run_id, page_size=1000))["events"]
                started = [e["payload"] for e in events if e["event_type"] == "ServiceCallStarted"]
                if started:
                    linked_id = started[0]["linked_workflow_instance_id"]
                    linked = await self.client.describe_workflow(linked_id)
                    if "TimerScheduled" in await self.history_types(linked_id, linked.run_id):
                        break
                await asyncio.sleep(0.1)
            await self.client.request_workflow_cancellation(
                caller_id, reason="conformance waits", cleanup_timeout_seconds=120,
            )
            try:
                await self.client.get_result(caller, timeout=90)
                raise AssertionError("get_result did not raise WorkflowCancelled")
            except WorkflowCancelled:
                pass
            alive()
        finally:
            await worker.stop()
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)

        events = (await self.client.get_history(caller_id, caller.run_id, page_size=1000))["events"]
        types = [e["event_type"] for e in events]
        assert "WorkflowTaskFailed" not in types, types
        requested = types.index("CooperativeCancellationRequested")
        call_ended = types.index("ServiceCallCancelled")
        nexus_delivered = types.index("CooperativeCancellationDelivered")
        assert requested < call_ended < nexus_delivered, types
        assert events[nexus_delivered]["payload"]["call_kind"] == "service_operation", events[nexus_delivered]
        assert types[-1] == "WorkflowCancelled", types
        linked = await self.client.describe_workflow(linked_id)
        assert linked.status == "cancelled", linked.status

        parent_events = (await self.client.get_history(parent_id, parent.run_id, page_size=1000))["events"]
        types = [e["event_type"] for e in parent_events]
        assert "WorkflowTaskFailed" not in types, types
        requested = types.index("CooperativeCancellationRequested")
        child_ended = types.index("ChildRunCancelled")
        delivered = types.index("CooperativeCancellationDelivered")
        assert requested < child_ended < delivered, types
        assert parent_events[delivered]["payload"]["call_kind"] == "child", parent_events[delivered]
        assert "ActivityCompleted" in types[delivered:], types
        assert types[-1] == "WorkflowCancelled", types
        child = await self.client.describe_workflow(child_id)
        assert child.status == "cancelled", child.status
        child_types = await self.history_types(child_id, child.run_id)
        assert child_types.index("CooperativeCancellationDelivered") < child_types.index("ActivityCompleted"), child_types

        events = (await self.client.get_history(activity_id, waiting.run_id, page_size=1000))["events"]
        types = [e["event_type"] for e in events]
        assert "WorkflowTaskFailed" not in types, types
        requested = types.index("CooperativeCancellationRequested")
        stopped = types.index("ActivityCancelled")
        delivered = types.index("CooperativeCancellationDelivered")
        assert requested < stopped < delivered, types
        assert events[stopped]["payload"]["cancellation_policy"] == "wait_cancellation_completed", events[stopped]
        assert events[delivered]["payload"]["call_kind"] == "activity", events[delivered]
        assert types[-1] == "WorkflowCancelled", types
        return (f"child: parked, child cancelled after its cleanup, delivered at event {delivered}; "
                f"activity: parked until the attempt acknowledged (ActivityCancelled at event {stopped}); "
                f"Nexus call: parked until {linked_id} ended cancelled, delivered at event {nexus_delivered}")

    @retried_when_callback_processes_lapse()
    async def prepared_local_cancellation_policies(self, attempt: int) -> str:
        """Local cancellation policies (1.20): discovery lists try_cancel and
        wait_cancellation_completed, the worker registers its policy consumer
        for both, and a local call authored with either records the policy on
        each of its events; a cancellation request stops the running callback
        (acknowledged before the delivery at the call, which the wait policy
        requires) and the workflow cleans up with an all() group of two local
        calls in a cancellation shield, each on the delivered request's
        cleanup authority. A 1.19 worker cannot opt in."""
        protocol = os.environ.get("DURABLE_WORKFLOW_WORKER_PROTOCOL_VERSION", "1.20")
        worker = self.prepared_worker(attempt)
        running = asyncio.create_task(worker.run())
        if protocol != "1.20":
            refused = await self.refused_below_1_20(worker, running)
            return f"the {protocol} worker refuses to opt in: {refused}"
        info = await self.client.get_cluster_info()
        advertised = info["worker_protocol"]["server_capabilities"][
            "prepared_local_activity_cancellation_policies"]
        assert advertised == ["try_cancel", "wait_cancellation_completed"], advertised
        ledgers = tempfile.mkdtemp(prefix="dw-conformance-prepared-")
        results = {}
        try:
            for policy in ("wait_cancellation_completed", "try_cancel"):
                ledger = os.path.join(ledgers, policy)
                wid = new_id(f"prepared-policy-{policy}")
                handle = await self.client.start_workflow(
                    workflow_type="prepared_local_policy", task_queue=prepared_queue(attempt),
                    workflow_id=wid, input=[ledger, policy],
                )
                deadline = time.monotonic() + 60
                while self.ledger_lines(ledger) < 1:
                    assert time.monotonic() < deadline, "the prepared callback never started"
                    assert not running.done(), f"the prepared worker stopped: {running.exception()!r}"
                    await asyncio.sleep(0.05)
                assert worker._local_activity_cancellation_policies == (
                    "try_cancel", "wait_cancellation_completed"), worker._local_activity_cancellation_policies
                await self.client.request_workflow_cancellation(
                    wid, reason=f"conformance {policy}", cleanup_timeout_seconds=120,
                )
                try:
                    await self.client.get_result(handle, timeout=60)
                    raise AssertionError("get_result did not raise WorkflowCancelled")
                except WorkflowCancelled:
                    pass
                ran = tuple(self.ledger_lines(f"{ledger}{suffix}") for suffix in ("", "-cleanup-a", "-cleanup-b"))
                assert ran == (1, 1, 1), f"{policy}: the callbacks ran {ran} times"
                events = (await self.client.get_history(wid, handle.run_id, page_size=1000))["events"]
                types = [e["event_type"] for e in events]
                assert types[-1] == "WorkflowCancelled", types
                assert "WorkflowTaskFailed" not in types, types
                local = {}
                for event in events:
                    payload = event.get("payload") or {}
                    if payload.get("execution_mode") == "local":
                        local.setdefault(payload["sequence"], []).append(event)
                assert [e["event_type"] for e in local[1]] == ["ActivityScheduled", "ActivityStarted"], local[1]
                assert all(e["payload"]["cancellation_policy"] == policy for e in local[1]), local[1]
                delivered = types.index("CooperativeCancellationDelivered")
                delivery = events[delivered]["payload"]
                assert delivery["call_kind"] == "local_activity" and delivery["sequence"] == 1, delivery
                cleanup = [evs for sequence, evs in sorted(local.items()) if sequence != 1]
                assert len(cleanup) == 2, local
                request_id = delivery["workflow_command_id"]
                for member in cleanup:
                    assert [e["event_type"] for e in member] == [
                        "ActivityScheduled", "ActivityStarted", "ActivityCompleted"], member
                    scheduled = member[0]["payload"]
                    assert scheduled.get("parallel_group_path"), scheduled
                    authority = scheduled["cancellation_cleanup"]
                    assert authority["request_id"] == request_id, authority
                    assert authority["delivery_history_event_id"] == events[delivered]["id"], authority
                results[policy] = len(types)
            # An all() group of two running calls, one per policy: both
            # callbacks stop, each acknowledged, and the request is
            # delivered at the group.
            ledger = os.path.join(ledgers, "group")
            wid = new_id("prepared-policy-group")
            handle = await self.client.start_workflow(
                workflow_type="prepared_local_policy_group", task_queue=prepared_queue(attempt),
                workflow_id=wid, input=[ledger],
            )
            deadline = time.monotonic() + 60
            while self.ledger_lines(f"{ledger}-wait") < 1 or self.ledger_lines(f"{ledger}-try") < 1:
                assert time.monotonic() < deadline, "the group's callbacks never started"
                assert not running.done(), f"the prepared worker stopped: {running.exception()!r}"
                await asyncio.sleep(0.05)
            await self.client.request_workflow_cancellation(
                wid, reason="conformance group", cleanup_timeout_seconds=120,
            )
            try:
                await self.client.get_result(handle, timeout=60)
                raise AssertionError("get_result did not raise WorkflowCancelled")
            except WorkflowCancelled:
                pass
            ran = tuple(self.ledger_lines(f"{ledger}-{name}") for name in ("wait", "try", "cleanup"))
            assert ran == (1, 1, 1), f"group: the callbacks ran {ran} times"
            events = (await self.client.get_history(wid, handle.run_id, page_size=1000))["events"]
            types = [e["event_type"] for e in events]
            assert types[-1] == "WorkflowCancelled" and "WorkflowTaskFailed" not in types, types
            delivery = events[types.index("CooperativeCancellationDelivered")]["payload"]
            assert delivery["call_kind"] == "parallel" and delivery["sequence"] == 1, delivery
            assert delivery["sequence_span"] == 2, delivery
            for sequence, policy in ((1, "wait_cancellation_completed"), (2, "try_cancel")):
                member = [e for e in events if (e.get("payload") or {}).get("sequence") == sequence
                          and (e.get("payload") or {}).get("execution_mode") == "local"]
                assert [e["event_type"] for e in member] == ["ActivityScheduled", "ActivityStarted"], member
                assert all(e["payload"]["cancellation_policy"] == policy for e in member), member
            results["group"] = len(types)
        finally:
            stopped = running.done()
            try:
                await worker.stop()
            finally:
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
            shutil.rmtree(ledgers, ignore_errors=True)
        assert not stopped, "the prepared worker stopped early"
        return (f"both policies advertised and registered; each recorded on its call's events, "
                f"callback stopped, delivered at the local call, cleanup all() group of two local "
                f"calls on the delivered request's authority; an all() group of a call per policy "
                f"stopped and delivered at the group (events per run: {results})")

    def prepared_worker(self, attempt: int = 1) -> Worker:
        """A worker that opts in to prepared local activities (1.20), one
        per attempt of its scenario, on that attempt's queue."""
        protocol = os.environ.get("DURABLE_WORKFLOW_WORKER_PROTOCOL_VERSION", "1.20")
        return Worker(
            self.client, task_queue=prepared_queue(attempt),
            workflows=[PreparedLocal, PreparedLocalCancelled, PreparedLocalPolicy, PreparedLocalPolicyGroup],
            activities=[prepared_double, prepared_pause, greet],
            worker_id=f"conformance-prepared-{protocol}-{os.getpid()}-{attempt}",
            capabilities=["cooperative_cancellation", "prepared_local_activities",
                          "prepared_local_activity_groups",
                          "prepared_local_activity_cancellation_policies"],
            poll_timeout=5.0, shutdown_timeout=10.0,
        )

    async def refused_below_1_20(self, worker: Worker, running: asyncio.Task) -> str:
        """A worker below 1.20 refuses to opt in before it registers."""
        try:
            await asyncio.wait_for(asyncio.shield(running), timeout=30)
        except RuntimeError as refused:
            assert "1.20" in str(refused), refused
            return str(refused)
        finally:
            await worker.stop()
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
        raise AssertionError("a worker below 1.20 started with prepared_local_activities")

    @staticmethod
    def ledger_lines(path: str) -> int:
        try:
            with open(path, encoding="utf-8") as lines:
                return sum(1 for _ in lines)
        except FileNotFoundError:
            return 0

    @retried_when_callback_processes_lapse()
    async def prepared_local_activity(self, attempt: int) -> str:
        """The prepared-local protocol (1.20): a worker that opts in runs
        its local activities on the workflow task's own claim (checkpoint,
        prepare, control, outcome; checkpoint-group for an all() group with
        a local member), each callback once, and replays them from their
        ActivityScheduled / ActivityStarted / ActivityCompleted events. A
        1.19 worker cannot opt in (the SDK refuses it before registering);
        its local activities stay record_local_activity markers."""
        protocol = os.environ.get("DURABLE_WORKFLOW_WORKER_PROTOCOL_VERSION", "1.20")
        worker = self.prepared_worker(attempt)
        running = asyncio.create_task(worker.run())
        if protocol != "1.20":
            await self.refused_below_1_20(worker, running)
            marker = await self.local_activity()
            return f"the {protocol} worker refuses to opt in; markers still work: {marker}"
        ledgers = tempfile.mkdtemp(prefix="dw-conformance-prepared-")
        ledger = os.path.join(ledgers, "runs")
        try:
            wid = new_id("prepared")
            handle = await self.client.start_workflow(
                workflow_type="prepared_local", task_queue=prepared_queue(attempt), workflow_id=wid, input=[ledger],
            )
            result = await asyncio.wait_for(self.client.get_result(handle, timeout=60), timeout=70)
            counted = (self.ledger_lines(ledger), self.ledger_lines(f"{ledger}-group"))
        finally:
            stopped = running.done()
            try:
                await worker.stop()
            finally:
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
            shutil.rmtree(ledgers, ignore_errors=True)
        assert not stopped, "the prepared worker stopped early"
        assert result == {"doubled": 42, "grouped": [10, "hello, group"]}, result
        assert counted == (1, 1), f"the local callbacks ran {counted} times"
        history = await self.client.get_history(wid, handle.run_id, page_size=1000)
        events = history["events"]
        types = [e["event_type"] for e in events]
        assert "WorkflowTaskFailed" not in types, types
        local = {}
        for event in events:
            payload = event.get("payload") or {}
            if payload.get("execution_mode") == "local":
                local.setdefault(payload["sequence"], []).append(event["event_type"])
                assert payload.get("activity_execution_id"), event
        assert sorted(local) == [2, 3], local
        for sequence, kinds in local.items():
            assert kinds == ["ActivityScheduled", "ActivityStarted", "ActivityCompleted"], (sequence, kinds)
        group = [e["payload"] for e in events if (e.get("payload") or {}).get("sequence") in (3, 4)
                 and e["event_type"] == "ActivityScheduled"]
        assert len(group) == 2 and all(p.get("parallel_group_path") for p in group), group
        side_effect = types.index("SideEffectRecorded")
        assert side_effect < types.index("ActivityScheduled"), types
        return (f"result {result}; locals at sequences {sorted(local)} admitted on the claim, "
                f"each run once; {len(types)} events, no failed task")

    @retried_when_callback_processes_lapse()
    async def prepared_local_cancellation(self, attempt: int) -> str:
        """A cooperative cancellation requested while a prepared local
        callback runs (1.20): the attempt's control answers
        cancellation_requested with the request's context, the worker stops
        the callback, acknowledges the stop (acknowledge-cancellation) and
        delivers the request at the local call on the same claim; the
        workflow cleans up (an activity, then a local call in a
        cancellation shield, admitted on the request's cleanup authority)
        and ends cancelled. The stopped callback's outcome is never
        recorded."""
        protocol = os.environ.get("DURABLE_WORKFLOW_WORKER_PROTOCOL_VERSION", "1.20")
        worker = self.prepared_worker(attempt)
        running = asyncio.create_task(worker.run())
        if protocol != "1.20":
            refused = await self.refused_below_1_20(worker, running)
            return f"the {protocol} worker refuses to opt in: {refused}"
        ledgers = tempfile.mkdtemp(prefix="dw-conformance-prepared-")
        ledger = os.path.join(ledgers, "pause")
        try:
            wid = new_id("prepared-cancelled")
            handle = await self.client.start_workflow(
                workflow_type="prepared_local_cancelled", task_queue=prepared_queue(attempt),
                workflow_id=wid, input=[ledger],
            )
            deadline = time.monotonic() + 60
            while self.ledger_lines(ledger) < 1:
                assert time.monotonic() < deadline, "the prepared callback never started"
                assert not running.done(), f"the prepared worker stopped: {running.exception()!r}"
                await asyncio.sleep(0.05)
            await self.client.request_workflow_cancellation(
                wid, reason="conformance prepared", cleanup_timeout_seconds=120,
            )
            try:
                await self.client.get_result(handle, timeout=80)
                raise AssertionError("get_result did not raise WorkflowCancelled")
            except WorkflowCancelled:
                pass
            started = self.ledger_lines(ledger)
            cleaned = self.ledger_lines(f"{ledger}-cleanup")
        finally:
            stopped = running.done()
            try:
                await worker.stop()
            finally:
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
            shutil.rmtree(ledgers, ignore_errors=True)
        assert not stopped, "the prepared worker stopped early"
        assert started == 1, f"the callback started {started} times"
        assert cleaned == 1, f"the cleanup callback ran {cleaned} times"
        events = (await self.client.get_history(wid, handle.run_id, page_size=1000))["events"]
        types = [e["event_type"] for e in events]
        assert types[-1] == "WorkflowCancelled", types
        assert "WorkflowTaskFailed" not in types, types
        started_at = types.index("ActivityStarted")
        requested = types.index("CooperativeCancellationRequested")
        delivered = types.index("CooperativeCancellationDelivered")
        assert started_at < requested < delivered, types
        local = {}
        for event in events:
            payload = event.get("payload") or {}
            if payload.get("execution_mode") == "local":
                local.setdefault(payload["sequence"], []).append(event)
        assert [e["event_type"] for e in local[1]] == ["ActivityScheduled", "ActivityStarted"], local[1]
        # The cleanup call, in a cancellation shield, runs on the cleanup
        # authority of the delivered request.
        cleanup = [events for sequence, events in local.items() if sequence != 1]
        assert len(cleanup) == 1, local
        assert [e["event_type"] for e in cleanup[0]] == [
            "ActivityScheduled", "ActivityStarted", "ActivityCompleted"], cleanup
        authority = cleanup[0][0]["payload"]["cancellation_cleanup"]
        assert authority["request_id"] == events[requested]["payload"]["workflow_command_id"], authority
        assert authority["delivery_history_event_id"] == events[delivered]["id"], authority
        delivery = events[delivered]["payload"]
        assert delivery["call_kind"] == "local_activity" and delivery["sequence"] == 1, delivery
        context = events[requested]["payload"]["cancellation"]
        assert context["request_id"] == delivery["workflow_command_id"], context
        assert "ActivityCompleted" in types[delivered:], types
        return (f"callback stopped and acknowledged, request delivered at the local call "
                f"(sequence {delivery['sequence']}), cleanup ran (an activity, then a local call "
                f"on the request's cleanup authority): {types}")

    async def worker_roster(self) -> str:
        """The operator's worker routes through the client: list_workers
        (filtered by queue and status) sees the suite's own worker,
        describe_worker one registration, deregister_worker removes it."""
        async def registered():
            listed = await self.client.list_workers(task_queue=QUEUE, status="active")
            ours = [w for w in listed.workers if w.worker_id.startswith("conformance-")]
            return listed if ours else None

        # The suite's worker registers as it starts (this may run first).
        listed = await self.wait_for("the suite's worker in the roster", registered)
        assert all(w.task_queue == QUEUE and w.status == "active" for w in listed.workers), listed
        assert listed.namespace == "default" and listed.stale_after_seconds == 90, listed
        queue = new_id("roster-queue")
        worker_id = new_id("roster-worker")
        registered = await self.http.post(
            "/api/worker/register",
            json={"worker_id": worker_id, "task_queue": queue, "runtime": "python"},
            headers={"X-Durable-Workflow-Protocol-Version": "1.20"},
        )
        assert registered.status_code == 200, registered.text
        only = await self.client.list_workers(task_queue=queue)
        assert [w.worker_id for w in only.workers] == [worker_id], only
        described = await self.client.describe_worker(worker_id)
        assert (described.worker_id, described.task_queue, described.status) == (
            worker_id, queue, "active"), described
        assert described.heartbeat_interval_seconds == 30, described
        assert described.last_heartbeat_at and described.last_heartbeat_at.endswith("Z"), described
        removed = await self.client.deregister_worker(worker_id)
        assert removed["outcome"] == "deregistered", removed
        try:
            await self.client.describe_worker(worker_id)
        except DurableWorkflowError as error:
            assert getattr(error, "status", None) == 404 or "worker_not_found" in str(error), error
        else:
            raise AssertionError("a deregistered worker is still described")
        gone = await self.client.list_workers(task_queue=queue)
        assert gone.workers == [], gone
        return (f"{len(listed.workers)} active worker(s) on {QUEUE}; "
                f"{worker_id} listed, described, deregistered")

    async def task_queue_visibility(self) -> str:
        """The client's task-queue routes: list_task_queues shows a queue
        with a waiting workflow task, describe_task_queue its counts, and
        the suite's own queue its worker among the pollers."""
        queue = new_id("visibility-queue")
        wid = new_id("visibility")
        await self.client.start_workflow(workflow_type="journey", task_queue=queue, workflow_id=wid,
                                         input=["nobody polls"])
        listed = await self.client.list_task_queues()
        assert listed.namespace == "default", listed
        ours = [q for q in listed.task_queues if q.name == queue]
        assert len(ours) == 1, [q.name for q in listed.task_queues]
        assert ours[0].stats["workflow_tasks"] == {"ready_count": 1, "leased_count": 0}, ours[0]
        described = await self.client.describe_task_queue(queue)
        assert (described.name, described.namespace) == (queue, "default"), described
        assert described.stats["workflow_tasks"]["ready_count"] == 1, described
        assert described.pollers == [] and described.current_leases == [], described
        admitted = described.admission.workflow_tasks
        assert (admitted.status, admitted.ready_count, admitted.active_worker_count) == (
            "unlimited", 1, 0), described.admission

        async def served():
            try:
                main = await self.client.describe_task_queue(QUEUE)
            except DurableWorkflowError as error:
                # 404 until the suite's worker registers (this may run first).
                if getattr(error, "status", None) == 404:
                    return None
                raise
            ids = [p["worker_id"] for p in main.pollers or []]
            return main if any(i.startswith("conformance-") for i in ids) else None

        main = await self.wait_for("the suite's worker among the pollers", served)
        await self.client.terminate_workflow(wid, reason="task_queue_visibility done")
        try:
            await self.client.describe_task_queue(new_id("no-such-queue"))
        except DurableWorkflowError as error:
            assert getattr(error, "status", None) == 404 or "task_queue_not_found" in str(error), error
        else:
            raise AssertionError("an unknown task queue was described")
        return (f"{len(listed.task_queues)} queue(s) listed; {queue} holds 1 ready workflow task; "
                f"{QUEUE} polled by {len(main.pollers)} worker(s)")

    async def build_id_rollout(self) -> str:
        """Two worker builds on one queue: list_task_queue_build_ids shows
        both cohorts; drain_task_queue_build_id stops v1's claims (v2 runs
        every start and its activities); a run's activities go to its
        cohort's workers; resume, then promote v1, pins
        fresh starts to v1 (v2 takes none of them); promoting v2 and v1
        again rolls v2 back."""
        protocol = os.environ.get("DURABLE_WORKFLOW_WORKER_PROTOCOL_VERSION", "1.20")
        queue = f"{BUILD_QUEUE}-{protocol}-{uuid.uuid4().hex[:6]}"
        workers = [
            Worker(self.client, task_queue=queue, workflows=[probe], activities=[greet, session_whoami],
                   worker_id=f"conformance-{build}-{protocol}-{os.getpid()}", build_id=build,
                   poll_timeout=2.0, shutdown_timeout=10.0)
            for build, probe in (("v1", BuildProbeV1), ("v2", BuildProbeV2))
        ]
        running = [asyncio.create_task(w.run()) for w in workers]

        async def builds_of(count: int) -> list[str]:
            ran = []
            for _ in range(count):
                handle = await self.client.start_workflow(
                    workflow_type="build_probe", task_queue=queue, workflow_id=new_id("build"),
                    input=["rollout"])
                result = await self.client.get_result(handle, timeout=30)
                assert result["greeting"] == "hello, rollout", result
                # Describe names the build the run went to.
                described = await self.describe_raw(handle.workflow_id)
                assert described["compatibility"] == result["build"], (described, result)
                # Its activities go to its cohort's workers, as its workflow tasks do.
                assert f"-{result['build']}-" in result["activity_worker"], result
                ran.append(result["build"])
            return ran

        try:
            async def both_listed():
                rollout = await self.client.list_task_queue_build_ids(queue)
                active = {c.build_id: c for c in rollout.build_ids if c.active_worker_count == 1}
                return rollout if set(active) == {"v1", "v2"} else None

            rollout = await self.wait_for("both builds in the rollout list", both_listed)
            assert (rollout.namespace, rollout.task_queue, rollout.stale_after_seconds) == (
                "default", queue, 90), rollout
            for cohort in rollout.build_ids:
                assert cohort.rollout_status == "active" and cohort.runtimes == ["python"], cohort
                assert cohort.drain_intent == "active" and not cohort.new_start_selected, cohort
                assert cohort.first_seen_at and cohort.last_heartbeat_at, cohort
                # Each build's worker fingerprints build_probe once: no conflict.
                assert cohort.workflow_definition_fingerprint_count == 1, cohort
                assert cohort.workflow_definition_fingerprint_conflicts == [], cohort

            drained = await self.client.drain_task_queue_build_id(queue, "v1")
            assert (drained.build_id, drained.drain_intent) == ("v1", "draining"), drained
            assert drained.drained_at, drained
            again = await self.client.drain_task_queue_build_id(queue, "v1")
            assert again.drained_at == drained.drained_at, (again, drained)
            listed = await self.client.list_task_queue_build_ids(queue)
            v1 = next(c for c in listed.build_ids if c.build_id == "v1")
            assert (v1.rollout_status, v1.draining_worker_count) == ("draining", 1), v1
            # The drained build's worker reports draining, the other active.
            for build, expected in (("v1", "draining"), ("v2", "active")):
                seen = await self.client.describe_worker(f"conformance-{build}-{protocol}-{os.getpid()}")
                assert seen.status == expected, (build, seen)
            drained_list = await self.client.list_workers(task_queue=queue, status="draining")
            drained_ids = [w.worker_id for w in drained_list.workers]
            assert drained_ids == [f"conformance-v1-{protocol}-{os.getpid()}"], drained_ids
            while_drained = await builds_of(3)
            assert while_drained == ["v2", "v2", "v2"], while_drained

            resumed = await self.client.resume_task_queue_build_id(queue, "v1")
            assert (resumed.drain_intent, resumed.drained_at) == ("active", None), resumed
            promoted = await self.client.promote_task_queue_build_id(queue, "v1")
            assert promoted.new_start_selected and promoted.promoted_at, promoted
            pinned = await builds_of(3)
            assert pinned == ["v1", "v1", "v1"], pinned

            await self.client.promote_task_queue_build_id(queue, "v2")
            back = await self.client.promote_task_queue_build_id(queue, "v1")
            assert back.new_start_selected, back
            listed = await self.client.list_task_queue_build_ids(queue)
            by_build = {c.build_id: c for c in listed.build_ids}
            assert by_build["v1"].new_start_selected and not by_build["v2"].new_start_selected, listed
            assert by_build["v2"].rolled_back_at, by_build["v2"]
            for task in running:
                if task.done():
                    raise AssertionError(f"a build's worker stopped: {task.exception()!r}")
        finally:
            for w in workers:
                await w.stop()
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        return (f"while v1 drained: {while_drained}; with v1 promoted: {pinned}; "
                "v2 rolled back by v1's second promotion")

    async def history_export(self) -> str:
        """export_history's bundle passes the SDK's own offline verifier
        (schema, sections, event order, the sha256 checksum over its
        canonical JSON) and carries the whole history."""
        wid = new_id("export")
        handle = await self.client.start_workflow(
            workflow_type="journey", task_queue=QUEUE, workflow_id=wid, input=["export"],
            memo={"note": "café ☕", "ratio": 0.1, "big": 1.5e20},
        )

        async def waiting():
            return "ConditionWaitOpened" in await self.history_types(wid, handle.run_id)

        await self.wait_for("the workflow to wait for approval", waiting)
        await self.client.signal_workflow(wid, "approve", args=["émile"])
        await self.client.get_result(handle, timeout=30)
        bundle = await self.client.export_history(wid, handle.run_id)
        report = verify_bundle(bundle)
        assert report["status"] == "ok", report
        assert report["integrity"]["checksum_matches"] is True, report["integrity"]
        types = await self.history_types(wid, handle.run_id)
        assert [e["type"] for e in bundle["history_events"]] == types, bundle["history_events"]
        assert bundle["workflow"]["instance_id"] == wid and bundle["workflow"]["run_id"] == handle.run_id
        # Non-ASCII text and floats go through the canonical form too.
        assert bundle["workflow"]["memo"] == {"note": "café ☕", "ratio": 0.1, "big": 1.5e20}, bundle["workflow"]
        tampered = json.loads(json.dumps(bundle))
        tampered["history_events"][-1]["type"] = "WorkflowFailed"
        refused = verify_bundle(tampered)
        assert refused["status"] == "failed", refused
        assert "integrity.checksum_mismatch" in refused["summary"]["findings_by_rule"], refused
        return f"{len(types)} events exported; the verifier says ok, and failed once tampered with"

    async def failed_redrivable(self, wid: str):
        """Starts a `redrivable` run as `wid` and waits for it to fail at its
        second activity (unavailable); its handle."""
        handle = await self.client.start_workflow(
            workflow_type="redrivable", task_queue=QUEUE, workflow_id=wid, input=[wid]
        )
        try:
            await self.client.get_result(handle, timeout=30)
            raise AssertionError("the run should have failed at its second activity")
        except WorkflowFailed as failed:
            assert "unavailable" in str(failed), failed
        return handle

    async def redrive(self) -> str:
        """A run whose second activity fails is redriven: the successor
        reuses the first activity's recorded result (it does not run again)
        and runs only the failed step, which now succeeds."""
        wid = new_id("redrive")
        handle = await self.failed_redrivable(wid)
        assert (redrive_calls("redrive_first", wid), redrive_calls("redrive_second", wid)) == (1, 1)
        history = await self.client.get_history(wid, handle.run_id, page_size=1000)
        failure = history["events"][-1]
        assert failure["event_type"] == "WorkflowFailed", failure
        assert failure["payload"]["failed_step_sequence"] == 2, failure
        heal_redrive(wid)
        redriven = await handle.redrive(request_id=f"{wid}-once")
        assert redriven.outcome == "redriven" and redriven.command_status == "accepted", redriven
        successor = redriven.run_id
        assert successor and successor != handle.run_id, redriven
        assert redriven.raw["continued_from_run_id"] == handle.run_id, redriven.raw
        assert redriven.raw["resume_step_sequence"] == 2, redriven.raw
        # A retry with the same request id answers the same successor.
        again = await self.client.redrive_workflow(wid, handle.run_id, request_id=f"{wid}-once")
        assert again.run_id == successor, (again, redriven)
        result = await self.client.get_result(
            self.client.get_workflow_handle(wid, run_id=successor), timeout=30
        )
        assert result == {"first": f"first of {wid}", "second": f"first of {wid}, then the second"}, result
        # The first activity ran once in all; the second once per run.
        calls = (redrive_calls("redrive_first", wid), redrive_calls("redrive_second", wid))
        assert calls == (1, 2), calls
        described = await self.describe_raw(wid)
        assert described["run_id"] == successor and described["status"] == "completed", described
        assert described["continued_from_run_id"] == handle.run_id, described
        assert described["recovery_kind"] == "redrive" and described["resume_step_sequence"] == 2, described
        events = (await self.client.get_history(wid, successor, page_size=1000))["events"]
        reused = [e["payload"] for e in events if e["event_type"] == "ActivityCompleted"][0]
        assert reused["reused_from_run_id"] == handle.run_id and reused["sequence"] == 1, reused
        # A completed run is not redriven: 409 run_not_failed, nothing written.
        refused = await self.http.post(f"/api/workflows/{wid}/runs/{successor}/redrive", json={})
        assert refused.status_code == 409 and refused.json()["reason"] == "run_not_failed", refused.text
        runs = (await self.http.get(f"/api/workflows/{wid}/runs")).json()
        assert runs["run_count"] == 2, runs
        # An archived failed run is read-only: 409 run_archived, nothing written.
        archived_id = new_id("redrive-archived")
        archived = await self.failed_redrivable(archived_id)
        await self.client.archive_workflow(archived_id, reason="conformance")
        try:
            await archived.redrive(request_id=f"{archived_id}-once")
            raise AssertionError("an archived run was redriven")
        except ServerError as error:
            assert error.status == 409 and error.reason() == "run_archived", error
        runs = (await self.http.get(f"/api/workflows/{archived_id}/runs")).json()
        assert runs["run_count"] == 1, runs
        return (f"run {handle.run_id} failed at step 2; successor {successor} completed with "
                f"{len(events)} events, the first activity run {calls[0]} time(s); an archived "
                "failed run was refused with run_archived")

    SCENARIOS = [
        "activity_timer_signal_condition_query",
        "update_wait_for_completed",
        "update_validator",
        "webhook_start_signal_update",
        "cancel",
        "terminate",
        "activity_retry",
        "activity_start_to_close_timeout",
        "run_timeout",
        "workflow_task_failure_then_retry",
        "fan_out_past_pending_activity_count",
        "signal_past_pending_signal_count",
        "signal_during_task",
        "schedules",
        "search_attribute_upserts",
        "search_attribute_upsert_unregistered",
        "workflow_output_stream",
        "large_payload_through_external_storage",
        "nexus_operation",
        "nexus_from_workflow",
        "nexus_cross_namespace",
        "nexus_start_options",
        "local_activity",
        "version_marker",
        "continue_as_new_chain",
        "child_workflows",
        "memo_upserts",
        "message_stream",
        "message_stream_continue_as_new",
        "message_stream_carried_before_wait",
        "message_stream_appended_before_first_task",
        "sticky_execution",
        "worker_session",
        "durable_selection",
        "cooperative_cancellation",
        "cooperative_cancellation_waits",
        "cooperative_activity_abandon",
        "prepared_local_activity",
        "prepared_local_cancellation",
        "prepared_local_cancellation_policies",
        "worker_roster",
        "task_queue_visibility",
        "history_export",
        "redrive",
        "build_id_rollout",
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
    only = [n for n in os.environ.get("DW_CONFORMANCE_SCENARIOS", "").split(",") if n]
    unknown = [n for n in only if n not in Suite.SCENARIOS]
    if unknown:
        print(f"DW_CONFORMANCE_SCENARIOS: unknown scenario(s) {unknown}; known: {Suite.SCENARIOS}")
        return 2
    scenarios = only or Suite.SCENARIOS
    for name in scenarios:
        started = time.monotonic()
        try:
            scenario = getattr(suite, name)
            detail = await asyncio.wait_for(scenario(), timeout=getattr(scenario, "timeout", SCENARIO_TIMEOUT))
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
    total = len(scenarios)
    print(f"conformance (protocol {protocol}): {total - failures}/{total} scenarios passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1])))
