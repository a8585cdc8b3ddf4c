"""Workflows and activities the conformance suite runs on dwserver.

Written against the public API of the published ``durable-workflow`` SDK
only: nothing here knows it talks to dwserver rather than any other
Durable Workflow server.
"""

from __future__ import annotations

import threading
import time

from durable_workflow import WorkerSessionOptions, WorkflowStreamAppendItem, activity, workflow
from durable_workflow.errors import (
    ActivityFailed,
    ChildWorkflowFailed,
    DurableOperationCancelled,
    NexusOperationFailed,
    WorkflowCancelled,
)
from durable_workflow.workflow import ActivityRetryPolicy

QUEUE = "conformance"
# The queue of the cooperative-cancellation worker (protocol 1.20 only).
COOPERATIVE_QUEUE = "conformance-cooperative"


@activity.defn(name="greet")
def greet(name: str) -> str:
    return f"hello, {name}"


_flaky_attempts: dict[str, int] = {}
_flaky_lock = threading.Lock()


@activity.defn(name="flaky")
def flaky(key: str) -> str:
    """Fails on its first attempt for each key, succeeds on the next."""
    with _flaky_lock:
        _flaky_attempts[key] = _flaky_attempts.get(key, 0) + 1
        attempt = _flaky_attempts[key]
    if attempt == 1:
        raise RuntimeError(f"transient failure of {key} (attempt {attempt})")
    return f"{key} succeeded on attempt {attempt}"


@activity.defn(name="noop")
def noop(i: int) -> int:
    return i


@activity.defn(name="reverse")
def reverse(text: str) -> str:
    return text[::-1]


@activity.defn(name="slow")
def slow(seconds: float) -> str:
    """Overruns any start-to-close timeout shorter than `seconds`."""
    time.sleep(seconds)
    return "finished late"


# Holds of the signal_during_task scenario: the workflow task that takes a
# hold tells the suite it is running (`entered`) and runs on only once the
# suite has signalled the workflow (`release`), so those signals arrive
# while that task is leased. A hold is taken once; replays run straight on.
_holds: dict[str, tuple[threading.Event, threading.Event]] = {}
_holds_lock = threading.Lock()


def arm_hold(key: str) -> tuple[threading.Event, threading.Event]:
    with _holds_lock:
        _holds[key] = (threading.Event(), threading.Event())
        return _holds[key]


def _take_hold(key: str) -> None:
    with _holds_lock:
        hold = _holds.pop(key, None)
    if hold is not None:
        entered, release = hold
        entered.set()
        release.wait(60)


@workflow.defn(name="journey")
class Journey:
    """An activity, a timer, then a signal-driven condition wait; queryable."""

    def __init__(self) -> None:
        self.approved_by: str | None = None
        self.stage = "started"

    @workflow.signal("approve")
    def approve(self, who: str) -> None:
        self.approved_by = who

    @workflow.query("stage")
    def current_stage(self) -> str:
        return self.stage

    def run(self, ctx, name):
        greeting = yield ctx.schedule_activity("greet", [name])
        self.stage = "greeted"
        yield ctx.start_timer(1)
        self.stage = "waiting_for_approval"
        yield ctx.wait_condition(lambda: self.approved_by is not None, key="approved")
        self.stage = "approved"
        return {"greeting": greeting, "approved_by": self.approved_by}


@workflow.defn(name="counter")
class Counter:
    """Waits until an update sets a limit, then completes with it."""

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

    def run(self, ctx):
        yield ctx.wait_condition(lambda: self.closed, key="closed")
        return self.total


VALIDATOR_QUEUE = "conformance-validators"


@workflow.defn(name="guarded_counter")
class GuardedCounter:
    """A counter whose deposits a validator checks before the server
    accepts them: positive amounts only, and never past a total of 100 (a
    check on the workflow's state, which the validator sees by replay)."""

    def __init__(self) -> None:
        self.total = 0
        self.closed = False

    @workflow.update("deposit")
    def deposit(self, amount: int) -> int:
        self.total += amount
        return self.total

    @deposit.validator
    def validate_deposit(self, amount: int) -> None:
        if not isinstance(amount, int) or amount <= 0:
            raise ValueError(f"amount must be a positive integer, got {amount!r}")
        if self.total + amount > 100:
            raise ValueError(f"a deposit of {amount} would take the total past 100 (it is {self.total})")

    @workflow.signal("close")
    def close(self) -> None:
        self.closed = True

    def run(self, ctx):
        yield ctx.wait_condition(lambda: self.closed, key="closed")
        return self.total


