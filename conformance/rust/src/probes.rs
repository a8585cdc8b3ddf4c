//! More of the Rust SDK's public workflow and client APIs driven against
//! dwserver: activity retries with heartbeats and a non-retryable failure, a
//! heartbeat timeout, queries and updates during a run, version markers over
//! several replays, continue-as-new with new options, search-attribute
//! upserts found through the client's list, a run timeout, a child
//! terminated while its parent waits, a timer that loses a selection, and
//! a failed run redriven from its failed activity.

// The SDK's error type is large; its API returns it from every workflow call.
#![allow(clippy::result_large_err)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use durable_workflow::{
    json, ActivityError, ActivityFailureKind, ActivityOptions, ActivityRetryPolicy,
    ChildWorkflowFailureKind, ChildWorkflowOptions, ContinueAsNewOptions, Error, ParallelOperation,
    SearchAttributeUpdate, Value, WorkflowListOptions, WorkflowStartOptions,
};

use crate::harness::{check, types, Harness, Outcome};

/// A flaky activity that heartbeats its attempt number and succeeds on the
/// third attempt, then an activity that fails with a non-retryable error
/// under a retry policy that would allow five attempts: the first returns
/// its third attempt's result, the second fails once, as non-retryable.
pub async fn activity_retries_and_non_retryable(h: Harness) -> Outcome {
    let queue = h.unique("retries");
    let mut worker = h.worker(&queue);
    let attempts = Arc::new(AtomicUsize::new(0));
    let terminal_attempts = Arc::new(AtomicUsize::new(0));
    let seen = attempts.clone();
    worker.register_activity("flaky", move |ctx, _args: Value| {
        let seen = seen.clone();
        async move {
            let attempt = seen.fetch_add(1, Ordering::SeqCst) + 1;
            ctx.heartbeat(json!({"attempt": attempt})).await?;
            if attempt < 3 {
                return Err(Error::WorkerLoop(format!("planned failure {attempt}")));
            }
            Ok(json!({"attempt": attempt, "retry_attempt": ctx.retry_info().attempt_number()}))
        }
    });
    let seen = terminal_attempts.clone();
    worker.register_activity("terminal", move |_ctx, _args: Value| {
        let seen = seen.clone();
        async move {
            seen.fetch_add(1, Ordering::SeqCst);
            Err(ActivityError::new("CardDeclined", "the card was declined")
                .non_retryable(true)
                .into())
        }
    });
    worker.register_workflow("rust.retries", |ctx, _input: Value| async move {
        let retry = ActivityRetryPolicy::new(5).exponential_backoff(
            Duration::from_secs(1),
            1,
            Some(Duration::from_secs(1)),
        );
        let options = ActivityOptions::new()
            .retry_policy(retry)
            .start_to_close_timeout(Duration::from_secs(30))
            .heartbeat_timeout(Duration::from_secs(30));
        let flaky = ctx
            .activity_with_options("flaky", options.clone(), json!([]))
            .await?;
        let terminal = match ctx
            .activity_with_options("terminal", options, json!([]))
            .await
        {
            Err(Error::ActivityFailed(f)) => json!({
                "failed": f.kind == ActivityFailureKind::Failed,
                "non_retryable": f.non_retryable,
                "attempt": f.attempt_number,
                "type": f.activity_type,
            }),
            Err(other) => return Err(other),
            Ok(v) => json!({"unexpected": v}),
        };
        Ok(json!({"flaky": flaky, "terminal": terminal}))
    });
    let handle = h
        .client
        .start_workflow("rust.retries", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let result = h.drive(&worker, &handle, async { Ok(()) }).await?;
    check(
        result["flaky"]["attempt"] == json!(3)
            && result["terminal"]["failed"] == json!(true)
            && result["terminal"]["non_retryable"] == json!(true)
            && terminal_attempts.load(Ordering::SeqCst) == 1,
        || {
            format!(
                "result {result}, terminal attempts {}",
                terminal_attempts.load(Ordering::SeqCst)
            )
        },
    )
}

/// An activity that stops heartbeating times out by its heartbeat timeout;
/// the workflow sees a timed-out failure naming the heartbeat.
pub async fn activity_heartbeat_timeout(h: Harness) -> Outcome {
    let queue = h.unique("heartbeat-timeout");
    let mut worker = h.worker(&queue);
    worker.register_activity("silent", |ctx, _args: Value| async move {
        ctx.heartbeat(json!({"phase": "started"})).await?;
        // Never heartbeats again; returns long after the timeout.
        tokio::time::sleep(Duration::from_secs(8)).await;
        Ok(json!("too late"))
    });
    worker.register_workflow("rust.heartbeat_timeout", |ctx, _input: Value| async move {
        let options = ActivityOptions::new()
            .retry_policy(ActivityRetryPolicy::new(1))
            .start_to_close_timeout(Duration::from_secs(60))
            .heartbeat_timeout(Duration::from_secs(2));
        match ctx
            .activity_with_options("silent", options, json!([]))
            .await
        {
            Err(Error::ActivityFailed(f)) => Ok(json!({
                "timed_out": f.kind == ActivityFailureKind::TimedOut,
                "timeout_kind": f.timeout_kind,
                "reason": f.reason,
            })),
            Err(other) => Err(other),
            Ok(v) => Ok(json!({"unexpected": v})),
        }
    });
    let handle = h
        .client
        .start_workflow("rust.heartbeat_timeout", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let result = h.drive(&worker, &handle, async { Ok(()) }).await?;
    check(
        result["timed_out"] == json!(true)
            && result["timeout_kind"]
                .as_str()
                .is_some_and(|k| k.contains("heartbeat")),
        || format!("result {result}"),
    )
}

/// A query and an update while the run waits on a signal; the update's
/// result comes back to the client, the query sees the signals so far.
pub async fn query_and_update_during_run(h: Harness) -> Outcome {
    let queue = h.unique("query-update");
    let mut worker = h.worker(&queue);
    worker.register_workflow("rust.query_update", |ctx, _input: Value| async move {
        let first = ctx.wait_signal("item").await?;
        let second = ctx.wait_signal("item").await?;
        let updates = ctx.updates("add")?;
        Ok(json!({"first": first, "second": second, "updates": updates}))
    });
    worker.register_query("rust.query_update", "items", |q, _args: Value| async move {
        Ok(json!(q.signals("item")))
    });
    worker.register_update("rust.query_update", "add", |_q, args: Value| async move {
        Ok(json!({"added": args}))
    });
    let handle = h
        .client
        .start_workflow("rust.query_update", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let during = {
        let handle = handle.clone();
        let h = h.clone();
        async move {
            handle
                .signal("item", json!(["a"]))
                .await
                .map_err(|e| format!("signal: {e}"))?;
            h.until_event(&handle, "SignalReceived").await?;
            let queried = handle
                .query("items", json!([]))
                .await
                .map_err(|e| format!("query: {e}"))?;
            let updated = handle
                .update("add", json!([7]), None)
                .await
                .map_err(|e| format!("update: {e}"))?;
            handle
                .signal("item", json!(["b"]))
                .await
                .map_err(|e| format!("signal: {e}"))?;
            check(queried.to_string().contains("\"a\""), || {
                format!("query answer {queried}")
            })?;
            check(updated.to_string().contains('7'), || {
                format!("update answer {updated}")
            })
        }
    };
    let result = h.drive(&worker, &handle, during).await?;
    check(
        result["first"].to_string().contains('a') && result["second"].to_string().contains('b'),
        || format!("result {result}"),
    )
}

/// `get_version` for two change ids and a patch across several workflow
/// tasks (each a full replay from history), the same decisions each time.
pub async fn versions_over_replays(h: Harness) -> Outcome {
    let queue = h.unique("versions");
    let mut worker = h.worker(&queue);
    worker.register_activity(
        "step",
        |_ctx, args: Value| async move { Ok(args[0].clone()) },
    );
    worker.register_workflow("rust.versions", |ctx, _input: Value| async move {
        let a = ctx.get_version("change-a", -1, 1)?;
        let one = ctx.activity("step", json!([1])).await?;
        let b = ctx.get_version("change-b", 0, 3)?;
        ctx.sleep(Duration::from_secs(1)).await?;
        let patched = ctx.patched("patch-c")?;
        let again_a = ctx.get_version("change-a", -1, 1)?;
        let id = ctx.uuid_v4()?;
        let two = ctx.activity("step", json!([2])).await?;
        ctx.deprecate_patch("patch-d")?;
        let id_again = ctx.uuid_v4()?;
        Ok(json!({
            "a": a, "b": b, "patched": patched, "again_a": again_a,
            "steps": [one, two], "uuids_differ": id != id_again,
        }))
    });
    let handle = h
        .client
        .start_workflow("rust.versions", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let result = h.drive(&worker, &handle, async { Ok(()) }).await?;
    check(
        result
            == json!({
                "a": 1, "b": 3, "patched": true, "again_a": 1,
                "steps": [1, 2], "uuids_differ": true,
            }),
        || format!("result {result}"),
    )
}

/// Continue-as-new into another workflow type on another task queue; the
/// client's result follows the chain to the new run's result.
pub async fn continue_as_new_with_options(h: Harness) -> Outcome {
    let queue = h.unique("can-options");
    let next_queue = h.unique("can-next");
    let mut worker = h.worker(&queue);
    let mut next = h.worker(&next_queue);
    let target = next_queue.clone();
    worker.register_workflow("rust.can_first", move |ctx, input: Value| {
        let target = target.clone();
        async move {
            ctx.continue_as_new_with_options(
                ContinueAsNewOptions::new()
                    .workflow_type("rust.can_second")
                    .task_queue(target),
                json!([format!("from {}", input[0].as_str().unwrap_or("?"))]),
            )
        }
    });
    next.register_workflow("rust.can_second", |_ctx, input: Value| async move {
        Ok(json!({"second_got": input[0].clone()}))
    });
    let handle = h
        .client
        .start_workflow("rust.can_first", &queue, &queue, json!(["first"]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let next_worker = next.run();
    tokio::pin!(next_worker);
    let result = tokio::select! {
        result = h.drive(&worker, &handle, async { Ok(()) }) => result?,
        stopped = &mut next_worker => return Err(format!("second worker stopped: {stopped:?}")),
    };
    check(result == json!({"second_got": "from first"}), || {
        format!("result {result}")
    })?;
    let described = handle
        .describe()
        .await
        .map_err(|e| format!("describe: {e}"))?;
    check(
        described.workflow_type.as_deref() == Some("rust.can_second")
            && described
                .raw
                .get("continued_from_run_id")
                .is_some_and(Value::is_string),
        || format!("describe {described:?}"),
    )
}

/// Search attributes upserted from workflow code are shown in the client's
/// list (filtered by type and status; a visibility query is refused with
/// the field named) and in describe. The first
/// upsert names an attribute the namespace has not registered: dwserver
/// fails that workflow task itself (a `WorkflowTaskFailed` naming the
/// attribute) and the worker keeps running; once the attribute is
/// registered the retried task upserts it. Regression: the completion was
/// refused with a 422, which stops a Rust SDK worker ("worker stopped: http
/// 422").
pub async fn search_attributes_listed(h: Harness) -> Outcome {
    let queue = h.unique("search");
    let mut worker = h.worker(&queue);
    let marker = h.unique("order");
    let attribute = format!("OrderKey{}", durable_workflow::Uuid::new_v4().simple());
    let (value, name) = (marker.clone(), attribute.clone());
    worker.register_workflow("rust.search", move |ctx, _input: Value| {
        let (value, name) = (value.clone(), name.clone());
        async move {
            let update = SearchAttributeUpdate::new()
                .keyword(name, value)
                .map_err(|e| Error::WorkerLoop(e.to_string()))?;
            ctx.upsert_search_attributes(update)?;
            ctx.wait_signal("done").await?;
            Ok(json!("ok"))
        }
    });
    let handle = h
        .client
        .start_workflow("rust.search", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let during = {
        let handle = handle.clone();
        let h = h.clone();
        let (marker, attribute) = (marker.clone(), attribute.clone());
        async move {
            h.until_event(&handle, "WorkflowTaskFailed").await?;
            let events = h.history(&handle).await?;
            let failed = events
                .iter()
                .find(|e| e["event_type"] == "WorkflowTaskFailed")
                .map(|e| e["payload"]["message"].to_string())
                .unwrap_or_default();
            check(
                failed.contains(&attribute) && failed.contains("not a registered"),
                || format!("WorkflowTaskFailed message {failed}"),
            )?;
            let (status, body) = h
                .post(
                    "/api/search-attributes",
                    &json!({"name": attribute, "type": "keyword"}),
                )
                .await?;
            check(status == 201, || format!("register: {status} {body}"))?;
            h.until_event(&handle, "SearchAttributesUpserted").await?;
            // dwserver filters lists by workflow type and status (a
            // visibility query is refused, naming the field); the upserted
            // attribute shows on the run's summary.
            let page = h
                .client
                .list_workflows(
                    WorkflowListOptions::new()
                        .workflow_type("rust.search")
                        .status("running")
                        .page_size(100),
                )
                .await
                .map_err(|e| format!("list: {e}"))?;
            let found: Vec<_> = page
                .workflows
                .iter()
                .filter(|w| w.workflow_id == handle.workflow_id)
                .map(|w| w.search_attributes.clone())
                .collect();
            check(
                found.len() == 1 && found[0].get(&attribute) == Some(&json!(marker)),
                || format!("list: {found:?}"),
            )?;
            let query = format!("{attribute} = \"{marker}\"");
            match h
                .client
                .list_workflows(WorkflowListOptions::new().query(query.clone()))
                .await
            {
                Err(e) if e.to_string().contains("\"query\"") => {}
                other => return Err(format!("list {query}: {other:?}")),
            }
            let described = handle
                .describe()
                .await
                .map_err(|e| format!("describe: {e}"))?;
            check(
                described
                    .raw
                    .get("search_attributes")
                    .and_then(|a| a.get(&attribute))
                    == Some(&json!(marker)),
                || format!("describe {:?}", described.raw.get("search_attributes")),
            )?;
            handle
                .signal("done", json!([]))
                .await
                .map_err(|e| format!("signal: {e}"))?;
            Ok(())
        }
    };
    let result = h.drive_past_task_failures(&worker, &handle, during).await?;
    check(result == json!("ok"), || format!("result {result}"))
}

/// A run timeout closes a run that sleeps past it; describe and the result
/// say so.
pub async fn run_timeout(h: Harness) -> Outcome {
    let queue = h.unique("run-timeout");
    let mut worker = h.worker(&queue);
    worker.register_workflow("rust.run_timeout", |ctx, _input: Value| async move {
        ctx.sleep(Duration::from_secs(120)).await?;
        Ok(json!("woke"))
    });
    let handle = h
        .client
        .start_workflow_with_options(
            "rust.run_timeout",
            &queue,
            &h.unique("run-timeout-wf"),
            WorkflowStartOptions::new()
                .run_timeout_seconds(2)
                .execution_timeout_seconds(60),
            json!([]),
        )
        .await
        .map_err(|e| format!("start: {e}"))?;
    match h.drive(&worker, &handle, async { Ok(()) }).await {
        Ok(v) => return Err(format!("unexpected result {v}")),
        Err(e) if e.starts_with("the SDK failed") => return Err(e),
        Err(_) => {}
    }
    let described = handle
        .describe()
        .await
        .map_err(|e| format!("describe: {e}"))?;
    check(
        described.status.as_deref() == Some("timed_out") || described.is_terminal(),
        || format!("describe {described:?}"),
    )
}

/// A child terminated by the client while its parent waits on it: the
/// parent sees a terminated child failure and completes.
pub async fn child_terminated(h: Harness) -> Outcome {
    let queue = h.unique("parent-t");
    let child_queue = h.unique("child-t");
    let mut worker = h.worker(&queue);
    let mut children = h.worker(&child_queue);
    children.register_workflow("rust.kid_waits", |ctx, _input: Value| async move {
        ctx.wait_signal("never").await?;
        Ok(json!("signalled"))
    });
    let options = ChildWorkflowOptions::new(child_queue.clone());
    worker.register_workflow("rust.parent_t", move |ctx, _input: Value| {
        let options = options.clone();
        async move {
            match ctx
                .start_child_workflow("rust.kid_waits", options, json!([]))
                .await
            {
                Err(Error::ChildWorkflowFailed(f)) => Ok(json!({
                    "terminated": f.kind == ChildWorkflowFailureKind::Terminated,
                    "reason": f.reason,
                    "child": f.child_workflow_id,
                })),
                Err(other) => Err(other),
                Ok(r) => Ok(json!({"unexpected": r.result})),
            }
        }
    });
    let handle = h
        .client
        .start_workflow("rust.parent_t", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let during = {
        let handle = handle.clone();
        let h = h.clone();
        async move {
            h.until_event(&handle, "ChildRunStarted").await?;
            let events = h.history(&handle).await?;
            let child_id = events
                .iter()
                .find_map(|e| e["payload"]["child_workflow_instance_id"].as_str())
                .ok_or_else(|| format!("no child id in {:?}", types(&events)))?
                .to_owned();
            let child_run = events
                .iter()
                .find_map(|e| e["payload"]["child_workflow_run_id"].as_str())
                .ok_or_else(|| format!("no child run id in {:?}", types(&events)))?
                .to_owned();
            // Terminate once the child's first workflow task is completed
            // (its signal wait recorded), not while the child worker holds
            // it: the SDK's worker (4.10.2) stops on any 409 to a workflow
            // task completion but a run timeout's, and a task of a run
            // terminated under it is answered `task_not_leased`, which the
            // Python SDK takes as an ambiguous rejection. This scenario is
            // about the parent hearing of the termination, not that race.
            until_run_event(&h, &child_id, &child_run, "SignalWaitOpened").await?;
            h.client
                .terminate_workflow(&child_id, Default::default())
                .await
                .map_err(|e| format!("terminate child {child_id}: {e}"))?;
            Ok(())
        }
    };
    let child_worker = children.run();
    tokio::pin!(child_worker);
    let result = tokio::select! {
        result = h.drive(&worker, &handle, during) => result?,
        stopped = &mut child_worker => return Err(format!("child worker stopped: {stopped:?}")),
    };
    check(result["terminated"] == json!(true), || {
        format!("result {result}")
    })
}

/// Waits until one run's history holds an event of `event_type`.
async fn until_run_event(h: &Harness, workflow_id: &str, run: &str, event_type: &str) -> Outcome {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(events) = h.run_history(workflow_id, run).await {
            if events.iter().any(|e| e["event_type"] == event_type) {
                return Ok(());
            }
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!(
                "no {event_type} in {workflow_id}'s run {run} within 30 s"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A long timer loses a selection to a signal; the run completes at once,
/// well before the timer would fire.
pub async fn timer_loses_selection(h: Harness) -> Outcome {
    let queue = h.unique("timer-loses");
    let mut worker = h.worker(&queue);
    worker.register_workflow("rust.timer_loses", |ctx, _input: Value| async move {
        let selected = ctx
            .select(vec![
                ParallelOperation::timer(Duration::from_secs(300)),
                ParallelOperation::signal("go"),
            ])
            .await?;
        let after = ctx.sleep(Duration::from_secs(1)).await;
        Ok(json!({"index": selected.index, "kind": selected.kind, "slept": after.is_ok()}))
    });
    let handle = h
        .client
        .start_workflow("rust.timer_loses", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let during = {
        let handle = handle.clone();
        let h = h.clone();
        async move {
            h.until_event(&handle, "TimerScheduled").await?;
            handle
                .signal("go", json!([]))
                .await
                .map_err(|e| format!("signal: {e}"))?;
            Ok(())
        }
    };
    let result = h.drive(&worker, &handle, during).await?;
    check(
        result["index"] == json!(1) && result["slept"] == json!(true),
        || format!("result {result}"),
    )
}

/// The client's paginated readers (the SDK's `workflow_pagination`
/// example): `iter_workflows` one summary per page over three runs of a
/// type, and `iter_workflow_history` two events per page over a run, each
/// seeing every item once, in order.
pub async fn pagination(h: Harness) -> Outcome {
    let queue = h.unique("pages");
    let workflow_type = format!("rust.pages.{queue}");
    let mut worker = h.worker(&queue);
    worker.register_activity(
        "step",
        |_ctx, args: Value| async move { Ok(args[0].clone()) },
    );
    worker.register_workflow(workflow_type.clone(), |ctx, input: Value| async move {
        let a = ctx.activity("step", json!([input[0].clone()])).await?;
        ctx.sleep(Duration::from_millis(10)).await?;
        let b = ctx.activity("step", json!([a])).await?;
        Ok(b)
    });
    let mut handles = Vec::new();
    for i in 0..3 {
        handles.push(
            h.client
                .start_workflow(&workflow_type, &queue, &h.unique("page-wf"), json!([i]))
                .await
                .map_err(|e| format!("start {i}: {e}"))?,
        );
    }
    for (i, handle) in handles.iter().enumerate() {
        let result = h.drive(&worker, handle, async { Ok(()) }).await?;
        check(result == json!(i), || format!("run {i}: result {result}"))?;
    }
    let mut runs = h.client.iter_workflows(
        WorkflowListOptions::new()
            .workflow_type(workflow_type.clone())
            .page_size(1),
    );
    let mut listed = Vec::new();
    while let Some(run) = runs
        .next()
        .await
        .map_err(|e| format!("iter_workflows: {e}"))?
    {
        listed.push(run.workflow_id);
        check(listed.len() <= 10, || {
            format!("iter_workflows never ends: {listed:?}")
        })?;
    }
    let mut expected: Vec<String> = handles.iter().map(|h| h.workflow_id.clone()).collect();
    expected.reverse(); // newest first
    check(listed == expected, || {
        format!("iter_workflows {listed:?}, expected {expected:?}")
    })?;
    let handle = &handles[0];
    let all = h.history(handle).await?;
    let run = handle
        .describe()
        .await
        .map_err(|e| format!("describe: {e}"))?
        .run_id
        .ok_or("no run id")?;
    let mut events = h.client.iter_workflow_history(
        handle.workflow_id.clone(),
        run,
        durable_workflow::WorkflowHistoryOptions::new().page_size(2),
    );
    let mut paged = Vec::new();
    while let Some(event) = events
        .next()
        .await
        .map_err(|e| format!("iter_workflow_history: {e}"))?
    {
        paged.push(event.event_type);
        check(paged.len() <= all.len() + 1, || {
            format!("iter_workflow_history repeats: {paged:?}")
        })?;
    }
    check(paged == types(&all), || {
        format!("paged {paged:?}, whole {:?}", types(&all))
    })
}

/// The counters and the switch of the redrive scenario's activities.
#[derive(Clone, Default)]
struct RedriveCalls {
    first: Arc<AtomicUsize>,
    second: Arc<AtomicUsize>,
    healed: Arc<std::sync::atomic::AtomicBool>,
}

/// A worker of `queue` running `rust.redrive`: `first` returns
/// `"recorded"`, `second` fails (one attempt) until `calls.healed`.
fn redrive_worker(
    h: &Harness,
    queue: &str,
    calls: &RedriveCalls,
) -> Result<durable_workflow::Worker, String> {
    let mut worker = h.worker(queue);
    let first = calls.first.clone();
    worker.register_activity("first", move |_ctx, _args: Value| {
        let first = first.clone();
        async move {
            first.fetch_add(1, Ordering::SeqCst);
            Ok(json!("recorded"))
        }
    });
    let (second, healed) = (calls.second.clone(), calls.healed.clone());
    worker.register_activity("second", move |_ctx, args: Value| {
        let (second, healed) = (second.clone(), healed.clone());
        async move {
            second.fetch_add(1, Ordering::SeqCst);
            if !healed.load(Ordering::SeqCst) {
                return Err(ActivityError::new("Unavailable", "the second step is down").into());
            }
            Ok(json!(format!(
                "{} then retried",
                args[0].as_str().unwrap_or("?")
            )))
        }
    });
    worker.register_workflow("rust.redrive", |ctx, _input: Value| async move {
        let once = ActivityOptions::new()
            .retry_policy(ActivityRetryPolicy::new(1))
            .start_to_close_timeout(Duration::from_secs(30));
        let first = ctx
            .activity_with_options("first", once.clone(), json!([]))
            .await?;
        let second = ctx
            .activity_with_options("second", once, json!([first.clone()]))
            .await?;
        Ok(json!({"first": first, "second": second}))
    });
    // The workflow's source identity, what the SDK calls safe redrive.
    worker
        .set_workflow_definition_sources("rust.redrive", &[include_str!("probes.rs")])
        .map_err(|e| format!("definition sources: {e}"))?;
    Ok(worker)
}

/// A run whose second activity fails is redriven with `redrive_workflow_run`
/// (through the handle): the answer names a distinct successor and the
/// resume step 2, a retry with the same request id the same successor; the
/// successor replays the first activity from its reused completion (it runs
/// once in all) and schedules only the second again, which now succeeds.
pub async fn redrive(h: Harness) -> Outcome {
    let queue = h.unique("redrive");
    let calls = RedriveCalls::default();
    let worker = redrive_worker(&h, &queue, &calls)?;
    let handle = h
        .client
        .start_workflow("rust.redrive", &queue, &queue, json!([]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let failed_run = handle.run_id.clone().ok_or("the start named no run")?;
    let outcome = h.drive(&worker, &handle, async { Ok(()) }).await;
    check(outcome.is_err(), || {
        format!("the first run should fail: {outcome:?}")
    })?;
    let events = h.run_history(&handle.workflow_id, &failed_run).await?;
    let last = events.last().cloned().unwrap_or_default();
    check(
        last["event_type"] == "WorkflowFailed"
            && last["payload"]["failed_step_sequence"] == json!(2),
        || format!("the failed run's last event {last}"),
    )?;

    calls.healed.store(true, Ordering::SeqCst);
    let original = handle.clone();
    // A redrive needs the queue's workers to run the definition that
    // failed the run (the fingerprint set above): redrive while a worker of
    // it is registered, then serve the successor with it.
    let worker = redrive_worker(&h, &queue, &calls)?;
    let mut redrives = None;
    let answers = &mut redrives;
    let registered = format!("{}/api/workers?task_queue={queue}", h.url);
    let (workflow_id, run, client, harness) = (
        handle.workflow_id.clone(),
        failed_run.clone(),
        h.client.clone(),
        h.clone(),
    );
    let during = async move {
        let deadline = tokio::time::Instant::now() + crate::harness::DEADLINE;
        loop {
            let listed = harness.get(&registered).await?;
            if listed["workers"].as_array().is_some_and(|w| !w.is_empty()) {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!("no worker of {registered} registered"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let first = handle
            .redrive(Some("redrive-once"))
            .await
            .map_err(|e| format!("redrive: {e}"))?;
        let again = client
            .redrive_workflow_run(&workflow_id, &run, Some("redrive-once"))
            .await
            .map_err(|e| format!("retried redrive: {e}"))?;
        *answers = Some((first, again));
        Ok(())
    };
    let result = h.drive(&worker, &original, during).await?;
    let (redriven, again) = redrives.ok_or("the redrive did not run")?;
    check(
        redriven.source_run_id == failed_run
            && redriven.run_id != failed_run
            && redriven.resume_step_sequence == 2,
        || format!("redrive answered {:?}", redriven.raw),
    )?;
    check(again.run_id == redriven.run_id, || {
        format!(
            "a retry answered {:?}, the first {:?}",
            again.raw, redriven.raw
        )
    })?;
    let mut successor = original.clone();
    successor.run_id = Some(redriven.run_id.clone());
    let (first, second) = (
        calls.first.load(Ordering::SeqCst),
        calls.second.load(Ordering::SeqCst),
    );
    check(
        result == json!({"first": "recorded", "second": "recorded then retried"})
            && (first, second) == (1, 2),
        || format!("result {result}; first ran {first} time(s), second {second}"),
    )?;
    let events = h
        .run_history(&original.workflow_id, &redriven.run_id)
        .await?;
    let reused = events
        .iter()
        .find(|e| e["event_type"] == "ActivityCompleted")
        .cloned()
        .unwrap_or_default();
    check(
        types(&events)[..3] == ["WorkflowStarted", "ActivityScheduled", "ActivityCompleted"]
            && reused["payload"]["reused_from_run_id"] == json!(failed_run)
            && types(&events).last() == Some(&"WorkflowCompleted"),
        || format!("successor history {:?}, reused {reused}", types(&events)),
    )?;
    // The completed successor is not redriven: 409 run_not_failed.
    match successor.redrive(None).await {
        Err(Error::Http { status, body })
            if status.as_u16() == 409 && body.contains("run_not_failed") =>
        {
            Ok(())
        }
        other => Err(format!("redrive of a completed run: {other:?}")),
    }
}
