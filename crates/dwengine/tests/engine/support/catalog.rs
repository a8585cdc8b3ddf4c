//! Nexus catalog set-up for the tests that call an operation rather than
//! test the catalog itself: an endpoint, its service and an operation bound
//! to a workflow type on a queue. Several test modules needed the same three
//! `POST`s and had grown copies that differed only in a name or the mode;
//! one place keeps them from drifting apart when the catalog's fields move.

use serde_json::{json, Value};

use super::TestServer;

/// The body that creates operation `name` in `mode` (`sync` or `async`),
/// bound to start workflow type `workflow_type` on `task_queue`.
pub fn start_workflow_operation(
    name: &str,
    mode: &str,
    workflow_type: &str,
    task_queue: &str,
) -> Value {
    json!({ "operation_name": name, "operation_mode": mode,
            "handler_binding_kind": "start_workflow",
            "handler_binding": { "workflow_type": workflow_type, "task_queue": task_queue } })
}

/// Creates endpoint `endpoint` and its service `service` in namespace `ns`.
pub fn endpoint_and_service(s: &TestServer, ns: &str, endpoint: &str, service: &str) {
    for (path, body) in [
        (
            "/api/service-endpoints".to_owned(),
            json!({ "endpoint_name": endpoint }),
        ),
        (
            format!("/api/service-endpoints/{endpoint}/services"),
            json!({ "service_name": service }),
        ),
    ] {
        let (status, answer) = s.post_ns(ns, &path, body);
        assert_eq!(status, 201, "{path}: {answer}");
    }
}

/// Creates the operation `body` describes under `endpoint`/`service` in `ns`.
pub fn operation(s: &TestServer, ns: &str, endpoint: &str, service: &str, body: Value) {
    let path = format!("/api/service-endpoints/{endpoint}/services/{service}/operations");
    let (status, answer) = s.post_ns(ns, &path, body);
    assert_eq!(status, 201, "{path}: {answer}");
}

/// billing/invoices/charge in `default`, in `mode`, bound to workflow type
/// `Charge` on queue `payments`.
pub fn billing(s: &TestServer, mode: &str) {
    endpoint_and_service(s, "default", "billing", "invoices");
    operation(
        s,
        "default",
        "billing",
        "invoices",
        start_workflow_operation("charge", mode, "Charge", "payments"),
    );
}

/// The mode the callers pass is the one the catalog stores (a test of the
/// async path must not run on a sync operation unnoticed).
#[test]
fn billing_creates_charge_in_the_mode_asked_for() {
    for mode in ["sync", "async"] {
        let s = TestServer::start(super::memory_cache(), |_| {});
        billing(&s, mode);
        let (status, answer) =
            s.get("/api/service-endpoints/billing/services/invoices/operations/charge");
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["operation_mode"], mode, "{answer}");
        assert_eq!(answer["handler_target_reference"], "Charge", "{answer}");
    }
}