@workflow.defn(name="sleeper")
class Sleeper:
    """Sleeps for an hour: the scenarios end it by cancel or terminate
    (left alone, the SDK's default 600 s run timeout would end it first)."""

    def run(self, ctx):
        yield ctx.start_timer(3600)
        return "woke up"


@workflow.defn(name="retrying")
class Retrying:
    """An activity that fails once and succeeds on its retry."""

    def run(self, ctx, key):
        result = yield ctx.schedule_activity(
            "flaky",
            [key],
            retry_policy=ActivityRetryPolicy(max_attempts=3, backoff_seconds=[1, 1]),
            start_to_close_timeout=30,
        )
        return result


@workflow.defn(name="impatient")
class Impatient:
    """An activity that overruns its start-to-close timeout on both attempts."""

    def run(self, ctx, seconds):
        try:
            yield ctx.schedule_activity(
                "slow",
                [seconds],
                retry_policy=ActivityRetryPolicy(max_attempts=2, backoff_seconds=[0]),
                start_to_close_timeout=1,
            )
        except ActivityFailed as failed:
            return {"message": str(failed), "category": failed.failure_category}
        return "the activity was not timed out"


_shaky_attempts: dict[str, int] = {}


@workflow.defn(name="shaky")
class Shaky:
    """Its first workflow task schedules an activity with a cancellation
    policy, which needs the cooperative cancellation capability that the
    suite's main worker does not declare, so the worker fails that task; the
    retry takes the supported path and replays over the recorded task
    failure."""

    def run(self, ctx, key):
        with _flaky_lock:
            _shaky_attempts[key] = _shaky_attempts.get(key, 0) + 1
            attempt = _shaky_attempts[key]
        if attempt == 1:
            return (yield ctx.schedule_activity("greet", [key], cancellation_policy="try_cancel"))
        return (yield ctx.schedule_activity("greet", [key]))


@workflow.defn(name="fan_out")
class FanOut:
    """Schedules `width` activities at once."""

    def run(self, ctx, width):
        results = yield [ctx.schedule_activity("noop", [i]) for i in range(width)]
        return sum(results)


@workflow.defn(name="quick")
class Quick:
    """One activity: the unit of the throughput measurement."""

    def run(self, ctx, name):
        return (yield ctx.schedule_activity("greet", [name]))


@workflow.defn(name="tag_unregistered")
class TagUnregistered:
    """Upserts an attribute the scenario registers only after the first
    workflow task was refused for it, then greets."""

    def run(self, ctx, name, value):
        yield ctx.upsert_search_attributes({name: value})
        return (yield ctx.schedule_activity("greet", [value]))


@workflow.defn(name="tagger")
class Tagger:
    """Upserts search attributes around an activity: sets two, then
    changes one and removes the other."""

    def run(self, ctx, stage):
        yield ctx.upsert_search_attributes({"ConformanceStage": stage, "ConformanceStep": 1})
        greeting = yield ctx.schedule_activity("greet", [stage])
        yield ctx.upsert_search_attributes({"ConformanceStep": 2, "ConformanceStage": None})
        return greeting



@workflow.defn(name="streamer")
class Streamer:
    """Publishes `count` steps to its `progress` output stream, waits for
    the `more` signal, publishes a final step and closes the stream."""

    def __init__(self) -> None:
        self.more = False

    @workflow.signal("more")
    def on_more(self) -> None:
        self.more = True

    def run(self, ctx, count):
        yield ctx.append_workflow_stream(
            "progress", [WorkflowStreamAppendItem(payload={"step": i}) for i in range(count)]
        )
        yield ctx.wait_condition(lambda: self.more, key="more")
        yield ctx.append_workflow_stream(
            "progress", [WorkflowStreamAppendItem(payload={"step": count}, item_type="final")]
        )
        yield ctx.close_workflow_stream("progress", retention_seconds=600)
        return count + 1


@workflow.defn(name="mirror")
class Mirror:
    """Passes its (large) input through an activity and returns both."""

    def run(self, ctx, text):
        reversed_text = yield ctx.schedule_activity("reverse", [text])
        return {"length": len(text), "reversed": reversed_text}


