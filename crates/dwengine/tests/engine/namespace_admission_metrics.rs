//! `dw_namespace_request_admission_rejections` over loopback HTTP: the fixed
//! three-reason inventory for the current minute, read while the namespace's
//! budget is exhausted, and namespace churn that writes no keys.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dwengine::admission::{NamespaceLimit, NamespaceRequestAdmission};
use dwengine::cache::MemoryCache;
use serde_json::json;
use support::TestServer;

const REASONS: [&str; 3] = [
    "namespace_request_rate_exhausted",
    "namespace_request_concurrency_exhausted",
    "namespace_request_admission_unavailable",
];

/// Waits until at least 15 seconds remain in the current minute, so a test
/// that counts this minute's rejections does not straddle two buckets.
fn away_from_a_minute_boundary() {
    loop {
        let second = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            % 60;
        if second < 45 {
            return;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn rejections_are_reported_per_reason_for_the_current_minute() {
    let s = TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.namespace_limits.insert(
            "tenant".into(),
            NamespaceLimit {
                max_concurrent: 0,
                per_minute: 3,
            },
        );
    });
    s.namespace("tenant");
    away_from_a_minute_boundary();
    let mut refused = 0;
    for i in 0..10 {
        let (status, body, retry_after) = s.post_ns_header(
            "tenant",
            "/api/workflows",
            json!({ "workflow_id": format!("w{i}"), "workflow_type": "T", "task_queue": "q" }),
            "retry-after",
        );
        if status == 429 {
            assert_eq!(body["rejection_reason"], REASONS[0], "{body}");
            assert_eq!(body["retryable"], true);
            assert_eq!(retry_after.as_deref(), Some("1"), "{body}");
            refused += 1;
        }
    }
    assert!(refused >= 6, "{refused}");

    // Readable although the namespace's budget is spent.
    let (status, body) = s.get("/api/system/metrics?namespace=tenant");
    assert_eq!(status, 200, "{body}");
    let metric = &body["metrics"]["dw_namespace_request_admission_rejections"];
    assert_eq!(metric["configured"], true);
    assert_eq!(metric["max_requests_per_minute"], 3);
    assert!(metric["max_concurrent_requests"].is_null());
    assert_eq!(metric["rejections_by_reason"][REASONS[0]], refused);
    assert_eq!(metric["rejections_by_reason"][REASONS[1]], 0);
    assert_eq!(metric["rejections_by_reason"][REASONS[2]], 0);
    assert_eq!(metric["rejections_this_minute"], refused);
    assert!(metric["requests_this_minute"].as_u64().unwrap() >= 10);
    let disclosed = &body["cardinality"]["metrics"]["dw_namespace_request_admission_rejections"];
    assert_eq!(
        disclosed["namespace"]["cardinality"],
        "request_scope_not_label"
    );
    assert_eq!(
        disclosed["reason"]["cardinality"],
        "finite_three_reason_inventory"
    );
    assert_eq!(disclosed["reason"]["values"], json!(REASONS));
    // One warning per (namespace, reason, minute): one log-suppression key.
    let logs = format!("{}rejection-log:", NamespaceRequestAdmission::PREFIX);
    assert_eq!(s.keys(&logs), 1);
}

#[test]
fn thousands_of_unconfigured_namespaces_report_the_same_three_reasons_and_write_no_keys() {
    let s = TestServer::start(Arc::new(MemoryCache::default()), |_| {});
    for i in 0..2_000 {
        let ns = format!("churn-{i}");
        let (status, body) = s.get(&format!("/api/system/metrics?namespace={ns}"));
        assert_eq!(status, 200, "{body}");
        if i % 500 == 0 {
            let metric = &body["metrics"]["dw_namespace_request_admission_rejections"];
            assert_eq!(metric["configured"], false);
            let reasons = metric["rejections_by_reason"].as_object().unwrap();
            assert_eq!(reasons.len(), 3);
            assert!(reasons.values().all(|n| n == 0));
        }
    }
    assert_eq!(s.keys(NamespaceRequestAdmission::PREFIX), 0);
}
