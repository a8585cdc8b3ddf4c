//! The scenarios: each starts one workflow of its own on a fresh task queue,
//! serves it with an SDK worker and checks the result and the history.
//! Scenarios named after a bug are its regression test.

// The SDK's error type is large; its API returns it from every workflow call.
#![allow(clippy::result_large_err)]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use durable_workflow::{
    json, wait_condition, ActivityOptions, ActivityRetryPolicy, AvroValue, ChildWorkflowOptions,
    ConditionWaitResult, Error, LocalActivityOptions, NexusServiceOptions, NexusWaitFor,
    ParallelOperation, ParallelResult, ParentClosePolicy, StickyCacheOptions, Value,
    WorkflowResultOptions,
};

use crate::harness::{check, types, Harness, Outcome};
use crate::probes::*;

type Run = fn(Harness) -> Pin<Box<dyn Future<Output = Outcome>>>;

/// One named scenario.
pub struct Scenario {
    pub name: &'static str,
    pub run: Run,
}

macro_rules! scenario {
    ($name:literal, $f:ident) => {
        Scenario {
            name: $name,
            run: |h| Box::pin($f(h)),
        }
    };
}

/// Every scenario, in the order the suite runs them.
pub fn all() -> Vec<Scenario> {
    vec![
        scenario!("activity", activity),
        scenario!("timer_then_activity", timer_then_activity),
        scenario!("join_activities_and_timer", join_activities_and_timer),
        scenario!("condition_over_signals", condition_over_signals),
        scenario!("condition_timeout", condition_timeout),
        scenario!("wait_signal", wait_signal),
        scenario!("wait_signal_buffered", wait_signal_buffered),
        scenario!("saga_compensations", saga_compensations),
        scenario!("local_activity", local_activity),
        scenario!("side_effect", side_effect),
        scenario!("version_marker", version_marker),
        scenario!("poll_capacity_backpressure", poll_capacity_backpressure),
        scenario!("continue_as_new_chain", continue_as_new_chain),
        scenario!("child_workflows", child_workflows),
        scenario!("memo_upserts", memo_upserts),
        scenario!("message_stream", message_stream),
        scenario!(
            "message_stream_continue_as_new",
            message_stream_continue_as_new
        ),
        scenario!("nexus_from_workflow", nexus_from_workflow),
        scenario!("nexus_cross_namespace", nexus_cross_namespace),
        scenario!("sticky_execution", sticky_execution),
        scenario!("sticky_execution_example", sticky_execution_example),
        scenario!("durable_selection", durable_selection),
        scenario!("worker_session", worker_session),
        scenario!("cancel_route", cancel_route),
        scenario!("cooperative_cancellation", cooperative_cancellation),
        scenario!(
            "cooperative_cancellation_waits",
            cooperative_cancellation_waits
        ),
        scenario!("cooperative_activity_abandon", cooperative_activity_abandon),
        scenario!(
            "activity_retries_and_non_retryable",
            activity_retries_and_non_retryable
        ),
        scenario!("activity_heartbeat_timeout", activity_heartbeat_timeout),
        scenario!("query_and_update_during_run", query_and_update_during_run),
        scenario!("versions_over_replays", versions_over_replays),
        scenario!("continue_as_new_with_options", continue_as_new_with_options),
        scenario!("search_attributes_listed", search_attributes_listed),
        scenario!("run_timeout", run_timeout),
        scenario!("child_terminated", child_terminated),
        scenario!("timer_loses_selection", timer_loses_selection),
        scenario!("pagination", pagination),
        scenario!("redrive", redrive),
    ]
}

fn no_retry() -> ActivityOptions {
    ActivityOptions::new()
        .retry_policy(ActivityRetryPolicy::new(1))
        .start_to_close_timeout(Duration::from_secs(30))
}