_local_runs: dict[str, int] = {}


@activity.defn(name="local_double")
def local_double(key: str, value: int) -> int:
    """Counts its runs per key: a local activity must run once, not on replay."""
    with _flaky_lock:
        _local_runs[key] = _local_runs.get(key, 0) + 1
    return value * 2


def local_runs(key: str) -> int:
    with _flaky_lock:
        return _local_runs.get(key, 0)


@workflow.defn(name="local_then_timer")
class LocalThenTimer:
    """A local activity, then a timer: the timer's task replays the local
    activity from its recorded marker instead of running it again."""

    def run(self, ctx, key):
        doubled = yield ctx.local_activity("local_double", [key, 21])
        yield ctx.start_timer(1)
        return doubled


@workflow.defn(name="versioned")
class Versioned:
    """get_version and patched record their decisions; the activity's task
    replays them from VersionMarkerRecorded."""

    def run(self, ctx):
        version = yield ctx.get_version("new-pricing", -1, 2)
        patched = yield ctx.patched("fix-rounding")
        yield ctx.schedule_activity("noop", [1])
        return {"version": version, "patched": patched}


@workflow.defn(name="chain")
class Chain:
    """One activity per run, then continue-as-new with one link fewer: a
    chain of runs of one workflow id, each with fresh history, the last one
    completing with the trail of inputs every run received."""

    def run(self, ctx, remaining, trail):
        seen = yield ctx.schedule_activity("noop", [remaining])
        trail = [*trail, seen]
        if remaining > 0:
            return ctx.continue_as_new(remaining - 1, trail)
        return {"links": len(trail), "trail": trail}


@workflow.defn(name="kid")
class Kid:
    """A child: greets through an activity, or fails when asked to."""

    def run(self, ctx, name):
        if name == "fail":
            raise ValueError("the kid refused")
        greeting = yield ctx.schedule_activity("greet", [name])
        return greeting


@workflow.defn(name="family")
class Family:
    """Starts a child and awaits its result, then a child that fails and
    catches its ChildWorkflowFailed."""

    def run(self, ctx, name):
        greeting = yield ctx.start_child_workflow(
            "kid", [name], task_queue=QUEUE, parent_close_policy="terminate"
        )
        try:
            yield ctx.start_child_workflow("kid", ["fail"], task_queue=QUEUE)
            failed = None
        except ChildWorkflowFailed as exc:
            failed = {"message": str(exc), "child_workflow_type": exc.child_workflow_type,
                      "child_workflow_run_id": exc.child_workflow_run_id}
        return {"greeting": greeting, "failed": failed}


@workflow.defn(name="memo_keeper")
class MemoKeeper:
    """Upserts its memo around an activity: sets two entries, then changes
    one and removes the other (the activity's task replays the first)."""

    def run(self, ctx, name):
        yield ctx.upsert_memo({"stage": "started", "customer": name})
        greeting = yield ctx.schedule_activity("greet", [name])
        yield ctx.upsert_memo({"stage": "greeted", "customer": None})
        return greeting


@workflow.defn(name="inbox_reader")
class InboxReader:
    """Reads `count` messages from its input stream "orders" in batches
    (ctx.message_stream: each message arrives as a stream delivery); a
    message on another stream it never reads must not disturb it."""

    def run(self, ctx, count):
        stream = ctx.message_stream("orders")
        received = []
        while len(received) < count:
            batch = yield from stream.receive(10)
            received.extend({"id": m.message_id, "position": m.position, "arguments": m.arguments}
                            for m in batch)
        return received


@workflow.defn(name="inbox_chain")
class InboxChain:
    """Reads one message of its stream, then continues as new; the next run
    starts from the stream's cursor and reads two more."""

    def run(self, ctx, seen):
        stream = ctx.message_stream("orders")
        if not seen:
            first = yield from stream.receive_one()
            return ctx.continue_as_new([first.message_id])
        while len(seen) < 3:
            batch = yield from stream.receive(10)
            seen = [*seen, *([m.message_id, m.position] for m in batch)]
        return seen


