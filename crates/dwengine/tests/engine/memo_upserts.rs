//! Memo upserts from workflow code (`upsert_memo`): both SDKs send the patch
//! as an Avro payload envelope; the server decodes it, merges it onto the
//! run's memo (`null` removes a key), checks the merged memo against
//! `memo_size_bytes` before storing it, and records `MemoUpserted` with the
//! patch as sent and the merged memo, both Avro envelopes the SDKs replay.

use crate::{common, support};

use std::sync::Arc;
use std::time::Duration;

use dwengine::cache::MemoryCache;
use dwengine::store::avro_value::{decode_envelope, encode_envelope};
use dwengine::store::{RunStatus, TaskKind, WorkflowCommand, WorkflowTaskFence};
use dwpolicy::LimitKind;
use serde_json::{json, Value};
use support::{next_workflow_task as next_task, TestServer};

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |_| {})
}

fn upsert(entries: Value) -> Value {
    json!({ "type": "upsert_memo", "entries": encode_envelope(&entries).unwrap() })
}

#[test]
fn an_upsert_merges_onto_the_memo_and_history_keeps_patch_and_merged() {
    let s = server();
    let (status, body) = s.post(
        "/api/workflows",
        json!({ "workflow_id": "memo", "workflow_type": "Order", "task_queue": "memo",
                "input": { "codec": "json", "blob": "[]" },
                "memo": { "customer": "ada", "stage": "new" } }),
    );
    assert_eq!(status, 201, "{body}");
    let task = next_task(&s, "memo");
    let (status, body) = s.complete(
        &task,
        json!([upsert(json!({ "stage": "paid", "total": 42, "tags": ["a", "b"] })),
               { "type": "start_timer", "delay_seconds": 3600 },
               upsert(json!({ "customer": null, "ratio": 0.5 }))]),
    );
    assert_eq!(status, 200, "{body}");
    let (_, described) = s.get("/api/workflows/memo");
    assert_eq!(
        described["memo"],
        json!({ "stage": "paid", "total": 42, "tags": ["a", "b"], "ratio": 0.5 }),
        "{described}"
    );
    let run = described["run_id"].as_str().unwrap();
    let (_, page) = s.get(&format!("/api/workflows/memo/runs/{run}/history"));
    let upserts: Vec<&Value> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event_type"] == "MemoUpserted")
        .map(|e| &e["payload"])
        .collect();
    assert_eq!(upserts.len(), 2, "{page}");
    // Each takes its command's sequence (the timer between them took 2).
    assert_eq!(upserts[0]["sequence"], 1);
    assert_eq!(upserts[1]["sequence"], 3);
    assert_eq!(
        upserts[1]["entries"],
        encode_envelope(&json!({ "customer": null, "ratio": 0.5 })).unwrap()
    );
    assert_eq!(
        decode_envelope(&upserts[0]["merged"]).unwrap(),
        json!({ "customer": "ada", "stage": "paid", "total": 42, "tags": ["a", "b"] })
    );
    assert_eq!(
        decode_envelope(&upserts[1]["merged"]).unwrap(),
        described["memo"]
    );
}

#[test]
fn malformed_memo_entries_are_refused_by_field_and_nothing_is_applied() {
    let s = server();
    s.start_workflow("default", "bad-memo", "bad-memo");
    // A leased workflow task's answer says memo upserts are supported (the
    // Rust SDK reads it there before it sends one).
    let (status, answer) = s.poll("workflow", "default", "bad-memo", "caps", 2000);
    assert_eq!(status, 200, "{answer}");
    let capabilities = &answer["server_capabilities"];
    assert_eq!(
        capabilities["workflow_memo_updates"]["supported"], true,
        "{answer}"
    );
    assert!(capabilities["supported_workflow_task_commands"]
        .as_array()
        .unwrap()
        .contains(&json!("upsert_memo")));
    let task = answer["task"].clone();
    let (status, body) = s.complete(
        &task,
        json!([
            { "type": "upsert_memo", "entries": { "codec": "json", "blob": "{\"a\":1}" } },
            upsert(json!({})),
            upsert(json!({ "12": "an integer key" })),
            upsert(json!(["not", "a", "map"])),
        ]),
    );
    assert_eq!(status, 422, "{body}");
    for (i, words) in [
        "avro codec",
        "at least one entry",
        "must match",
        "string-keyed map",
    ]
    .iter()
    .enumerate()
    {
        let problem = body["validation_errors"][format!("commands.{i}.entries")][0]
            .as_str()
            .unwrap_or_else(|| panic!("no problem for commands.{i}.entries in {body}"));
        assert!(problem.contains(words), "{i}: {problem}");
    }
    let (_, described) = s.get("/api/workflows/bad-memo");
    assert_eq!(described["memo"], json!({}));
    assert_eq!(described["history_length"], 1);
}

#[test]
fn an_oversized_merged_memo_fails_the_run_before_it_is_stored() {
    let store = common::memory_store(&[(LimitKind::MemoSizeBytes, 64)]);
    let run = store
        .start_workflow(common::start("big-memo"), None)
        .unwrap()
        .run;
    let task = store
        .lease_task(
            TaskKind::Workflow,
            "default",
            "orders",
            "w",
            "p",
            Duration::from_secs(30),
        )
        .unwrap()
        .expect("a ready workflow task");
    // Each patch alone is small; merged they pass the limit.
    let commands: Vec<WorkflowCommand> = [
        json!({ "a": "x".repeat(30) }),
        json!({ "b": "y".repeat(30) }),
    ]
    .into_iter()
    .map(|entries| serde_json::from_value(upsert(entries)).unwrap())
    .collect();
    let done = store
        .complete_workflow_task(
            task.task_id,
            WorkflowTaskFence {
                lease_owner: &task.lease_owner,
                attempt: task.attempt,
            },
            &commands,
        )
        .unwrap();
    assert_eq!(done.run_status, RunStatus::Failed);
    let exceeded = done.structural_limit.expect("the memo limit");
    assert_eq!(exceeded.kind, LimitKind::MemoSizeBytes);
    assert_eq!(exceeded.configured, 64);
    assert!(exceeded.value > 64, "{exceeded:?}");
    let described = store.describe(run).unwrap();
    assert!(described.run.memo.is_empty(), "{:?}", described.run.memo);
    assert_eq!(
        described.failures[0].structural_limit_kind.as_deref(),
        Some("memo_size_bytes")
    );
}