/// One activity; its result is the workflow's.
async fn activity(h: Harness) -> Outcome {
    let queue = h.unique("activity");
    let mut worker = h.worker(&queue);
    worker.register_activity("greet", |_ctx, args: Value| async move {
        Ok(json!(format!(
            "Hello, {}!",
            args[0].as_str().unwrap_or("?")
        )))
    });
    worker.register_workflow("rust.activity", |ctx, input: Value| async move {
        ctx.activity("greet", json!([input[0].clone()])).await
    });
    let handle = h
        .client
        .start_workflow("rust.activity", &queue, &queue, json!(["Rust"]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let result = h.drive(&worker, &handle, async { Ok(()) }).await?;
    check(result == json!("Hello, Rust!"), || {
        format!("result {result}")
    })
}

/// An activity after a sleep: the SDK replays the timer from `TimerFired`,
/// which must carry the `delay_seconds` its `TimerScheduled` did
/// (`timer_history_field_missing` otherwise).
async fn timer_then_activity(h: Harness) -> Outcome {
    let queue = h.unique("timer");
    let mut worker = h.worker(&queue);
    worker.register_activity(
        "after",
        |_ctx, _args: Value| async move { Ok(json!("done")) },
    );
    worker.register_workflow(
        "rust.timer_then_activity",
        |ctx, _input: Value| async move {
            ctx.sleep(Duration::from_secs(1)).await?;
            ctx.activity("after", json!([])).await
        },
    );
    let handle = h
        .client
        .start_workflow("rust.timer_then_activity", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let result = h.drive(&worker, &handle, async { Ok(()) }).await?;
    check(result == json!("done"), || format!("result {result}"))?;
    let events = h.history(&handle).await?;
    let scheduled = events.iter().find(|e| e["event_type"] == "TimerScheduled");
    let fired = events.iter().find(|e| e["event_type"] == "TimerFired");
    match (scheduled, fired) {
        (Some(s), Some(f)) => check(
            f["payload"]["delay_seconds"] == json!(1)
                && f["payload"]["timer_id"] == s["payload"]["timer_id"],
            || {
                format!(
                    "TimerFired {} vs TimerScheduled {}",
                    f["payload"], s["payload"]
                )
            },
        ),
        _ => Err(format!("history {:?}", types(&events))),
    }
}

/// Two activities and a timer in one `join`, then one more activity.
async fn join_activities_and_timer(h: Harness) -> Outcome {
    let queue = h.unique("join");
    let mut worker = h.worker(&queue);
    worker.register_activity("double", |_ctx, args: Value| async move {
        Ok(json!(args[0].as_i64().unwrap_or(0) * 2))
    });
    worker.register_workflow("rust.join", |ctx, _input: Value| async move {
        let results = ctx
            .join(vec![
                ParallelOperation::activity("double", json!([1])),
                ParallelOperation::activity("double", json!([2])),
                ParallelOperation::timer(Duration::from_secs(1)),
            ])
            .await?;
        let joined: Vec<Value> = results
            .into_iter()
            .map(|r| match r {
                ParallelResult::Activity(v) => v,
                ParallelResult::Timer => json!("timer"),
                other => json!(format!("{other:?}")),
            })
            .collect();
        let last = ctx.activity("double", json!([5])).await?;
        Ok(json!({"joined": joined, "last": last}))
    });
    let handle = h
        .client
        .start_workflow("rust.join", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let result = h.drive(&worker, &handle, async { Ok(()) }).await?;
    check(
        result["joined"][0] == json!(2)
            && result["joined"][1] == json!(4)
            && result["joined"][2] == json!("timer")
            && result["last"] == json!(10),
        || format!("result {result}"),
    )
}

/// A condition over signals resumes once the signal arrives: the server
/// must keep the `condition_wait_occurrence_id` the SDK sent on every
/// `ConditionWait*` event.
async fn condition_over_signals(h: Harness) -> Outcome {
    let queue = h.unique("condition");
    let mut worker = h.worker(&queue);
    worker.register_workflow("rust.condition", |ctx, _input: Value| async move {
        let predicate_ctx = ctx.clone();
        let outcome = wait_condition!(
            ctx,
            "approval-received",
            timeout: Duration::from_secs(300),
            move || Ok(!predicate_ctx.signals("approve")?.is_empty()),
        )
        .await?;
        let approver = ctx.signals("approve")?.first().cloned().unwrap_or_default();
        Ok(json!({
            "status": match outcome {
                ConditionWaitResult::Satisfied => "approved",
                ConditionWaitResult::TimedOut => "timed_out",
            },
            "approver": approver,
        }))
    });
    worker
        .declare_workflow_signals("rust.condition", &["approve"])
        .map_err(|e| e.to_string())?;
    let handle = h
        .client
        .start_workflow("rust.condition", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let signaller = handle.clone();
    let hh = h.clone();
    let result = h
        .drive(&worker, &handle, async move {
            hh.until_event(&signaller, "ConditionWaitOpened").await?;
            signaller
                .signal("approve", json!(["alice"]))
                .await
                .map(|_| ())
                .map_err(|e| format!("signal: {e}"))
        })
        .await?;
    check(
        result == json!({"status": "approved", "approver": ["alice"]}),
        || format!("result {result}"),
    )?;
    let events = h.history(&handle).await?;
    for event in events.iter().filter(|e| {
        e["event_type"]
            .as_str()
            .is_some_and(|t| t.starts_with("ConditionWait"))
    }) {
        check(
            event["payload"]["condition_wait_occurrence_id"]
                .as_str()
                .is_some_and(|s| !s.is_empty()),
            || {
                format!(
                    "{} without its occurrence id: {}",
                    event["event_type"], event["payload"]
                )
            },
        )?;
    }
    Ok(())
}

/// A condition nobody satisfies times out, and the workflow goes on: replay
/// matches the timeout's `TimerFired` with its own `TimerScheduled`.
async fn condition_timeout(h: Harness) -> Outcome {
    let queue = h.unique("condition-timeout");
    let mut worker = h.worker(&queue);
    worker.register_activity(
        "after",
        |_ctx, _args: Value| async move { Ok(json!("after")) },
    );
    worker.register_workflow("rust.condition_timeout", |ctx, _input: Value| async move {
        let predicate_ctx = ctx.clone();
        let outcome = wait_condition!(
            ctx,
            "never",
            timeout: Duration::from_secs(1),
            move || Ok(!predicate_ctx.signals("never")?.is_empty()),
        )
        .await?;
        let after = ctx.activity("after", json!([])).await?;
        Ok(json!({"timed_out": outcome.is_timed_out(), "after": after}))
    });
    worker
        .declare_workflow_signals("rust.condition_timeout", &["never"])
        .map_err(|e| e.to_string())?;
    let handle = h
        .client
        .start_workflow("rust.condition_timeout", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let result = h.drive(&worker, &handle, async { Ok(()) }).await?;
    check(
        result == json!({"timed_out": true, "after": "after"}),
        || format!("result {result}"),
    )
}

/// `ctx.wait_signal` (the `open_signal_wait` command) returns the signal's
/// arguments once it arrives.
async fn wait_signal(h: Harness) -> Outcome {
    signal_wait_scenario(h, false).await
}

/// The same with the signal sent before the workflow opens its wait.
async fn wait_signal_buffered(h: Harness) -> Outcome {
    signal_wait_scenario(h, true).await
}

async fn signal_wait_scenario(h: Harness, early: bool) -> Outcome {
    let queue = h.unique("signal-wait");
    let mut worker = h.worker(&queue);
    worker.register_activity("echo", |_ctx, args: Value| async move { Ok(args) });
    worker.register_workflow("rust.wait_signal", |ctx, _input: Value| async move {
        let first = ctx.wait_signal("go").await?;
        let echoed = ctx.activity("echo", json!([first.clone()])).await?;
        let second = ctx.wait_signal("go").await?;
        Ok(json!({"first": first, "echoed": echoed, "second": second}))
    });
    worker
        .declare_workflow_signals("rust.wait_signal", &["go"])
        .map_err(|e| e.to_string())?;
    let handle = h
        .client
        .start_workflow("rust.wait_signal", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    if early {
        handle
            .signal("go", json!([1]))
            .await
            .map_err(|e| format!("signal: {e}"))?;
        handle
            .signal("go", json!([2]))
            .await
            .map_err(|e| format!("signal: {e}"))?;
    }
    let signaller = handle.clone();
    let hh = h.clone();
    let result = h
        .drive(&worker, &handle, async move {
            if early {
                return Ok(());
            }
            hh.until_event(&signaller, "SignalWaitOpened").await?;
            signaller
                .signal("go", json!([1]))
                .await
                .map_err(|e| format!("signal: {e}"))?;
            hh.until_event(&signaller, "ActivityCompleted").await?;
            signaller
                .signal("go", json!([2]))
                .await
                .map(|_| ())
                .map_err(|e| format!("signal: {e}"))
        })
        .await?;
    check(
        result == json!({"first": [1], "echoed": [[1]], "second": [2]}),
        || format!("result {result}"),
    )?;
    let events = h.history(&handle).await?;
    let opened = events
        .iter()
        .filter(|e| e["event_type"] == "SignalWaitOpened")
        .count();
    let applied = events
        .iter()
        .filter(|e| e["event_type"] == "SignalApplied")
        .count();
    check(opened == 2 && applied == 2, || {
        format!(
            "{opened} SignalWaitOpened, {applied} SignalApplied: {:?}",
            types(&events)
        )
    })
}

/// A saga whose third step fails: the compensations of the two steps that
/// succeeded run in reverse order, each an ordinary activity.
async fn saga_compensations(h: Harness) -> Outcome {
    let queue = h.unique("saga");
    let mut worker = h.worker(&queue);
    for step in [
        "reserve-flight",
        "reserve-hotel",
        "cancel-flight",
        "cancel-hotel",
    ] {
        worker.register_activity(
            step,
            move |_ctx, _args: Value| async move { Ok(json!(step)) },
        );
    }
    worker.register_activity("charge", |_ctx, _args: Value| async move {
        Err::<Value, _>(Error::WorkerLoop("card declined".into()))
    });
    worker.register_workflow("rust.saga", |ctx, _input: Value| async move {
        let mut saga = ctx.saga();
        let outcome = async {
            let flight = ctx.activity("reserve-flight", json!([])).await?;
            saga.add_compensation("cancel-flight", json!([flight]))?;
            let hotel = ctx.activity("reserve-hotel", json!([])).await?;
            saga.add_compensation("cancel-hotel", json!([hotel]))?;
            ctx.activity_with_options("charge", no_retry(), json!([]))
                .await?;
            Ok(json!("booked"))
        }
        .await;
        match saga.finish(outcome).await {
            Ok(value) => Ok(value),
            Err(Error::ActivityFailed(failure)) => {
                Ok(json!({"compensated": true, "failure": failure.to_string()}))
            }
            Err(other) => Err(other),
        }
    });
    let handle = h
        .client
        .start_workflow("rust.saga", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let result = h.drive(&worker, &handle, async { Ok(()) }).await?;
    check(result["compensated"] == json!(true), || {
        format!("result {result}")
    })?;
    let events = h.history(&handle).await?;
    let scheduled: Vec<&str> = events
        .iter()
        .filter(|e| e["event_type"] == "ActivityScheduled")
        .filter_map(|e| e["payload"]["activity_type"].as_str())
        .collect();
    check(
        scheduled
            == [
                "reserve-flight",
                "reserve-hotel",
                "charge",
                "cancel-hotel",
                "cancel-flight",
            ],
        || format!("activities scheduled {scheduled:?}"),
    )
}

/// A local activity runs inline in the workflow worker (a failed first
/// attempt retried there), is recorded as a marker, and replays from it: the
/// sleep after it makes the workflow replay, and the activity is not run
/// again; no activity task is ever dispatched for it.
async fn local_activity(h: Harness) -> Outcome {
    let queue = h.unique("local");
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let mut worker = h.worker(&queue).local_activities(true);
    worker.register_activity("local.transform", move |ctx, args: Value| {
        counted.fetch_add(1, Ordering::SeqCst);
        async move {
            if ctx.attempt_number == 1 {
                return Err(Error::WorkerLoop("transient".into()));
            }
            Ok(json!({"value": args[0], "attempt": ctx.attempt_number}))
        }
    });
    worker.register_activity("remote.echo", |_ctx, args: Value| async move { Ok(args) });
    worker.register_workflow("rust.local", |ctx, _input: Value| async move {
        let local = ctx
            .local_activity_with_options(
                "local.transform",
                LocalActivityOptions::new()
                    .retry_policy(ActivityRetryPolicy::new(3).backoff_intervals([Duration::ZERO]))
                    .start_to_close_timeout(Duration::from_secs(10)),
                json!([41]),
            )
            .await?;
        ctx.sleep(Duration::from_secs(1)).await?;
        ctx.activity("remote.echo", json!([local])).await
    });
    let handle = h
        .client
        .start_workflow("rust.local", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let result = h.drive(&worker, &handle, async { Ok(()) }).await?;
    check(result == json!([{"value": 41, "attempt": 2}]), || {
        format!("result {result}")
    })?;
    check(runs.load(Ordering::SeqCst) == 2, || {
        format!(
            "the local activity ran {} times (2 attempts expected)",
            runs.load(Ordering::SeqCst)
        )
    })?;
    let events = h.history(&handle).await?;
    let local: Vec<&Value> = events
        .iter()
        .filter(|e| e["payload"]["execution_mode"] == "local")
        .collect();
    check(
        types(&local.iter().map(|e| (*e).clone()).collect::<Vec<_>>())
            == ["ActivityScheduled", "ActivityCompleted"]
            && local[1]["payload"]["attempt_number"] == json!(2),
        || format!("local activity events {local:?}"),
    )
}

/// A side effect's value is recorded once and replayed unchanged.
async fn side_effect(h: Harness) -> Outcome {
    let queue = h.unique("side-effect");
    let mut worker = h.worker(&queue);
    worker.register_activity("noop", |_ctx, _args: Value| async move { Ok(json!(null)) });
    worker.register_workflow("rust.side_effect", |ctx, _input: Value| async move {
        let value: u64 = ctx.side_effect(|| 4242)?;
        ctx.activity("noop", json!([])).await?;
        Ok(json!(value))
    });
    let handle = h
        .client
        .start_workflow("rust.side_effect", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let result = h.drive(&worker, &handle, async { Ok(()) }).await?;
    check(result == json!(4242), || format!("result {result}"))
}

/// `get_version` and `patched` record their decisions once; the replay after
/// the activity reads them back instead of choosing again.
async fn version_marker(h: Harness) -> Outcome {
    let queue = h.unique("version");
    let mut worker = h.worker(&queue);
    worker.register_activity("noop", |_ctx, _args: Value| async move { Ok(json!(null)) });
    worker.register_workflow("rust.version", |ctx, _input: Value| async move {
        let version = ctx.get_version("new-pricing", -1, 2)?;
        let patched = ctx.patched("fix-rounding")?;
        ctx.activity("noop", json!([])).await?;
        // The same change id again is the same decision, not a new marker.
        let again = ctx.get_version("new-pricing", -1, 2)?;
        Ok(json!({"version": version, "patched": patched, "again": again}))
    });
    let handle = h
        .client
        .start_workflow("rust.version", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let result = h.drive(&worker, &handle, async { Ok(()) }).await?;
    check(
        result == json!({"version": 2, "patched": true, "again": 2}),
        || format!("result {result}"),
    )?;
    let events = h.history(&handle).await?;
    let markers: Vec<&Value> = events
        .iter()
        .filter(|e| e["event_type"] == "VersionMarkerRecorded")
        .map(|e| &e["payload"])
        .collect();
    check(
        markers.len() == 2
            && markers[0]["change_id"] == "new-pricing"
            && markers[0]["version"] == 2
            && markers[1]["change_id"] == "fix-rounding"
            && markers[1]["version"] == 1,
        || format!("markers {markers:?}"),
    )
}

/// A worker with more task slots than dwserver's per-namespace long-poll cap
/// (16 waits per kind by default; the Rust SDK holds one poll per slot): the
/// polls beyond the cap are refused with the backpressure shape the SDK
/// honours (`long_poll_capacity_exhausted`, `retry_after_seconds`), so the
/// worker keeps polling through a 6 s timer — well past the SDK's ordinary
/// retry budget (5 retries, about 3 s) that an unrecognised 429 spends — and
/// completes the run. Regression: the refusal once lacked that shape and the
/// worker stopped with the 429.
async fn poll_capacity_backpressure(h: Harness) -> Outcome {
    let queue = h.unique("backpressure");
    let mut worker = h
        .worker(&queue)
        .max_concurrent_workflow_tasks(24)
        .max_concurrent_activity_tasks(24);
    worker.register_activity(
        "after",
        |_ctx, _args: Value| async move { Ok(json!("done")) },
    );
    worker.register_workflow(
        "rust.poll_capacity_backpressure",
        |ctx, _input: Value| async move {
            ctx.sleep(Duration::from_secs(6)).await?;
            ctx.activity("after", json!([])).await
        },
    );
    let handle = h
        .client
        .start_workflow("rust.poll_capacity_backpressure", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let result = h.drive(&worker, &handle, async { Ok(()) }).await?;
    check(result == json!("done"), || format!("result {result}"))
}

/// A chain of three runs of one workflow id: each run runs one activity and
/// continues as new with one link fewer; the last completes. The handle's
/// result follows the chain; the runs list shows each run closed as
/// `continued_as_new` and linked both ways; each run's history is its own
/// and the first ends with `WorkflowContinuedAsNew` naming its successor.
async fn continue_as_new_chain(h: Harness) -> Outcome {
    let queue = h.unique("chain");
    let mut worker = h.worker(&queue);
    worker.register_activity(
        "echo",
        |_ctx, args: Value| async move { Ok(args[0].clone()) },
    );
    worker.register_workflow("rust.chain", |ctx, input: Value| async move {
        let remaining = input[0].as_i64().unwrap_or(0);
        let seen = ctx.activity("echo", json!([remaining])).await?;
        let mut trail = input[1].as_array().cloned().unwrap_or_default();
        trail.push(seen);
        if remaining > 0 {
            return ctx.continue_as_new(json!([remaining - 1, trail]));
        }
        Ok(json!({ "links": trail.len(), "trail": trail }))
    });
    let handle = h
        .client
        .start_workflow("rust.chain", &queue, &queue, json!([2, []]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let first_run = handle.run_id.clone().ok_or("the start named no run")?;
    let result = h.drive(&worker, &handle, async { Ok(()) }).await?;
    check(result == json!({ "links": 3, "trail": [2, 1, 0] }), || {
        format!("result {result}")
    })?;
    let listed = h
        .get(&format!(
            "{}/api/workflows/{}/runs",
            h.url, handle.workflow_id
        ))
        .await?;
    let mut runs = listed["runs"].as_array().cloned().unwrap_or_default();
    runs.sort_by_key(|r| r["run_id"].as_str().and_then(|id| id.parse::<i64>().ok()));
    let statuses: Vec<&str> = runs.iter().filter_map(|r| r["status"].as_str()).collect();
    check(
        statuses == ["continued_as_new", "continued_as_new", "completed"],
        || format!("statuses {statuses:?}"),
    )?;
    check(runs[0]["run_id"] == json!(first_run), || {
        format!("first run {} vs {first_run}", runs[0]["run_id"])
    })?;
    for pair in runs.windows(2) {
        check(
            pair[0]["continued_to_run_id"] == pair[1]["run_id"]
                && pair[1]["continued_from_run_id"] == pair[0]["run_id"],
            || format!("lineage {} -> {}", pair[0], pair[1]),
        )?;
    }
    // The closed run, described on its own: closed as continued, with
    // neither a result nor a failure.
    let closed = h
        .get(&format!(
            "{}/api/workflows/{}/runs/{first_run}",
            h.url, handle.workflow_id
        ))
        .await?;
    check(
        closed["closed_reason"] == json!("continued") && closed.get("failure").is_none(),
        || format!("the first run described: {closed}"),
    )?;
    let first = h.run_history(&handle.workflow_id, &first_run).await?;
    let last = first.last().cloned().unwrap_or_default();
    check(
        last["event_type"] == json!("WorkflowContinuedAsNew")
            && last["payload"]["continued_to_run_id"] == runs[1]["run_id"],
        || format!("first run's history {:?}", types(&first)),
    )?;
    let second_run = runs[1]["run_id"].as_str().unwrap_or_default().to_owned();
    let second = h.run_history(&handle.workflow_id, &second_run).await?;
    check(
        second.first().is_some_and(|e| {
            e["event_type"] == json!("WorkflowStarted")
                && e["payload"]["continued_from_run_id"] == json!(first_run)
        }) && types(&second)
            .iter()
            .filter(|t| **t == "ActivityScheduled")
            .count()
            == 1,
        || format!("second run's history {:?}", types(&second)),
    )
}

/// Child workflows: the parent starts a child on its own queue (its own
/// worker), awaits its result (the child ran an activity), then starts a
/// child whose activity fails and gets `ChildWorkflowFailed` with the
/// child's identity; the parent's history holds one `ChildWorkflowScheduled`
/// per child, `ChildRunStarted`, then `ChildRunCompleted` / `ChildRunFailed`
/// at the same sequence, each naming the child's run, which names its parent.
async fn child_workflows(h: Harness) -> Outcome {
    let queue = h.unique("parent");
    let child_queue = h.unique("child");
    let mut worker = h.worker(&queue);
    let mut children = h.worker(&child_queue);
    children.register_activity("child.greet", |_ctx, args: Value| async move {
        Ok(json!(format!(
            "hello from {}",
            args[0].as_str().unwrap_or("?")
        )))
    });
    children.register_activity("child.charge", |_ctx, _args: Value| async move {
        Err::<Value, _>(Error::WorkerLoop("card declined".into()))
    });
    children.register_workflow("rust.kid", |ctx, input: Value| async move {
        if input[0] == json!("fail") {
            return ctx
                .activity_with_options("child.charge", no_retry(), json!([]))
                .await;
        }
        ctx.activity("child.greet", json!([input[0].clone()])).await
    });
    let options = ChildWorkflowOptions::new(child_queue.clone())
        .parent_close_policy(ParentClosePolicy::Terminate);
    worker.register_workflow("rust.parent", move |ctx, _input: Value| {
        let options = options.clone();
        async move {
            let ok = ctx
                .start_child_workflow("rust.kid", options.clone(), json!(["kid"]))
                .await?;
            let failed = match ctx
                .start_child_workflow("rust.kid", options, json!(["fail"]))
                .await
            {
                Err(Error::ChildWorkflowFailed(failure)) => json!({
                    "reason": failure.reason,
                    "child_workflow_id": failure.child_workflow_id,
                    "child_workflow_type": failure.child_workflow_type,
                    "exception_type": failure.exception_type,
                }),
                Ok(result) => return Ok(json!({"unexpected": result.result})),
                Err(other) => return Err(other),
            };
            Ok(json!({
                "result": ok.result,
                "child_workflow_id": ok.child.workflow_id,
                "child_run_id": ok.child.run_id,
                "child_workflow_type": ok.child_workflow_type,
                "failed": failed,
            }))
        }
    });
    let handle = h
        .client
        .start_workflow("rust.parent", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let child_worker = children.run();
    tokio::pin!(child_worker);
    let result = tokio::select! {
        result = h.drive(&worker, &handle, async { Ok(()) }) => result?,
        stopped = &mut child_worker => return Err(format!("the child worker stopped: {stopped:?}")),
    };
    check(
        result["result"] == json!("hello from kid")
            && result["child_workflow_type"] == json!("rust.kid")
            && result["failed"]["reason"] == json!("child_workflow")
            && result["failed"]["child_workflow_type"] == json!("rust.kid")
            && result["failed"]["child_workflow_id"].is_string(),
        || format!("result {result}"),
    )?;
    let events = h.history(&handle).await?;
    let of = |kind: &str| -> Vec<&Value> {
        events
            .iter()
            .filter(|e| e["event_type"] == kind)
            .map(|e| &e["payload"])
            .collect()
    };
    let scheduled = of("ChildWorkflowScheduled");
    let completed = of("ChildRunCompleted");
    let failed = of("ChildRunFailed");
    check(
        scheduled.len() == 2
            && of("ChildRunStarted").len() == 2
            && completed.len() == 1
            && failed.len() == 1
            && completed[0]["sequence"] == scheduled[0]["sequence"]
            && failed[0]["sequence"] == scheduled[1]["sequence"]
            && scheduled[0]["parent_close_policy"] == json!("terminate")
            && completed[0]["child_workflow_run_id"] == result["child_run_id"],
        || format!("parent's history {:?}", types(&events)),
    )?;
    let child_id = result["child_workflow_id"].as_str().unwrap_or_default();
    let child = h
        .get(&format!("{}/api/workflows/{child_id}", h.url))
        .await?;
    check(
        child["status"] == json!("completed")
            && child["task_queue"] == json!(child_queue)
            && child["parent_run_id"] == json!(handle.run_id),
        || format!("the child described: {child}"),
    )
}

/// Memo upserts: the workflow sets two memo entries, runs an activity (its
/// task replays the first `MemoUpserted`), then changes one and removes the
/// other; describe shows the merged memo, and history records both upserts with their patch and merged memo.
async fn memo_upserts(h: Harness) -> Outcome {
    let queue = h.unique("memo");
    let mut worker = h.worker(&queue);
    worker.register_activity("greet", |_ctx, args: Value| async move {
        Ok(json!(format!("hello, {}", args[0].as_str().unwrap_or("?"))))
    });
    worker.register_workflow("rust.memo", |ctx, input: Value| async move {
        ctx.upsert_memo(json!({"stage": "started", "customer": input[0].clone()}))?;
        let greeting = ctx.activity("greet", json!([input[0].clone()])).await?;
        ctx.upsert_memo(json!({"stage": "greeted", "customer": null}))?;
        Ok(greeting)
    });
    // The Rust client starts without a memo: the upserts make all of it.
    let handle = h
        .client
        .start_workflow("rust.memo", &queue, &queue, json!(["ada"]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let result = h.drive(&worker, &handle, async { Ok(()) }).await?;
    check(result == json!("hello, ada"), || format!("result {result}"))?;
    let described = h.get(&format!("{}/api/workflows/{queue}", h.url)).await?;
    check(described["memo"] == json!({"stage": "greeted"}), || {
        format!("memo {}", described["memo"])
    })?;
    let events = h.history(&handle).await?;
    let upserts: Vec<&Value> = events
        .iter()
        .filter(|e| e["event_type"] == "MemoUpserted")
        .map(|e| &e["payload"])
        .collect();
    check(
        upserts.len() == 2
            && upserts.iter().all(|u| {
                u["entries"]["codec"] == json!("avro") && u["merged"]["codec"] == json!("avro")
            }),
        || format!("history {:?}", types(&events)),
    )
}

/// The SDK's sticky-execution example: a worker with a sticky cache keeps
/// the run's history between its workflow tasks. The server acknowledges
/// the cache at registration (`sticky_registration_unconfirmed` otherwise),
/// holds each next task of the run for that worker and tells it to expect a
/// hit (`sticky_replay_mode`), so the SDK resumes from its cached prefix
/// instead of replaying the whole history.
async fn sticky_execution(h: Harness) -> Outcome {
    let queue = h.unique("sticky");
    let mut worker = h
        .worker(&queue)
        .build_id("rust-conformance-sticky-v1")
        .sticky_cache(
            StickyCacheOptions::new(16)
                .max_history_bytes(4 * 1024 * 1024)
                .ttl(Duration::from_secs(60)),
        )
        .map_err(|e| format!("sticky cache: {e}"))?;
    worker.register_workflow("rust.sticky", |ctx, _input: Value| async move {
        let value = ctx.side_effect(|| 42)?;
        ctx.wait_signal("first").await?;
        ctx.wait_signal("second").await?;
        Ok(json!({"recorded_value": value}))
    });
    worker
        .declare_workflow_signals("rust.sticky", &["first", "second"])
        .map_err(|e| e.to_string())?;
    let handle = h
        .client
        .start_workflow("rust.sticky", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let signaller = handle.clone();
    let hh = h.clone();
    let result = h
        .drive(&worker, &handle, async move {
            hh.until_event(&signaller, "SignalWaitOpened").await?;
            signaller
                .signal("first", json!([]))
                .await
                .map_err(|e| format!("signal: {e}"))?;
            hh.until_event(&signaller, "SignalApplied").await?;
            let opened = || async {
                hh.history(&signaller).await.map(|events| {
                    events
                        .iter()
                        .filter(|e| e["event_type"] == "SignalWaitOpened")
                        .count()
                })
            };
            let deadline = tokio::time::Instant::now() + crate::harness::DEADLINE;
            while opened().await? < 2 {
                if tokio::time::Instant::now() > deadline {
                    return Err("the second signal wait never opened".into());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            signaller
                .signal("second", json!([]))
                .await
                .map(|_| ())
                .map_err(|e| format!("signal: {e}"))
        })
        .await?;
    check(result == json!({"recorded_value": 42}), || {
        format!("result {result}")
    })?;
    let metrics = worker
        .sticky_cache_metrics()
        .map_err(|e| format!("metrics: {e}"))?;
    // Three workflow tasks after the first: each was the caching worker's,
    // announced as an expected hit, and found in its cache.
    check(metrics.hit >= 2 && metrics.forced_cold_replay == 0, || {
        format!("sticky cache metrics {metrics:?}")
    })
}

/// The SDK's own `sticky_execution` example, step by step: its worker is
/// driven one `run_once` at a time until describe says the run is
/// `waiting` (its signal wait open, no workflow task to run), then it is
/// signalled. A server that called such a run `running` left the example
/// looping for ever; here a deadline turns that into a failure.
async fn sticky_execution_example(h: Harness) -> Outcome {
    let queue = h.unique("sticky-example");
    let mut worker = h
        .worker(&queue)
        .build_id("rust-conformance-sticky-example-v1")
        .sticky_cache(
            StickyCacheOptions::new(16)
                .max_history_bytes(4 * 1024 * 1024)
                .ttl(Duration::from_secs(60)),
        )
        .map_err(|e| format!("sticky cache: {e}"))?
        .poll_timeout(Duration::from_secs(1));
    worker.register_workflow("example.sticky", |ctx, _input: Value| async move {
        let value = ctx.side_effect(|| 42)?;
        ctx.wait_signal("first").await?;
        ctx.wait_signal("second").await?;
        Ok(json!({"recorded_value": value}))
    });
    worker
        .declare_workflow_signals("example.sticky", &["first", "second"])
        .map_err(|e| e.to_string())?;
    worker
        .register()
        .await
        .map_err(|e| format!("register: {e}"))?;
    let handle = h
        .client
        .start_workflow("example.sticky", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let drive_until_waiting = || async {
        let deadline = tokio::time::Instant::now() + crate::harness::DEADLINE;
        loop {
            let description = handle
                .describe()
                .await
                .map_err(|e| format!("describe: {e}"))?;
            if description.status.as_deref() == Some("waiting") {
                return Ok::<(), String>(());
            }
            if description.is_terminal() {
                return Err("the example ended before its signal wait".to_owned());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!(
                    "the run never became waiting: status {:?}",
                    description.status
                ));
            }
            worker
                .run_once()
                .await
                .map_err(|e| format!("run_once: {e}"))?;
        }
    };
    drive_until_waiting().await?;
    handle
        .signal("first", json!([]))
        .await
        .map_err(|e| format!("signal: {e}"))?;
    worker
        .run_once()
        .await
        .map_err(|e| format!("run_once: {e}"))?;
    drive_until_waiting().await?;
    handle
        .signal("second", json!([]))
        .await
        .map_err(|e| format!("signal: {e}"))?;
    let deadline = tokio::time::Instant::now() + crate::harness::DEADLINE;
    while !handle
        .describe()
        .await
        .map_err(|e| format!("describe: {e}"))?
        .is_terminal()
    {
        if tokio::time::Instant::now() > deadline {
            return Err("the run never closed after its second signal".into());
        }
        worker
            .run_once()
            .await
            .map_err(|e| format!("run_once: {e}"))?;
    }
    let result = handle
        .result(WorkflowResultOptions::default())
        .await
        .map_err(|e| format!("result: {e}"))?;
    check(result == json!({"recorded_value": 42}), || {
        format!("result {result}")
    })
}

/// `ctx.message_stream("orders")`: messages appended with
/// `append_message` (some before the worker runs, one while it waits, one
/// on another stream the workflow never reads) are read in position order,
/// each once; a retried append keeps its position.
async fn message_stream(h: Harness) -> Outcome {
    let queue = h.unique("message-stream");
    let mut worker = h.worker(&queue);
    worker.register_workflow("rust.message_stream", |ctx, _input: Value| async move {
        let stream = ctx.message_stream("orders")?;
        let first = stream.receive_one().await?;
        let mut messages = vec![first];
        while messages.len() < 3 {
            messages.extend(stream.receive(10).await?);
        }
        Ok(json!(messages
            .into_iter()
            .map(|m| {
                let text = match m.arguments.first() {
                    Some(AvroValue::String(text)) => text.clone(),
                    other => format!("{other:?}"),
                };
                json!({"id": m.message_id, "position": m.position, "text": text})
            })
            .collect::<Vec<_>>()))
    });
    let handle = h
        .client
        .start_workflow("rust.message_stream", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let append = |stream: &'static str, id: &'static str, text: &'static str| {
        let handle = handle.clone();
        async move {
            handle
                .append_message(stream, id, json!([text]))
                .await
                .map_err(|e| format!("append {id}: {e}"))
        }
    };
    let first = append("orders", "order-1", "apples").await?;
    check(first["position"] == 1, || format!("first append {first}"))?;
    let retried = append("orders", "order-1", "apples").await?;
    check(
        retried["position"] == 1 && retried["retained"] == true,
        || format!("retried append {retried}"),
    )?;
    append("audit", "note-1", "not read").await?;
    append("orders", "order-2", "pears").await?;
    let hh = h.clone();
    let watcher = handle.clone();
    let result = h
        .drive(&worker, &handle, async move {
            hh.until_event(&watcher, "SignalApplied").await?;
            append("orders", "order-3", "plums").await.map(|_| ())
        })
        .await?;
    check(
        result
            == json!([
                {"id": "order-1", "position": 1, "text": "apples"},
                {"id": "order-2", "position": 2, "text": "pears"},
                {"id": "order-3", "position": 3, "text": "plums"},
            ]),
        || format!("result {result}"),
    )?;
    let events = h.history(&handle).await?;
    let received = events
        .iter()
        .filter(|e| e["event_type"] == "SignalReceived")
        .count();
    check(received == 4, || {
        format!("{received} deliveries: {:?}", types(&events))
    })
}

/// `ctx.call_nexus_service` (the `start_service_operation` command): a
/// catalogued operation bound to a workflow on this scenario's queue runs
/// and its result resumes the caller; an operation the catalog lacks fails
/// the call with `NexusOperationFailed`.
async fn nexus_from_workflow(h: Harness) -> Outcome {
    let queue = h.unique("nexus");
    // One operation per run of the scenario, bound to its own queue.
    let operation = queue.to_ascii_lowercase();
    let base = "/api/service-endpoints";
    for (path, body) in [
        (
            base.to_owned(),
            json!({"endpoint_name": "rust-conformance"}),
        ),
        (
            format!("{base}/rust-conformance/services"),
            json!({"service_name": "greetings"}),
        ),
        (
            format!("{base}/rust-conformance/services/greetings/operations"),
            json!({"operation_name": operation, "operation_mode": "sync",
                   "handler_binding_kind": "start_workflow",
                   "handler_binding": {"workflow_type": "rust.nexus_handler", "task_queue": queue}}),
        ),
    ] {
        let (status, answer) = h.post(&path, &body).await?;
        check(status == 201 || status == 409, || {
            format!("POST {path}: {status} {answer}")
        })?;
    }
    let mut worker = h.worker(&queue);
    worker.register_workflow("rust.nexus_handler", |_ctx, input: Value| async move {
        let name = input
            .as_array()
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            .or_else(|| input.as_str())
            .unwrap_or("?")
            .to_owned();
        Ok(json!(format!("hello, {name}")))
    });
    let op = operation.clone();
    worker.register_workflow("rust.nexus_caller", move |ctx, _input: Value| {
        let op = op.clone();
        async move {
            let greeted = ctx
                .call_nexus_service("rust-conformance", "greetings", &op, json!(["rust"]))
                .await?;
            let greeting = match &greeted.result {
                AvroValue::String(text) => text.clone(),
                other => format!("{other:?}"),
            };
            let missing = match ctx
                .call_nexus_service("rust-conformance", "greetings", "vanish", json!(["x"]))
                .await
            {
                Err(Error::NexusOperationFailed(failure)) => failure.message.clone(),
                Ok(_) => "no failure".to_owned(),
                Err(other) => return Err(other),
            };
            // Waiting only for the admission resumes at ServiceCallStarted.
            let mut accepted = NexusServiceOptions::new();
            accepted.wait_for = NexusWaitFor::Accepted;
            let admitted = ctx
                .call_nexus_service_with_options(
                    "rust-conformance",
                    "greetings",
                    &op,
                    accepted,
                    json!(["later"]),
                )
                .await?;
            Ok(json!({"greeting": greeting, "missing": missing,
                      "service_call_id": greeted.service_call_id,
                      "admitted": admitted.status}))
        }
    });
    let handle = h
        .client
        .start_workflow("rust.nexus_caller", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let result = h.drive(&worker, &handle, async { Ok(()) }).await?;
    check(result["greeting"] == "hello, rust", || {
        format!("result {result}")
    })?;
    check(
        result["missing"]
            .as_str()
            .is_some_and(|m| m.contains("not found")),
        || format!("result {result}"),
    )?;
    let events = h.history(&handle).await?;
    let started: Vec<&Value> = events
        .iter()
        .filter(|e| e["event_type"] == "ServiceCallStarted")
        .collect();
    let completed: Vec<&Value> = events
        .iter()
        .filter(|e| e["event_type"] == "ServiceCallCompleted")
        .collect();
    check(started.len() == 2 && completed.len() == 1, || {
        format!("{:?}", types(&events))
    })?;
    check(
        started[0]["payload"]["sequence"] == completed[0]["payload"]["sequence"]
            && started[0]["payload"]["service_call_id"] == result["service_call_id"],
        || format!("{started:?} {completed:?} {result}"),
    )
}

/// `call_nexus_service_with_options` with a `target_namespace`: the
/// operation of another namespace's catalog runs there (a worker of that
/// namespace runs its workflow) and its result resumes the caller; an
/// operation whose allow list leaves the caller's namespace out fails the
/// call with `NexusOperationFailed` (`caller_namespace_not_allowed`).
async fn nexus_cross_namespace(h: Harness) -> Outcome {
    let peer = "rust-conformance-peer";
    let (status, answer) = h.post("/api/namespaces", &json!({"name": peer})).await?;
    check(status == 200 || status == 201 || status == 409, || {
        format!("POST /api/namespaces: {status} {answer}")
    })?;
    let queue = h.unique("nexus-peer");
    let operation = queue.to_ascii_lowercase();
    let base = "/api/service-endpoints";
    let binding = json!({"workflow_type": "rust.peer_handler", "task_queue": queue});
    for (path, body) in [
        (base.to_owned(), json!({"endpoint_name": "peer"})),
        (
            format!("{base}/peer/services"),
            json!({"service_name": "greetings"}),
        ),
        (
            format!("{base}/peer/services/greetings/operations"),
            json!({"operation_name": operation, "operation_mode": "sync",
                   "handler_binding_kind": "start_workflow", "handler_binding": binding}),
        ),
        (
            format!("{base}/peer/services/greetings/operations"),
            json!({"operation_name": format!("{operation}-guarded"), "operation_mode": "sync",
                   "handler_binding_kind": "start_workflow", "handler_binding": binding,
                   "boundary_policy": {"allow_callers": ["partners"]}}),
        ),
    ] {
        let (status, answer) = h.post_ns(peer, &path, &body).await?;
        check(status == 201 || status == 409, || {
            format!("POST {path}: {status} {answer}")
        })?;
    }
    let peer_client = durable_workflow::Client::builder(h.url.clone())
        .namespace(peer)
        .build()
        .map_err(|e| e.to_string())?;
    let mut peer_worker = durable_workflow::Worker::new(peer_client, &queue)
        .worker_id(h.unique("peer-worker"))
        .poll_timeout(std::time::Duration::from_secs(1));
    peer_worker.register_workflow("rust.peer_handler", |_ctx, input: Value| async move {
        let name = input
            .as_array()
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned();
        Ok(json!(format!("hello from the peer, {name}")))
    });
    let mut worker = h.worker(&queue);
    let op = operation.clone();
    worker.register_workflow("rust.peer_caller", move |ctx, _input: Value| {
        let op = op.clone();
        async move {
            let mut options = NexusServiceOptions::new();
            options.target_namespace = Some(peer.to_owned());
            let greeted = ctx
                .call_nexus_service_with_options(
                    "peer",
                    "greetings",
                    &op,
                    options.clone(),
                    json!(["rust"]),
                )
                .await?;
            let greeting = match &greeted.result {
                AvroValue::String(text) => text.clone(),
                other => format!("{other:?}"),
            };
            let refused = match ctx
                .call_nexus_service_with_options(
                    "peer",
                    "greetings",
                    &format!("{op}-guarded"),
                    options,
                    json!(["x"]),
                )
                .await
            {
                Err(Error::NexusOperationFailed(failure)) => failure.exception_type.clone(),
                Ok(_) => "no failure".to_owned(),
                Err(other) => return Err(other),
            };
            Ok(json!({"greeting": greeting, "refused": refused,
                      "target_namespace": greeted.target_namespace,
                      "linked": greeted.linked_workflow_instance_id}))
        }
    });
    let handle = h
        .client
        .start_workflow("rust.peer_caller", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    // The peer's worker runs until the caller has seen the refusal (after
    // the first call's result).
    let during = async {
        let mut seen = Ok(());
        let seen_ref = &mut seen;
        peer_worker
            .run_until(async {
                *seen_ref = h.until_event(&handle, "ServiceCallFailed").await;
            })
            .await
            .map_err(|e| format!("peer worker stopped: {e}"))?;
        seen
    };
    let result = h.drive(&worker, &handle, during).await?;
    check(
        result["greeting"] == "hello from the peer, rust"
            && result["refused"] == "caller_namespace_not_allowed"
            && result["target_namespace"] == peer,
        || format!("result {result}"),
    )?;
    let events = h.history(&handle).await?;
    let started: Vec<&Value> = events
        .iter()
        .filter(|e| e["event_type"] == "ServiceCallStarted")
        .collect();
    check(
        started.len() == 1
            && started[0]["payload"]["caller_namespace"] == "default"
            && started[0]["payload"]["target_namespace"] == peer,
        || format!("{started:?}"),
    )
}

/// A workflow reads one message of its stream and continues as new; the
/// next run starts from the stream's cursor (the server's checkpoint) and
/// reads the two messages the first left, then one appended to it.
async fn message_stream_continue_as_new(h: Harness) -> Outcome {
    let queue = h.unique("stream-chain");
    let mut worker = h.worker(&queue);
    worker.register_workflow("rust.stream_chain", |ctx, input: Value| async move {
        let stream = ctx.message_stream("orders")?;
        let mut seen = input[0].as_array().cloned().unwrap_or_default();
        if seen.is_empty() {
            let first = stream.receive_one().await?;
            return ctx.continue_as_new(json!([[first.message_id]]));
        }
        while seen.len() < 4 {
            for message in stream.receive(10).await? {
                seen.push(json!([message.message_id, message.position]));
            }
        }
        Ok(json!(seen))
    });
    let handle = h
        .client
        .start_workflow("rust.stream_chain", &queue, &queue, json!([[]]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    for id in ["m-1", "m-2", "m-3"] {
        handle
            .append_message("orders", id, json!([id]))
            .await
            .map_err(|e| format!("append {id}: {e}"))?;
    }
    let appender = handle.clone();
    let hh = h.clone();
    let first_run = handle.run_id.clone().ok_or("the start named no run")?;
    let result = h
        .drive(&worker, &handle, async move {
            // Once the successor runs, one more message goes to it.
            let deadline = tokio::time::Instant::now() + crate::harness::DEADLINE;
            loop {
                let described = hh
                    .get(&format!(
                        "{}/api/workflows/{}",
                        hh.url, appender.workflow_id
                    ))
                    .await?;
                if described["run_id"].as_str() != Some(first_run.as_str()) {
                    break;
                }
                if tokio::time::Instant::now() > deadline {
                    return Err("the workflow never continued as new".into());
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            appender
                .append_message("orders", "m-4", json!(["m-4"]))
                .await
                .map(|_| ())
                .map_err(|e| format!("append m-4: {e}"))
        })
        .await?;
    check(
        result == json!(["m-1", ["m-2", 2], ["m-3", 3], ["m-4", 4]]),
        || format!("result {result}"),
    )
}

/// `select` over a fast activity, a slow activity that heartbeats until it
/// is told to stop, and a long timer: the server records the fast one as
/// the winner (`SelectionResolved`, checked by the SDK field by field on
/// replay); the workflow cancels both losers (`cancel_selection_operation`,
/// recorded as `SelectionOperationCancelled`), awaits one of them (the SDK's
/// `DurableOperationCancelled`), and the slow activity's heartbeat sees
/// `cancel_requested`.
async fn durable_selection(h: Harness) -> Outcome {
    let queue = h.unique("selection");
    let mut worker = h.worker(&queue);
    let stopped = Arc::new(AtomicUsize::new(0));
    worker.register_activity("fast", |_ctx, _args: Value| async move {
        Ok(json!("fast-value"))
    });
    let seen = stopped.clone();
    worker.register_activity("slow", move |ctx, _args: Value| {
        let seen = seen.clone();
        async move {
            // Heartbeats until the server says the workflow no longer wants
            // it (bounded: two minutes).
            for _ in 0..600 {
                let beat = ctx.heartbeat(json!({"phase": "waiting"})).await?;
                if beat.should_stop() {
                    seen.fetch_add(1, Ordering::SeqCst);
                    return Ok(json!("stopped"));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok(json!("never cancelled"))
        }
    });
    worker.register_workflow("rust.durable_selection", |ctx, _input: Value| async move {
        let options = || {
            ActivityOptions::new()
                .retry_policy(ActivityRetryPolicy::new(1))
                .start_to_close_timeout(Duration::from_secs(300))
                .heartbeat_timeout(Duration::from_secs(60))
        };
        let selected = ctx
            .select_keyed(vec![
                (
                    "slow",
                    ParallelOperation::activity_with_options("slow", options(), json!([])),
                ),
                (
                    "fast",
                    ParallelOperation::activity_with_options("fast", options(), json!([])),
                ),
                (
                    "timer",
                    ParallelOperation::timer(Duration::from_secs(3_600)),
                ),
            ])
            .await?;
        let winner = format!("{:?}", selected.key);
        let value = match &selected.value {
            Some(ParallelResult::Activity(v)) => v.clone(),
            other => json!(format!("{other:?}")),
        };
        let losers: Vec<_> = selected.remaining().into_iter().cloned().collect();
        for loser in &losers {
            loser.cancel().await?;
        }
        let awaited = match losers[0].await_result().await {
            Err(Error::DurableOperationCancelled(c)) => format!("cancelled {}", c.operation_kind),
            other => format!("{other:?}"),
        };
        // Open until the test saw the slow activity stop on its heartbeat.
        ctx.wait_signal("finish").await?;
        Ok(json!({"winner": winner, "value": value, "loser": awaited}))
    });
    worker
        .declare_workflow_signals("rust.durable_selection", &["finish"])
        .map_err(|e| e.to_string())?;
    let handle = h
        .client
        .start_workflow("rust.durable_selection", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let signaller = handle.clone();
    let seen = stopped.clone();
    let result = h
        .drive(&worker, &handle, async move {
            // The slow activity stops once its heartbeat hears it was
            // cancelled, while the run is still open.
            let deadline = std::time::Instant::now() + Duration::from_secs(90);
            while seen.load(Ordering::SeqCst) == 0 {
                if std::time::Instant::now() > deadline {
                    return Err("the cancelled activity's heartbeat never said stop".into());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            signaller
                .signal("finish", json!([]))
                .await
                .map(|_| ())
                .map_err(|e| format!("signal: {e}"))
        })
        .await?;
    check(
        result
            == json!({"winner": "Name(\"fast\")", "value": "fast-value", "loser": "cancelled activity"}),
        || format!("result {result}"),
    )?;
    let events = h.history(&handle).await?;
    let resolved: Vec<&Value> = events
        .iter()
        .filter(|e| e["event_type"] == "SelectionResolved")
        .collect();
    check(resolved.len() == 1, || {
        format!("SelectionResolved events: {}", resolved.len())
    })?;
    let marker = &resolved[0]["payload"];
    check(
        marker["member_key"] == json!("fast")
            && marker["outcome"] == json!("completed")
            && marker["resolution_event_type"] == json!("ActivityCompleted"),
        || format!("marker {marker}"),
    )?;
    let cancelled = events
        .iter()
        .filter(|e| e["event_type"] == "SelectionOperationCancelled")
        .count();
    check(cancelled == 2, || {
        format!("SelectionOperationCancelled events: {cancelled}")
    })?;
    Ok(())
}

/// The SDK's worker-session example: a worker that holds sessions and
/// offers the resource `cache:example`; a workflow runs two activities in
/// one session, which both run on that worker and see the same resource.
/// Before the server acknowledged every capability the SDK lists
/// (`durable_selection` and `message_streams` among them), `register()`
/// stopped with `worker_session_registration_unconfirmed`.
async fn worker_session(h: Harness) -> Outcome {
    use durable_workflow::{Uuid, WorkerSessionOptions};
    use std::collections::HashMap;
    use std::sync::Mutex;
    let queue = h.unique("session");
    let mut worker = h
        .worker(&queue)
        .worker_sessions(true)
        .capabilities(["cache:example"]);
    let resources = Arc::new(Mutex::new(HashMap::<String, String>::new()));
    worker.register_activity("rust.session-greet", move |ctx, args: Value| {
        let resources = resources.clone();
        async move {
            let Some(session) = ctx.worker_session() else {
                return Ok(json!({"error": "no session"}));
            };
            let generation = resources
                .lock()
                .unwrap()
                .entry(session.options().session_id().into())
                .or_insert_with(|| Uuid::new_v4().to_string())
                .clone();
            ctx.heartbeat(json!({"phase": "resource_ready"})).await?;
            // The arguments arrive as the one-element list of the call.
            let name = args[0]["name"]
                .as_str()
                .or(args["name"].as_str())
                .unwrap_or("?");
            Ok(json!({"greeting": format!("Hello, {name}!"),
                      "resource_generation": generation}))
        }
    });
    worker.register_workflow("rust.session-example", |ctx, input: Value| async move {
        let request = input[0].clone();
        let options = WorkerSessionOptions::new(request["session_id"].as_str().unwrap_or("s"))
            .requirements(["cache:example"]);
        let first = ctx
            .activity("rust.session-greet", request.clone())
            .in_worker_session(options.clone())
            .await?;
        let second = ctx
            .activity("rust.session-greet", request)
            .in_worker_session(options)
            .await?;
        Ok(json!([first, second]))
    });
    let session_id = format!("session-{}", Uuid::new_v4());
    let handle = h
        .client
        .start_workflow(
            "rust.session-example",
            &queue,
            &queue,
            json!([{"name": "Rust", "session_id": session_id}]),
        )
        .await
        .map_err(|e| format!("start: {e}"))?;
    let result = h.drive(&worker, &handle, async { Ok(()) }).await?;
    check(
        result[0]["greeting"] == json!("Hello, Rust!")
            && result[1]["greeting"] == json!("Hello, Rust!")
            && result[0]["resource_generation"].is_string()
            && result[0]["resource_generation"] == result[1]["resource_generation"],
        || format!("result {result}"),
    )
}

/// A client cancels a running workflow through the cancel route while it
/// waits on a heartbeating activity: the run closes as `cancelled` with
/// `WorkflowCancelled` as its last event, the SDK's result says cancelled,
/// and the activity hears `cancel_requested` on its next heartbeat.
async fn cancel_route(h: Harness) -> Outcome {
    let queue = h.unique("cancel");
    let mut worker = h.worker(&queue);
    let started = Arc::new(AtomicUsize::new(0));
    let stopped = Arc::new(AtomicUsize::new(0));
    let (began, seen) = (started.clone(), stopped.clone());
    worker.register_activity("linger", move |ctx, _args: Value| {
        let (began, seen) = (began.clone(), seen.clone());
        async move {
            began.fetch_add(1, Ordering::SeqCst);
            // Heartbeats until the server says stop (bounded: two minutes).
            for _ in 0..600 {
                let beat = ctx.heartbeat(json!({"phase": "lingering"})).await?;
                if beat.cancel_requested {
                    seen.fetch_add(1, Ordering::SeqCst);
                    return Ok(json!("stopped"));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok(json!("never cancelled"))
        }
    });
    worker.register_workflow("rust.cancel_route", |ctx, _input: Value| async move {
        let options = ActivityOptions::new()
            .retry_policy(ActivityRetryPolicy::new(1))
            .start_to_close_timeout(Duration::from_secs(300))
            .heartbeat_timeout(Duration::from_secs(60));
        ctx.activity_with_options("linger", options, json!([]))
            .await
    });
    let handle = h
        .client
        .start_workflow("rust.cancel_route", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let canceller = handle.clone();
    let mut side: Outcome = Ok(());
    let side_ref = &mut side;
    let during = async move {
        *side_ref = async {
            wait_until(
                || started.load(Ordering::SeqCst) > 0,
                "the activity to start",
            )
            .await?;
            canceller
                .cancel(durable_workflow::WorkflowCommandOptions {
                    reason: Some("conformance: cancel while waiting".into()),
                    request_id: None,
                })
                .await
                .map_err(|e| format!("cancel: {e}"))?;
            wait_until(
                || stopped.load(Ordering::SeqCst) > 0,
                "the activity's heartbeat to hear cancel_requested",
            )
            .await
        }
        .await;
    };
    worker
        .run_until(during)
        .await
        .map_err(|e| format!("worker stopped: {e}"))?;
    side?;
    let description = handle
        .describe()
        .await
        .map_err(|e| format!("describe: {e}"))?;
    check(description.status.as_deref() == Some("cancelled"), || {
        format!("status {:?}", description.status)
    })?;
    match handle
        .result(durable_workflow::WorkflowResultOptions {
            poll_interval: Duration::from_millis(50),
            timeout: Duration::from_secs(5),
        })
        .await
    {
        Err(Error::WorkflowCancelled(_)) => {}
        other => return Err(format!("result of a cancelled run: {other:?}")),
    }
    let events = h.history(&handle).await?;
    let kinds = types(&events);
    check(
        kinds.first() == Some(&"WorkflowStarted")
            && kinds.contains(&"ActivityScheduled")
            && kinds.last() == Some(&"WorkflowCancelled"),
        || format!("history {kinds:?}"),
    )?;
    let last = &events[events.len() - 1]["payload"];
    check(
        last["reason"] == json!("conformance: cancel while waiting"),
        || format!("WorkflowCancelled {last}"),
    )
}

/// Waits (generous deadline, short polls) until `cond` holds.
async fn wait_until(cond: impl Fn() -> bool, what: &str) -> Outcome {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while !cond() {
        if std::time::Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Cooperative cancellation (protocol 1.20): the client's request stays
/// pending, a worker built with `cooperative_cancellation(true)` delivers
/// it at the timer the workflow waits on, the workflow runs a cleanup
/// activity under a cancellation shield and lets the cancellation end the
/// run, which closes as `cancelled`.
async fn cooperative_cancellation(h: Harness) -> Outcome {
    let queue = h.unique("cooperative");
    let client = durable_workflow::Client::builder(h.url.clone())
        .namespace("default")
        .worker_protocol_version(durable_workflow::WorkerProtocolVersion::V120)
        .build()
        .map_err(|e| format!("client: {e}"))?;
    let mut worker = durable_workflow::Worker::new(client.clone(), &queue)
        .worker_id(h.unique("worker"))
        .poll_timeout(Duration::from_secs(1))
        .cooperative_cancellation(true);
    worker.register_activity("cleanup", |_ctx, args: Value| async move {
        Ok(json!(format!(
            "cleaned {}",
            args[0].as_str().unwrap_or("?")
        )))
    });
    worker.register_workflow("rust.cooperative", |ctx, _input: Value| async move {
        match ctx.sleep(Duration::from_secs(3_600)).await {
            Err(Error::CooperativeCancellationRequested(cancelled)) => {
                let _shield = ctx.cancellation_shield()?;
                ctx.activity("cleanup", json!(["order"])).await?;
                Err(Error::CooperativeCancellationRequested(cancelled))
            }
            Err(other) => Err(other),
            Ok(()) => Ok(json!("never cancelled")),
        }
    });
    let handle = client
        .start_workflow("rust.cooperative", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let requester = handle.clone();
    let watcher = h.clone();
    let mut side: Outcome = Ok(());
    let side_ref = &mut side;
    let during = async move {
        *side_ref = async {
            watcher.until_event(&requester, "TimerScheduled").await?;
            let first = requester
                .request_cancellation(durable_workflow::CooperativeCancellationOptions {
                    reason: Some("conformance cooperative".into()),
                    cleanup_timeout_seconds: Some(120),
                })
                .await
                .map_err(|e| format!("request_cancellation: {e}"))?;
            check(!first.duplicate, || format!("first request {first:?}"))?;
            let deadline = std::time::Instant::now() + Duration::from_secs(90);
            loop {
                if requester.describe().await.is_ok_and(|d| d.is_terminal()) {
                    return Ok(());
                }
                if std::time::Instant::now() > deadline {
                    return Err("the run did not close after its cancellation".into());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        .await;
    };
    worker
        .run_until(during)
        .await
        .map_err(|e| format!("worker stopped: {e}"))?;
    side?;
    let description = handle
        .describe()
        .await
        .map_err(|e| format!("describe: {e}"))?;
    check(description.status.as_deref() == Some("cancelled"), || {
        format!("status {:?}", description.status)
    })?;
    let events = h.history(&handle).await?;
    let kinds = types(&events);
    let at = |kind: &str| kinds.iter().position(|k| *k == kind);
    match (
        at("CooperativeCancellationRequested"),
        at("CooperativeCancellationDelivered"),
        at("ActivityCompleted"),
    ) {
        (Some(requested), Some(delivered), Some(cleaned))
            if requested < delivered
                && delivered < cleaned
                && kinds.last() == Some(&"WorkflowCancelled")
                && !kinds.contains(&"WorkflowTaskFailed") =>
        {
            Ok(())
        }
        _ => Err(format!("history {kinds:?}")),
    }
}

/// An activity whose `cancellation_policy` is `Abandon` (protocol 1.20,
/// a total timeout required): the cooperative cancellation is delivered at
/// it at once, the workflow runs a shielded cleanup activity and ends
/// cancelled with the activity listed on `WorkflowCancelled` as abandoned;
/// the attempt is told nothing and runs on to its end after the close,
/// its completion accepted with nothing appended to the closed run.
async fn cooperative_activity_abandon(h: Harness) -> Outcome {
    let queue = h.unique("abandon");
    let client = durable_workflow::Client::builder(h.url.clone())
        .namespace("default")
        .worker_protocol_version(durable_workflow::WorkerProtocolVersion::V120)
        .build()
        .map_err(|e| format!("client: {e}"))?;
    let mut worker = durable_workflow::Worker::new(client.clone(), &queue)
        .worker_id(h.unique("worker"))
        .poll_timeout(Duration::from_secs(1))
        .cooperative_cancellation(true);
    worker.register_activity("cleanup", |_ctx, _args: Value| async move {
        Ok(json!("cleaned"))
    });
    let started = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let (on_start, on_finish) = (started.clone(), finished.clone());
    worker.register_activity("independent", move |_ctx, _args: Value| {
        let (on_start, on_finish) = (on_start.clone(), on_finish.clone());
        async move {
            on_start.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(4)).await;
            on_finish.fetch_add(1, Ordering::SeqCst);
            Ok(json!("independent"))
        }
    });
    worker.register_workflow("rust.abandon", |ctx, _input: Value| async move {
        let options = no_retry()
            .start_to_close_timeout(Duration::from_secs(120))
            .schedule_to_close_timeout(Duration::from_secs(180))
            .cancellation_policy(durable_workflow::CancellationPolicy::Abandon);
        match ctx
            .activity_with_options("independent", options, json!([]))
            .await
        {
            Err(Error::CooperativeCancellationRequested(cancelled)) => {
                let _shield = ctx.cancellation_shield()?;
                ctx.activity("cleanup", json!([])).await?;
                Err(Error::CooperativeCancellationRequested(cancelled))
            }
            Err(other) => Err(other),
            Ok(_) => Ok(json!("never cancelled")),
        }
    });
    let handle = client
        .start_workflow("rust.abandon", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let requester = handle.clone();
    let watcher = h.clone();
    let mut side: Outcome = Ok(());
    let side_ref = &mut side;
    let mut closed_events = Vec::new();
    let closed_ref = &mut closed_events;
    let during = async move {
        *side_ref = async {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while started.load(Ordering::SeqCst) == 0 {
                if std::time::Instant::now() > deadline {
                    return Err("the activity never started".into());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            requester
                .request_cancellation(durable_workflow::CooperativeCancellationOptions {
                    reason: Some("conformance abandon".into()),
                    cleanup_timeout_seconds: Some(120),
                })
                .await
                .map_err(|e| format!("request_cancellation: {e}"))?;
            let deadline = std::time::Instant::now() + Duration::from_secs(90);
            while !requester.describe().await.is_ok_and(|d| d.is_terminal()) {
                if std::time::Instant::now() > deadline {
                    return Err("the run did not close after its cancellation".into());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            *closed_ref = watcher.history(&requester).await?;
            // The attempt runs on to its end after the close.
            while finished.load(Ordering::SeqCst) == 0 {
                if std::time::Instant::now() > deadline {
                    return Err("the abandoned attempt never finished".into());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // Its completion is accepted: the closed run's pending
            // activities (the abandoned one) reach zero.
            let url = format!("{}/api/workflows/{}", watcher.url, requester.workflow_id);
            loop {
                let described = watcher.get(&url).await?;
                if described["pending"]["activities"] == json!(0) {
                    return Ok(());
                }
                if std::time::Instant::now() > deadline {
                    return Err(format!(
                        "the abandoned activity never completed: {described}"
                    ));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        .await;
    };
    worker
        .run_until(during)
        .await
        .map_err(|e| format!("worker stopped: {e}"))?;
    side?;
    let description = handle
        .describe()
        .await
        .map_err(|e| format!("describe: {e}"))?;
    check(description.status.as_deref() == Some("cancelled"), || {
        format!("status {:?}", description.status)
    })?;
    let kinds = types(&closed_events);
    check(
        kinds.last() == Some(&"WorkflowCancelled")
            && kinds.contains(&"CooperativeCancellationDelivered")
            && !kinds.contains(&"ActivityCancelled")
            && !kinds.contains(&"WorkflowTaskFailed"),
        || format!("history {kinds:?}"),
    )?;
    let last = closed_events.last().cloned().unwrap_or_default();
    let abandoned = &last["payload"]["abandoned_activities"];
    check(abandoned[0]["sequence"] == json!(1), || {
        format!("WorkflowCancelled {last}")
    })?;
    let after = h.history(&handle).await?;
    check(after.len() == closed_events.len(), || {
        format!("history grew after the close: {:?}", types(&after))
    })
}

/// Cooperative cancellation that waits for cleanup (protocol 1.20): a
/// delivery at a child whose `cancellation_policy` is
/// `WaitCancellationCompleted` parks the parent's claim (`delivered: false`,
/// `claim_released`) while the child, given a request of its own, cleans
/// up; the parent is delivered at the child once the child has ended. A
/// delivery at a running activity with that policy parks until the worker
/// has dropped the attempt's callback and acknowledged it
/// (`acknowledge-cancellation`, recorded as `ActivityCancelled`). A
/// delivery at a Nexus call waiting for its outcome (a worker built with
/// `nexus_cooperative_cancellation(true)`) parks while the operation's
/// workflow run, given a request of its own, cleans up.
async fn cooperative_cancellation_waits(h: Harness) -> Outcome {
    let queue = h.unique("coop-waits");
    let client = durable_workflow::Client::builder(h.url.clone())
        .namespace("default")
        .worker_protocol_version(durable_workflow::WorkerProtocolVersion::V120)
        .build()
        .map_err(|e| format!("client: {e}"))?;
    // A Nexus operation bound to the waiting kid, one per run of the scenario.
    let operation = queue.to_ascii_lowercase();
    let base = "/api/service-endpoints";
    for (path, body) in [
        (
            base.to_owned(),
            json!({"endpoint_name": "rust-conformance"}),
        ),
        (
            format!("{base}/rust-conformance/services"),
            json!({"service_name": "cooperative"}),
        ),
        (
            format!("{base}/rust-conformance/services/cooperative/operations"),
            json!({"operation_name": operation, "operation_mode": "sync",
                   "handler_binding_kind": "start_workflow",
                   "handler_binding": {"workflow_type": "rust.waiting_kid", "task_queue": queue}}),
        ),
    ] {
        let (status, answer) = h.post(&path, &body).await?;
        check(status == 201 || status == 409, || {
            format!("POST {path}: {status} {answer}")
        })?;
    }
    let mut worker = durable_workflow::Worker::new(client.clone(), &queue)
        .worker_id(h.unique("worker"))
        .poll_timeout(Duration::from_secs(1))
        .cooperative_cancellation(true)
        .nexus_cooperative_cancellation(true);
    worker.register_activity("cleanup", |_ctx, args: Value| async move {
        Ok(json!(format!(
            "cleaned {}",
            args[0].as_str().unwrap_or("?")
        )))
    });
    let attempt_running = Arc::new(AtomicUsize::new(0));
    let running = attempt_running.clone();
    worker.register_activity("linger", move |_ctx, _args: Value| {
        let running = running.clone();
        async move {
            running.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(300)).await;
            Ok(json!("lingered"))
        }
    });
    worker.register_workflow("rust.waiting_kid", |ctx, _input: Value| async move {
        match ctx.sleep(Duration::from_secs(3_600)).await {
            Err(Error::CooperativeCancellationRequested(cancelled)) => {
                let _shield = ctx.cancellation_shield()?;
                ctx.activity("cleanup", json!(["kid"])).await?;
                Err(Error::CooperativeCancellationRequested(cancelled))
            }
            Err(other) => Err(other),
            Ok(()) => Ok(json!("never cancelled")),
        }
    });
    let kid_options = ChildWorkflowOptions::new(queue.clone())
        .cancellation_policy(durable_workflow::CancellationPolicy::WaitCancellationCompleted);
    worker.register_workflow("rust.waiting_parent", move |ctx, _input: Value| {
        let options = kid_options.clone();
        async move {
            match ctx
                .start_child_workflow("rust.waiting_kid", options, json!([]))
                .await
            {
                Err(Error::CooperativeCancellationRequested(cancelled)) => {
                    let _shield = ctx.cancellation_shield()?;
                    ctx.activity("cleanup", json!(["parent"])).await?;
                    Err(Error::CooperativeCancellationRequested(cancelled))
                }
                Err(other) => Err(other),
                Ok(_) => Ok(json!("never cancelled")),
            }
        }
    });
    worker.register_workflow("rust.waiting_activity", |ctx, _input: Value| async move {
        let options = no_retry()
            .start_to_close_timeout(Duration::from_secs(600))
            .cancellation_policy(durable_workflow::CancellationPolicy::WaitCancellationCompleted);
        match ctx
            .activity_with_options("linger", options, json!([]))
            .await
        {
            Err(Error::CooperativeCancellationRequested(cancelled)) => {
                let _shield = ctx.cancellation_shield()?;
                ctx.activity("cleanup", json!(["activity"])).await?;
                Err(Error::CooperativeCancellationRequested(cancelled))
            }
            Err(other) => Err(other),
            Ok(_) => Ok(json!("never cancelled")),
        }
    });
    let op = operation.clone();
    worker.register_workflow("rust.waiting_nexus", move |ctx, _input: Value| {
        let op = op.clone();
        async move {
            match ctx
                .call_nexus_service("rust-conformance", "cooperative", &op, json!([]))
                .await
            {
                Err(Error::CooperativeCancellationRequested(cancelled)) => {
                    let _shield = ctx.cancellation_shield()?;
                    ctx.activity("cleanup", json!(["nexus caller"])).await?;
                    Err(Error::CooperativeCancellationRequested(cancelled))
                }
                Err(other) => Err(other),
                Ok(_) => Ok(json!("never cancelled")),
            }
        }
    });
    let parent = client
        .start_workflow("rust.waiting_parent", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let waiting = client
        .start_workflow(
            "rust.waiting_activity",
            &queue,
            &h.unique("coop-act"),
            json!([]),
        )
        .await
        .map_err(|e| format!("start: {e}"))?;
    let nexus = client
        .start_workflow(
            "rust.waiting_nexus",
            &queue,
            &h.unique("coop-nexus"),
            json!([]),
        )
        .await
        .map_err(|e| format!("start: {e}"))?;
    let watcher = h.clone();
    let (p, w, n) = (parent.clone(), waiting.clone(), nexus.clone());
    let mut side: Outcome = Ok(());
    let side_ref = &mut side;
    let during = async move {
        *side_ref = async {
            watcher.until_event(&p, "ChildRunStarted").await?;
            // The child has reached its timer when its history shows it.
            let child_id = format!("{}:child:1", p.run_id.as_deref().unwrap_or_default());
            let deadline = std::time::Instant::now() + Duration::from_secs(90);
            loop {
                let child = watcher
                    .get(&format!("{}/api/workflows/{child_id}", watcher.url))
                    .await
                    .unwrap_or_default();
                if let Some(run) = child["run_id"].as_str() {
                    let history = watcher
                        .get(&format!(
                            "{}/api/workflows/{child_id}/runs/{run}/history?page_size=1000",
                            watcher.url
                        ))
                        .await?;
                    if history["events"]
                        .as_array()
                        .is_some_and(|e| e.iter().any(|e| e["event_type"] == "TimerScheduled"))
                    {
                        break;
                    }
                }
                if std::time::Instant::now() > deadline {
                    return Err("the child never reached its timer".into());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            wait_until(
                || attempt_running.load(Ordering::SeqCst) > 0,
                "the activity's attempt",
            )
            .await?;
            // The Nexus operation's run has reached its timer.
            watcher.until_event(&n, "ServiceCallStarted").await?;
            let caller = watcher.history(&n).await?;
            let linked = caller
                .iter()
                .find(|e| e["event_type"] == "ServiceCallStarted")
                .and_then(|e| e["payload"]["linked_workflow_instance_id"].as_str())
                .unwrap_or_default()
                .to_owned();
            let deadline = std::time::Instant::now() + Duration::from_secs(90);
            loop {
                let run = watcher
                    .get(&format!("{}/api/workflows/{linked}", watcher.url))
                    .await
                    .unwrap_or_default();
                if let Some(run) = run["run_id"].as_str() {
                    let history = watcher
                        .get(&format!(
                            "{}/api/workflows/{linked}/runs/{run}/history?page_size=1000",
                            watcher.url
                        ))
                        .await?;
                    if history["events"]
                        .as_array()
                        .is_some_and(|e| e.iter().any(|e| e["event_type"] == "TimerScheduled"))
                    {
                        break;
                    }
                }
                if std::time::Instant::now() > deadline {
                    return Err("the Nexus operation's run never reached its timer".into());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            for handle in [&p, &w, &n] {
                handle
                    .request_cancellation(durable_workflow::CooperativeCancellationOptions {
                        reason: Some("conformance waits".into()),
                        cleanup_timeout_seconds: Some(120),
                    })
                    .await
                    .map_err(|e| format!("request_cancellation: {e}"))?;
            }
            let deadline = std::time::Instant::now() + Duration::from_secs(90);
            loop {
                if p.describe().await.is_ok_and(|d| d.is_terminal())
                    && w.describe().await.is_ok_and(|d| d.is_terminal())
                    && n.describe().await.is_ok_and(|d| d.is_terminal())
                {
                    return Ok(());
                }
                if std::time::Instant::now() > deadline {
                    return Err("the runs did not close after their cancellation".into());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        .await;
    };
    worker
        .run_until(during)
        .await
        .map_err(|e| format!("worker stopped: {e}"))?;
    side?;
    for (handle, resolved, kind) in [
        (&parent, "ChildRunCancelled", "child"),
        (&waiting, "ActivityCancelled", "activity"),
        (&nexus, "ServiceCallCancelled", "service_operation"),
    ] {
        let description = handle
            .describe()
            .await
            .map_err(|e| format!("describe: {e}"))?;
        check(description.status.as_deref() == Some("cancelled"), || {
            format!("{kind}: status {:?}", description.status)
        })?;
        let events = h.history(handle).await?;
        let kinds = types(&events);
        let at = |name: &str| kinds.iter().position(|k| *k == name);
        match (
            at("CooperativeCancellationRequested"),
            at(resolved),
            at("CooperativeCancellationDelivered"),
        ) {
            (Some(requested), Some(ended), Some(delivered))
                if requested < ended
                    && ended < delivered
                    && events[delivered]["payload"]["call_kind"] == json!(kind)
                    && kinds.last() == Some(&"WorkflowCancelled")
                    && !kinds.contains(&"WorkflowTaskFailed") => {}
            _ => return Err(format!("{kind}: history {kinds:?}")),
        }
    }
    Ok(())
}