@workflow.defn(name="inbox_carry")
class InboxCarry:
    """Reads one message, then continues as new on the signal `carry` with
    more messages queued; the next run reads the carried messages before it
    ever waits, then waits for one more, so its replay meets deliveries
    recorded at its start."""

    def __init__(self) -> None:
        self.carry = False

    @workflow.signal("carry")
    def carry_on(self) -> None:
        self.carry = True

    def run(self, ctx, seen):
        stream = ctx.message_stream("orders")
        if not seen:
            first = yield from stream.receive_one()
            yield ctx.wait_condition(lambda: self.carry, key="carry")
            return ctx.continue_as_new([first.message_id])
        while len(seen) < 4:
            batch = yield from stream.receive(10)
            seen = [*seen, *(m.message_id for m in batch)]
        return seen


@workflow.defn(name="inbox_early")
class InboxEarly:
    """Reads three messages from "orders" in batches; the first two are
    appended before any worker runs, so its first batch needs no wait, and
    it waits only for the third."""

    def run(self, ctx, _):
        stream = ctx.message_stream("orders")
        seen = []
        while len(seen) < 3:
            batch = yield from stream.receive(10)
            seen = [*seen, *(m.message_id for m in batch)]
        return seen


@workflow.defn(name="nexus_caller")
class NexusCaller:
    """Calls the catalogued conformance/greetings/greet operation (bound to
    the `quick` workflow) from workflow code and returns its result; then
    calls an operation the catalog does not have and returns the failure,
    then starts the operation in async mode and returns at its admission."""

    def run(self, ctx, name):
        greeted = yield ctx.call_nexus_service("conformance", "greetings", "greet", [name])
        try:
            yield ctx.call_nexus_service("conformance", "greetings", "vanish", [name])
            missing = None
        except NexusOperationFailed as exc:
            missing = str(exc)
        # The async form resumes once the call is admitted.
        admitted = yield ctx.start_nexus_operation("conformance", "greetings", "greet", [name])
        return {"greeting": greeted.result, "missing": missing, "admitted": admitted.status}


PEER_NAMESPACE = "conformance-peer"
PEER_QUEUE = "conformance-peer"


@workflow.defn(name="nexus_peer_caller")
class NexusPeerCaller:
    """Calls the peer/greetings/greet operation of another namespace's
    catalog (PEER_NAMESPACE, bound to the `quick` workflow there) and returns
    its result; then calls peer/greetings/guarded, whose allow list leaves
    this namespace out, and returns the refusal."""

    def run(self, ctx, name):
        greeted = yield ctx.call_nexus_service(
            "peer", "greetings", "greet", [name], target_namespace=PEER_NAMESPACE
        )
        try:
            yield ctx.call_nexus_service(
                "peer", "greetings", "guarded", [name], target_namespace=PEER_NAMESPACE
            )
            refused = None
        except NexusOperationFailed as exc:
            refused = str(exc)
        return {"greeting": greeted.result, "refused": refused}


@workflow.defn(name="nexus_start_options")
class NexusStartOptions:
    """Calls conformance/greetings/greet with the start options of its
    workflow: the workflow id, memo, search attributes, business key and
    queue connection (the server's queue driver, its one connection); then
    again with the same id once that run has ended (a new run)."""

    def run(self, ctx, target_id, attribute, connection):
        options = {
            "target_workflow_instance_id": target_id,
            "memo": {"order": 7},
            "search_attributes": {attribute: "eu"},
            "business_key": "order-7",
            "connection": connection,
        }
        first = yield ctx.call_nexus_service("conformance", "greetings", "greet", ["options"], **options)
        again = yield ctx.call_nexus_service(
            "conformance", "greetings", "greet", ["again"],
            target_workflow_instance_id=target_id, duplicate_start_policy="reject_duplicate",
        )
        return {"first": first.result, "again": again.result}


SESSION_QUEUE = "conformance-sessions"


@activity.defn(name="session_whoami")
def session_whoami(step: int) -> str:
    """The worker that ran this step (a session routes every step to one)."""
    return activity.context().info.worker_id


@workflow.defn(name="session_steps")
class SessionSteps:
    """Three activities in one worker session that needs a "gpu" worker."""

    def run(self, ctx, session_id):
        options = WorkerSessionOptions(session_id=session_id, requirements=("gpu",))
        ran = []
        for step in range(3):
            who = yield ctx.schedule_activity("session_whoami", [step], worker_session=options)
            ran.append(who)
        return ran


