//! Structural limits end to end, printed as JSON.
//!
//! A fan-out workflow schedules more activities in one `all()` than
//! `pending_activity_count` allows, so its task is discarded and the run
//! fails with a classified `structural_limit` failure. A second run is
//! signalled past `pending_signal_count`: the extra signal is rejected with
//! the limit metadata and the run stays active. Small limits keep the
//! output short; the enforcement is the same at the defaults.
//!
//! Run with: `cargo run -p dwengine --example structural_limits`

use dwengine::store::{Command, Next, SignalRequest, StartRun, Store, StoreConfig};
use dwpolicy::{LimitKind, StructuralLimits};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut limits = StructuralLimits::default();
    limits.set(LimitKind::PendingActivityCount, 5);
    limits.set(LimitKind::PendingSignalCount, 3);
    let store = Store::open_in_memory(StoreConfig {
        limits,
        ..StoreConfig::default()
    })?;

    let fan_out = store.start_run(StartRun {
        workflow_id: "order-batch-1".into(),
        workflow_type: "ProcessItemsWorkflow".into(),
        namespace: "default".into(),
        task_queue: "items".into(),
        arguments: json!({ "items": 8 }),
        ..StartRun::default()
    })?;
    let calls: Vec<Command> = (0..8)
        .map(|item| Command::activity("ProcessItemActivity", json!({ "item": item })))
        .collect();
    let task = store.execute_task(fan_out, |task| {
        task.all(&calls)?;
        Ok(Next::Wait)
    })?;

    let signalled = store.start_run(StartRun {
        workflow_id: "inbox-1".into(),
        workflow_type: "InboxWorkflow".into(),
        namespace: "default".into(),
        task_queue: "inbox".into(),
        ..StartRun::default()
    })?;
    let mut admissions = Vec::new();
    for item in 0..4 {
        let request = SignalRequest {
            name: "process-item".into(),
            payload: json!({ "item": item }),
            request_id: Some(format!("request-{item}")),
        };
        admissions.push(store.signal(signalled, request)?);
    }
    let signalled_run = store.run(signalled)?;

    let report = json!({
        "fan_out": {
            "task": task,
            "status": store.run(fan_out)?.status,
            "failures": store.failures(fan_out)?,
            "history": store.history(fan_out)?,
        },
        "signals": {
            "admissions": admissions,
            "status": signalled_run.status,
            "pending_signals": signalled_run.pending.signals,
            "history": store.history(signalled)?,
        },
        "health": store.health(),
        "capabilities": store.capabilities(),
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
