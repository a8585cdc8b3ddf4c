//! Projection drift and retention over loopback HTTP: what an operator sees
//! on `/api/system/health` and `/api/system/metrics` after retention pruned
//! a run, after projection rows went missing, and after a rebuild.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use dwengine::cache::MemoryCache;
use serde_json::{json, Value};
use support::TestServer;

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.database = Some(c.polling_cache_path.join("store.sqlite"));
        c.history_retention = Duration::ZERO;
        c.retention_throttle = Duration::from_millis(1);
        c.drift_report_ttl = Duration::ZERO;
    })
}

fn finish(s: &TestServer, workflow_id: &str) {
    s.start_workflow("default", workflow_id, "q");
    let (_, polled) = s.poll("workflow", "default", "q", workflow_id, 1000);
    let (status, done) = s.complete(
        &polled["task"],
        json!([{ "type": "complete_workflow", "result": { "codec": "json", "blob": "1" } }]),
    );
    assert_eq!(status, 200, "{done}");
}

fn projections(s: &TestServer) -> Value {
    let (status, health) = s.get("/api/system/health");
    assert_eq!(status, 200, "{health}");
    health["projections"].clone()
}

fn drift_metric(s: &TestServer) -> Value {
    let (status, body) = s.get("/api/system/metrics?namespace=default");
    assert_eq!(status, 200, "{body}");
    let disclosed = &body["cardinality"]["metrics"]["dw_projection_drift_total"];
    assert_eq!(
        disclosed["table"]["cardinality"],
        "finite_projection_tables"
    );
    assert_eq!(
        disclosed["namespace"]["cardinality"],
        "server_scope_no_label"
    );
    body["metrics"]["dw_projection_drift_total"].clone()
}

fn needs_rebuild(metric: &Value, table: &str) -> u64 {
    metric["by_table"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == table)
        .and_then(|t| t["needs_rebuild"].as_u64())
        .unwrap()
}

#[test]
fn health_and_metrics_carry_drift_through_pruning_legacy_absence_and_rebuild() {
    let s = server();
    finish(&s, "old");
    std::thread::sleep(Duration::from_millis(5));
    let (_, beat) = s.post(
        "/api/worker/register",
        json!({ "worker_id": "w", "task_queue": "q" }),
    );
    assert!(beat["pruned_run_id"].is_string(), "{beat}");
    let (_, described) = s.get("/api/workflows/old");
    assert!(described["details_pruned_at"].is_string(), "{described}");

    // A fully pruned population: no warning, no backlog age, the root row counted.
    let block = projections(&s);
    assert_eq!(block["status"], "ok", "{block}");
    assert_eq!(
        (&block["retained_runs"], &block["pruned_runs"]),
        (&json!(1), &json!(1))
    );
    assert!(block["missing_summary_age_seconds"].is_null());
    let metric = drift_metric(&s);
    assert_eq!(metric["total"], 0);
    assert_eq!(metric["table_count"], 5);
    assert_eq!(metric["scope"], "server");
    let tables: Vec<&str> = metric["by_table"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["table"].as_str().unwrap())
        .collect();
    assert_eq!(
        tables,
        [
            "run_summaries",
            "run_waits",
            "run_timeline_entries",
            "run_timer_entries",
            "run_lineage_entries"
        ]
    );

    // Projection rows lost outside the engine (as after an upgrade from an
    // engine without them) are a real finding.
    finish(&s, "kept");
    let db = rusqlite::Connection::open(s.dir.path().join("store.sqlite")).unwrap();
    db.execute(
        "DELETE FROM run_summaries WHERE run_id = (SELECT id FROM runs WHERE workflow_id = 'kept')",
        [],
    )
    .unwrap();
    db.execute(
        "DELETE FROM run_timeline_entries WHERE run_id = (SELECT id FROM runs WHERE workflow_id = 'kept')",
        [],
    )
    .unwrap();
    let block = projections(&s);
    assert_eq!(block["status"], "needs_rebuild", "{block}");
    assert_eq!(block["rebuild_eligible_runs"], 1);
    assert!(block["missing_summary_age_seconds"].is_u64(), "{block}");
    let metric = drift_metric(&s);
    assert_eq!(metric["total"], 2);
    assert_eq!(needs_rebuild(&metric, "run_summaries"), 1);
    assert_eq!(needs_rebuild(&metric, "run_timeline_entries"), 1);
    assert_eq!(needs_rebuild(&metric, "run_waits"), 0);

    let (status, rebuilt) = s.post("/api/system/projections/rebuild", json!({ "limit": 50 }));
    assert_eq!(status, 200, "{rebuilt}");
    assert_eq!(
        (&rebuilt["rebuilt_runs"], &rebuilt["more"]),
        (&json!(1), &json!(false))
    );
    assert_eq!(rebuilt["projections"]["status"], "ok");
    // The pruned run stays pruned: no history, no summary.
    let pruned_summaries: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM run_summaries s JOIN runs r ON r.id = s.run_id WHERE r.workflow_id = 'old'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(pruned_summaries, 0);
    let run_id = described["run_id"].as_str().unwrap();
    let (status, history) = s.get(&format!("/api/workflows/old/runs/{run_id}/history"));
    assert_eq!(status, 200, "{history}");
    assert_eq!(history["events"], json!([]), "{history}");
    assert_eq!(drift_metric(&s)["total"], 0);

    let (status, operator) = s.get("/api/system/operator-metrics");
    assert_eq!(status, 200, "{operator}");
    assert_eq!(
        operator["runs"]["total"], 2,
        "the pruned root row still counts"
    );
    assert_eq!(operator["runs"]["completed"], 2);
    assert_eq!(operator["runs"]["running"], 0);
    assert_eq!(operator["workers"]["registered"], 1);
    assert_eq!(operator["tasks"]["workflow_ready"], 0);
    assert_eq!(operator["projections"]["status"], "ok");
    assert_eq!(operator["projections"]["pruned_runs"], 1);
    assert!(operator["structural_limits"].is_object(), "{operator}");

    let (status, refused) = s.post("/api/system/projections/rebuild", json!({ "limit": "all" }));
    assert_eq!(status, 400, "{refused}");
}