EARLY_QUEUE = "conformance-early-inbox"
STICKY_QUEUE = "conformance-sticky"


@workflow.defn(name="sticky_steps")
class StickySteps:
    """An activity, a timer, another activity: four workflow tasks, the last
    three of which a sticky worker resumes from its cached history."""

    def run(self, ctx, name):
        greeting = yield ctx.schedule_activity("greet", [name])
        yield ctx.start_timer(1)
        reversed_text = yield ctx.schedule_activity("reverse", [greeting])
        return reversed_text


@workflow.defn(name="selector")
class Selector:
    """A durable selection: an activity against an hour-long timer. The
    server records the activity as the winner; the workflow cancels the
    timer and awaits it (DurableOperationCancelled)."""

    def run(self, ctx, name):
        selected = yield ctx.select({
            "greeting": ctx.schedule_activity("greet", [name]),
            "deadline": ctx.start_timer(3600),
        })
        loser = selected.remaining()["deadline"]
        yield loser.cancel()
        try:
            yield loser.await_result()
            awaited = "not cancelled"
        except DurableOperationCancelled as exc:
            awaited = f"cancelled {exc.operation_kind}"
        return {"winner": selected.key, "value": selected.result(), "loser": awaited}


@workflow.defn(name="cooperative_cleanup")
class CooperativeCleanup:
    """Waits an hour; a cooperative cancellation delivered at that timer
    raises WorkflowCancelled there, the workflow runs a cleanup activity and
    lets the cancellation end the run (which closes as cancelled)."""

    def run(self, ctx, name):
        try:
            yield ctx.start_timer(3600)
        except WorkflowCancelled:
            yield ctx.schedule_activity("greet", [f"cleanup of {name}"])
            raise
        return "never cancelled"


@activity.defn(name="linger_marked")
def linger_marked(marker: str, seconds: float) -> str:
    """Marks that its attempt runs (a file the suite waits for), then runs
    `seconds`: a cooperative worker stops it when its activity is cancelled."""
    with open(marker, "w", encoding="utf-8") as file:
        file.write("running")
    time.sleep(seconds)
    return "lingered"


@activity.defn(name="linger_then_mark")
def linger_then_mark(marker: str, seconds: float) -> str:
    """Writes `running` to `marker`, runs `seconds`, then appends
    `finished`: the suite sees an abandoned attempt run to its end."""
    with open(marker, "w", encoding="utf-8") as file:
        file.write("running\n")
    time.sleep(seconds)
    with open(marker, "a", encoding="utf-8") as file:
        file.write("finished\n")
    return "lingered"


@workflow.defn(name="cooperative_activity_abandon")
class CooperativeActivityAbandon:
    """Waits on an activity whose cancellation_policy is abandon: a
    cooperative cancellation is delivered at it at once, the workflow ends
    cancelled, and the activity runs on to its end."""

    def run(self, ctx, marker, seconds):
        yield ctx.schedule_activity(
            "linger_then_mark", [marker, seconds], start_to_close_timeout=120,
            schedule_to_close_timeout=180, cancellation_policy="abandon",
        )
        return "never cancelled"


@workflow.defn(name="cooperative_waiting_child")
class CooperativeWaitingChild:
    """A child that waits an hour; its own cancellation (the parent's
    cascade) runs a cleanup activity before it ends as cancelled."""

    def run(self, ctx, name):
        try:
            yield ctx.start_timer(3600)
        except WorkflowCancelled:
            yield ctx.schedule_activity("greet", [f"child cleanup of {name}"])
            raise
        return "never cancelled"


@workflow.defn(name="cooperative_child_parent")
class CooperativeChildParent:
    """Waits on a child whose cancellation_policy waits for its cleanup: a
    cancellation delivered there parks until the child has ended, then the
    parent cleans up too."""

    def run(self, ctx, name):
        try:
            yield ctx.start_child_workflow(
                "cooperative_waiting_child", [name], task_queue=COOPERATIVE_QUEUE,
                cancellation_policy="wait_cancellation_completed",
            )
        except WorkflowCancelled:
            yield ctx.schedule_activity("greet", [f"parent cleanup of {name}"])
            raise
        return "never cancelled"


@workflow.defn(name="cooperative_nexus_caller")
class CooperativeNexusCaller:
    """Waits on a Nexus call whose operation runs cooperative_waiting_child:
    a cancellation delivered at the call parks until the operation's run has
    cleaned up and ended, then the caller cleans up too."""

    def run(self, ctx, name):
        try:
            yield ctx.call_nexus_service("conformance", "cooperative", "linger", [name])
        except WorkflowCancelled:
            yield ctx.schedule_activity("greet", [f"caller cleanup of {name}"])
            raise
        return "never cancelled"


@workflow.defn(name="cooperative_activity_wait")
class CooperativeActivityWait:
    """Waits on a long activity whose cancellation_policy waits for its
    cleanup: a cancellation delivered there parks until the attempt has
    stopped its callback (acknowledge-cancellation), then cleans up."""

    def run(self, ctx, marker):
        try:
            yield ctx.schedule_activity(
                "linger_marked", [marker, 300], start_to_close_timeout=600,
                cancellation_policy="wait_cancellation_completed",
            )
        except WorkflowCancelled:
            yield ctx.schedule_activity("greet", ["after the activity stopped"])
            raise
        return "never cancelled"


PREPARED_QUEUE = "conformance-prepared-local"


@activity.defn(name="prepared_double")
def prepared_double(ledger: str, value: int) -> int:
    """Appends one line to `ledger` per run: a prepared local callback runs
    in its own supervised process, so its runs are counted in a file."""
    with open(ledger, "a", encoding="utf-8") as out:
        out.write("ran\n")
    return value * 2


@activity.defn(name="prepared_pause")
def prepared_pause(ledger: str, seconds: float) -> str:
    """Writes `ledger` when it starts, then takes `seconds`."""
    with open(ledger, "a", encoding="utf-8") as out:
        out.write("started\n")
    time.sleep(seconds)
    return "paused"


@workflow.defn(name="prepared_local_cancelled")
class PreparedLocalCancelled:
    """A prepared local call that a cooperative cancellation request finds
    running: the callback is stopped, the request delivered at the call, and
    the workflow cleans up with an activity and a shielded local call."""

    def run(self, ctx, ledger):
        try:
            paused = yield ctx.local_activity("prepared_pause", [ledger, 30])
            yield ctx.start_timer(3600)
        except WorkflowCancelled:
            yield ctx.schedule_activity("greet", ["cleanup"])
            with ctx.cancellation_shield():
                yield ctx.local_activity("prepared_double", [f"{ledger}-cleanup", 1])
            raise
        return paused


@workflow.defn(name="prepared_local_policy")
class PreparedLocalPolicy:
    """A prepared local call with an explicit cancellation policy that a
    cooperative cancellation request finds running; the workflow cleans up
    with an all() group of two local calls in a cancellation shield."""

    def run(self, ctx, ledger, policy):
        try:
            paused = yield ctx.local_activity("prepared_pause", [ledger, 30], cancellation_policy=policy)
            yield ctx.start_timer(3600)
        except WorkflowCancelled:
            with ctx.cancellation_shield():
                yield [ctx.local_activity("prepared_double", [f"{ledger}-cleanup-a", 1]),
                       ctx.local_activity("prepared_double", [f"{ledger}-cleanup-b", 2])]
            raise
        return paused


@workflow.defn(name="prepared_local_policy_group")
class PreparedLocalPolicyGroup:
    """An all() group of two prepared local calls, one per policy, that a
    cooperative cancellation request finds running: both callbacks stop and
    the request is delivered at the group."""

    def run(self, ctx, ledger):
        try:
            paused = yield [
                ctx.local_activity("prepared_pause", [f"{ledger}-wait", 30],
                                   cancellation_policy="wait_cancellation_completed"),
                ctx.local_activity("prepared_pause", [f"{ledger}-try", 30], cancellation_policy="try_cancel"),
            ]
        except WorkflowCancelled:
            with ctx.cancellation_shield():
                yield ctx.local_activity("prepared_double", [f"{ledger}-cleanup", 1])
            raise
        return paused


@workflow.defn(name="prepared_local")
class PreparedLocal:
    """Prepared local activities (protocol 1.20): a side effect authored
    before the first local call (checkpointed on the claim), a local call
    admitted before it runs, an all() group of a local call and an
    ordinary activity (checkpoint-group), then a timer whose task replays
    both local results from their Activity* events."""

    def run(self, ctx, ledger):
        base = yield ctx.side_effect(lambda: 1)
        doubled = yield ctx.local_activity("prepared_double", [ledger, 20 + base])
        grouped = yield [ctx.local_activity("prepared_double", [f"{ledger}-group", 5]),
                         ctx.schedule_activity("greet", ["group"])]
        yield ctx.start_timer(1)
        return {"doubled": doubled, "grouped": grouped}


@workflow.defn(name="signal_during_task")
class SignalDuringTask:
    """Waits for a first signal, then for three in all; which second wait
    it opens depends on how many signals its task has seen. The task the
    first signal wakes holds (see `_take_hold`) while the suite sends the
    second, so a replay that applies that signal early takes the other branch."""

    def __init__(self) -> None:
        self.items: list[str] = []

    @workflow.signal("item")
    def item(self, value: str) -> None:
        self.items.append(value)

    def run(self, ctx, hold_key):
        yield ctx.wait_condition(lambda: len(self.items) >= 1, key="first")
        _take_hold(hold_key)
        if len(self.items) >= 2:
            yield ctx.wait_condition(lambda: len(self.items) >= 4, key="rest-seen-early")
        else:
            yield ctx.wait_condition(lambda: len(self.items) >= 3, key="rest")
        return self.items


_redrive_calls: dict[tuple[str, str], int] = {}
_redrive_healed: set[str] = set()


def _count_redrive_call(activity_name: str, key: str) -> None:
    with _flaky_lock:
        _redrive_calls[(activity_name, key)] = _redrive_calls.get((activity_name, key), 0) + 1


def redrive_calls(activity_name: str, key: str) -> int:
    with _flaky_lock:
        return _redrive_calls.get((activity_name, key), 0)


def heal_redrive(key: str) -> None:
    """From now on `redrive_second` succeeds for `key`."""
    with _flaky_lock:
        _redrive_healed.add(key)


@activity.defn(name="redrive_first")
def redrive_first(key: str) -> str:
    _count_redrive_call("redrive_first", key)
    return f"first of {key}"


@activity.defn(name="redrive_second")
def redrive_second(key: str, first: str) -> str:
    """Fails for `key` until `heal_redrive(key)`."""
    _count_redrive_call("redrive_second", key)
    with _flaky_lock:
        healed = key in _redrive_healed
    if not healed:
        raise RuntimeError(f"the second step of {key} is unavailable")
    return f"{first}, then the second"


@workflow.defn(name="redrivable")
class Redrivable:
    """Two activities; the second's failure (one attempt) fails the run. A
    redrive resumes at the second with the first's recorded result."""

    def run(self, ctx, key):
        once = ActivityRetryPolicy(max_attempts=1)
        first = yield ctx.schedule_activity("redrive_first", [key], retry_policy=once)
        second = yield ctx.schedule_activity("redrive_second", [key, first], retry_policy=once)
        return {"first": first, "second": second}


BUILD_QUEUE = "conformance-builds"


@workflow.defn(name="build_probe")
class BuildProbeV1:
    """Build v1 of a workflow two worker builds serve on one queue: it
    names its build, so the scenario sees which cohort ran the run, and the
    worker that ran its second activity (the run's cohort's, too)."""

    def run(self, ctx, name):
        greeting = yield ctx.schedule_activity("greet", [name])
        ran_on = yield ctx.schedule_activity("session_whoami", [1])
        return {"build": "v1", "greeting": greeting, "activity_worker": ran_on}


@workflow.defn(name="build_probe")
class BuildProbeV2:
    """Build v2 of ``build_probe``."""

    def run(self, ctx, name):
        greeting = yield ctx.schedule_activity("greet", [name])
        ran_on = yield ctx.schedule_activity("session_whoami", [1])
        return {"build": "v2", "greeting": greeting, "activity_worker": ran_on}


WORKFLOWS = [Journey, Counter, Sleeper, Retrying, Impatient, Shaky, FanOut, Quick, Tagger, TagUnregistered, Streamer, Mirror,
             LocalThenTimer, Versioned, Chain, Kid, Family, MemoKeeper, InboxReader,
             InboxChain, InboxCarry, NexusCaller, NexusPeerCaller, NexusStartOptions, Selector, SignalDuringTask, Redrivable]
ACTIVITIES = [greet, flaky, noop, slow, reverse, local_double, redrive_first, redrive_second]
