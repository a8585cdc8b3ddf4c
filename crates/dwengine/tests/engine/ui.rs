//! The operator console (`/ui`) against a real server on loopback: sign-in
//! by cookie on an auth-enabled server, escaping of hostile ids and
//! payloads, the runs list's paging and filters, a run's limits, timeline,
//! failure details and pending activities, the exceptions table, actions
//! behind the operator role and a CSRF token, the operations page's charts,
//! and the setting that turns the console off.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use dwengine::cache::MemoryCache;
use dwengine::server::auth::{Role, Tokens};
use serde_json::{json, Value};
use support::TestServer;

fn server(tweak: impl FnOnce(&mut dwengine::server::ServerConfig)) -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), tweak)
}

fn with_tokens(c: &mut dwengine::server::ServerConfig) {
    c.auth = Some(
        Tokens::new([
            ("op-token".to_owned(), Role::Operator),
            ("admin-token".to_owned(), Role::Admin),
            ("worker-token".to_owned(), Role::Worker),
        ])
        .with_bound("tenant-token", Role::Operator, &["tenant-a"]),
    );
}

/// A browser's view: no redirects followed, the sign-in cookie kept.
struct Browser {
    agent: ureq::Agent,
    base: String,
    cookie: Option<String>,
}

/// One answer: status, headers of interest, body.
struct Page {
    status: u16,
    location: Option<String>,
    set_cookie: Option<String>,
    content_type: String,
    csp: Option<String>,
    body: String,
}

impl Browser {
    fn new(s: &TestServer) -> Browser {
        Browser {
            agent: ureq::AgentBuilder::new()
                .redirects(0)
                .timeout(Duration::from_secs(60))
                .build(),
            base: s.base.clone(),
            cookie: None,
        }
    }

    fn page(&self, request: ureq::Request, form: Option<&[(&str, &str)]>) -> Page {
        let request = match &self.cookie {
            Some(cookie) => request.set("cookie", cookie),
            None => request,
        };
        let result = match form {
            Some(pairs) => request.send_form(pairs),
            None => request.call(),
        };
        let response = match result {
            Ok(r) | Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("transport error: {e}"),
        };
        let header = |name: &str| response.header(name).map(str::to_owned);
        Page {
            status: response.status(),
            location: header("location"),
            set_cookie: header("set-cookie"),
            content_type: header("content-type").unwrap_or_default(),
            csp: header("content-security-policy"),
            body: response.into_string().unwrap_or_default(),
        }
    }

    fn get(&self, path: &str) -> Page {
        self.page(self.agent.get(&format!("{}{path}", self.base)), None)
    }

    fn post(&self, path: &str, form: &[(&str, &str)]) -> Page {
        self.page(self.agent.post(&format!("{}{path}", self.base)), Some(form))
    }

    fn post_from(&self, path: &str, origin: &str, form: &[(&str, &str)]) -> Page {
        let request = self
            .agent
            .post(&format!("{}{path}", self.base))
            .set("origin", origin);
        self.page(request, Some(form))
    }

    /// Signs in with `token`; panics unless the server set the cookie.
    fn sign_in(&mut self, token: &str) {
        let page = self.post("/ui/sign-in", &[("token", token), ("next", "/ui/runs")]);
        assert_eq!(page.status, 303, "{}", page.body);
        let cookie = page.set_cookie.expect("a sign-in cookie");
        assert!(
            cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
            "{cookie}"
        );
        self.cookie = Some(cookie.split(';').next().unwrap().to_owned());
    }
}

/// The value of hidden input `name` in a page.
fn hidden(body: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = body
        .find(&marker)
        .unwrap_or_else(|| panic!("no {name} in {body}"))
        + marker.len();
    body[start..][..body[start..].find('"').unwrap()].to_owned()
}

fn envelope(json_text: &str) -> Value {
    json!({ "codec": "json", "blob": json_text })
}

#[test]
fn an_auth_enabled_console_signs_in_by_cookie_and_checks_roles() {
    let s = server(with_tokens);
    let mut browser = Browser::new(&s);
    let page = browser.get("/ui/runs?ns=default");
    assert_eq!(page.status, 303);
    assert_eq!(
        page.location.as_deref(),
        Some("/ui/sign-in?next=%2Fui%2Fruns%3Fns%3Ddefault")
    );
    let sign_in = browser.get("/ui/sign-in?next=%2Fui%2Fruns");
    assert_eq!(sign_in.status, 200);
    assert!(sign_in.body.contains("name=\"token\""), "{}", sign_in.body);

    assert_eq!(
        browser.post("/ui/sign-in", &[("token", "nope")]).status,
        401
    );
    assert_eq!(
        browser
            .post("/ui/sign-in", &[("token", "worker-token")])
            .status,
        403
    );
    // A token bound to namespaces would see every namespace here: refused
    // at sign-in, and its cookie (were it set by hand) on every page.
    let bound = browser.post("/ui/sign-in", &[("token", "tenant-token")]);
    assert_eq!(bound.status, 403);
    assert!(bound.set_cookie.is_none());
    assert!(bound.body.contains("bound to namespaces"), "{}", bound.body);
    // (base64url of "tenant-token")
    browser.cookie = Some("dwserver_console=dGVuYW50LXRva2Vu".into());
    assert_eq!(browser.get("/ui/runs").status, 403);
    // A forged cookie is no sign-in.
    browser.cookie = Some("dwserver_console=b3AtdG9rZW4x".into());
    assert_eq!(browser.get("/ui/runs").status, 303);

    browser.sign_in("op-token");
    let runs = browser.get("/ui/runs");
    assert_eq!(runs.status, 200, "{}", runs.body);
    assert!(runs.content_type.starts_with("text/html"));
    assert!(runs.csp.unwrap().contains("default-src 'none'"));
    assert!(runs.body.contains("role: operator"));
    // The operations page is the admin's, like /api/system.
    assert_eq!(browser.get("/ui/operations").status, 403);
    // The cookie is no API credential: the API still wants its bearer token.
    assert_eq!(s.get("/api/workflows").0, 401);

    let csrf = hidden(&runs.body, "csrf");
    assert_eq!(
        browser.post("/ui/sign-out", &[("csrf", "forged")]).status,
        403
    );
    let out = browser.post("/ui/sign-out", &[("csrf", &csrf)]);
    assert_eq!(out.status, 303);
    assert!(out.set_cookie.unwrap().contains("Max-Age=0"));

    browser.sign_in("admin-token");
    assert_eq!(browser.get("/ui/operations").status, 200);
}

#[test]
fn hostile_ids_and_payloads_render_as_text() {
    let s = server(|_| {});
    let hostile = "<script>alert('id')</script>";
    let (status, body) = s.post(
        "/api/workflows",
        json!({ "workflow_id": hostile, "workflow_type": "<img src=x onerror=alert(1)>",
                "task_queue": "q", "input": envelope("[\"<script>alert(2)</script>\"]"),
                "memo": { "note": "</code><script>alert(3)</script>" } }),
    );
    assert_eq!(status, 201, "{body}");
    let browser = Browser::new(&s);
    let runs = browser.get("/ui/runs");
    assert_eq!(runs.status, 200);
    assert!(
        runs.body
            .contains("&lt;script&gt;alert('id')&lt;/script&gt;"),
        "{}",
        runs.body
    );
    assert!(runs.body.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(!runs.body.contains("<script") && !runs.body.contains("<img"));
    let link = format!("/ui/run?ns=default&wf={}", url(hostile));
    let run = browser.get(&link);
    assert_eq!(run.status, 200, "{}", run.body);
    assert!(
        !run.body.contains("<script") && !run.body.contains("<img"),
        "{}",
        run.body
    );
    assert!(run.body.contains("&lt;/code&gt;&lt;script&gt;alert(3)"));
}

fn url(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The workflow ids listed on a runs page, in order.
fn listed(body: &str) -> Vec<String> {
    body.split("<td class=\"wf\"><a href=\"")
        .skip(1)
        .map(|rest| {
            let text = &rest[rest.find('>').unwrap() + 1..];
            text[..text.find('<').unwrap()].to_owned()
        })
        .collect()
}

fn next_link(body: &str) -> Option<String> {
    let start = body.find("<a class=\"next\" href=\"")? + "<a class=\"next\" href=\"".len();
    Some(body[start..][..body[start..].find('"')?].replace("&amp;", "&"))
}

#[test]
fn the_runs_list_pages_and_filters_with_the_apis_bounds() {
    let s = server(|c| c.ui.filter_scan_limit = 40);
    assert_eq!(
        s.post(
            "/api/search-attributes",
            json!({ "name": "Region", "type": "keyword" })
        )
        .0,
        201
    );
    for i in 0..60 {
        let (status, body) = s.post(
            "/api/workflows",
            json!({ "workflow_id": format!("order-{i:02}"), "workflow_type": if i % 2 == 0 { "Even" } else { "Odd" },
                    "task_queue": "q", "search_attributes": { "Region": if i % 3 == 0 { "eu" } else { "us" } } }),
        );
        assert_eq!(status, 201, "{body}");
    }
    s.post("/api/workflows/order-59/terminate", json!({}));
    let browser = Browser::new(&s);
    let first = browser.get("/ui/runs");
    let ids = listed(&first.body);
    assert_eq!(ids.len(), 50);
    assert_eq!(ids[0], "order-59");
    let next = next_link(&first.body).expect("a next page");
    let second = browser.get(&next);
    assert_eq!(listed(&second.body).len(), 10);
    assert_eq!(listed(&second.body).last().unwrap(), "order-00");
    assert!(next_link(&second.body).is_none());

    let odd = browser.get("/ui/runs?type=Odd&status=running");
    assert_eq!(listed(&odd.body).len(), 29, "{}", odd.body);
    assert_eq!(
        listed(&browser.get("/ui/runs?status=terminated").body),
        ["order-59"]
    );
    assert_eq!(
        listed(&browser.get("/ui/runs?workflow_id=order-07").body),
        ["order-07"]
    );
    assert!(browser
        .get("/ui/runs?workflow_id=missing")
        .body
        .contains("No run has the workflow id"));
    // A search-attribute filter walks 40 runs per page: 60 runs take two.
    let eu = browser.get("/ui/runs?attr=Region&value=eu");
    let mut found = listed(&eu.body);
    assert!(eu.body.contains("examined 40 runs"), "{}", eu.body);
    let more = browser.get(&next_link(&eu.body).expect("the walk continues"));
    found.extend(listed(&more.body));
    assert!(next_link(&more.body).is_none());
    let expected: Vec<String> = (0..60)
        .rev()
        .filter(|i| i % 3 == 0)
        .map(|i| format!("order-{i:02}"))
        .collect();
    assert_eq!(found, expected);
    let bad = browser.get("/ui/runs?attr=a%27%29--&value=x");
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(browser.get("/ui/runs?page=bm90LWEtbnVtYmVy").status, 400);
    assert_eq!(browser.get("/ui/runs?ns=nowhere").status, 404);
}

#[test]
fn a_run_page_shows_limits_timeline_failures_and_pending_activities() {
    let s = server(|c| c.store.limits.pending_activity_count = 5);
    // A run past pending_activity_count.
    s.start_workflow("default", "fan", "q");
    let (_, task) = s.poll("workflow", "default", "q", "f", 0);
    let commands: Vec<_> = (0..7)
        .map(|i| json!({ "type": "schedule_activity", "activity_type": "a", "arguments": envelope(&i.to_string()) }))
        .collect();
    let (status, done) = s.complete(&task["task"], json!(commands));
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["run_status"], "failed");
    // A run with an activity, a timer and a long memo.
    let (status, body) = s.post(
        "/api/workflows",
        json!({ "workflow_id": "journey", "workflow_type": "Journey", "task_queue": "q",
                "memo": { "long": "m".repeat(2000) } }),
    );
    assert_eq!(status, 201, "{body}");
    let (_, task) = s.poll("workflow", "default", "q", "j", 0);
    let (status, done) = s.complete(
        &task["task"],
        json!([{ "type": "schedule_activity", "activity_type": "greet", "arguments": envelope("[\"x\"]") },
               { "type": "schedule_activity", "activity_type": "slow", "arguments": envelope("[1]") },
               { "type": "schedule_activity", "activity_type": "slow", "arguments": envelope("[2]") },
               { "type": "schedule_activity", "activity_type": "slow", "arguments": envelope("[3]") },
               { "type": "schedule_activity", "activity_type": "slow", "arguments": envelope("[4]") },
               { "type": "start_timer", "delay_seconds": 1 }]),
    );
    assert_eq!(status, 200, "{done}");
    let (_, activity) = s.poll("activity", "default", "q", "a", 0);
    let activity = &activity["task"];
    let (status, body) = s.post(
        &format!("/api/worker/activity-tasks/{}/complete", activity["task_id"].as_str().unwrap()),
        json!({ "activity_attempt_id": activity["activity_attempt_id"], "lease_owner": activity["lease_owner"],
                "result": envelope("\"hi\"") }),
    );
    assert_eq!(status, 200, "{body}");
    // The timer fires (its due sweep is the workflow poll's).
    assert!(support::eventually(Duration::from_secs(30), || {
        s.poll(
            "workflow",
            "default",
            "q",
            &format!("t{}", rand_suffix()),
            0,
        );
        s.get("/api/workflows/journey").1["pending"]["timers"] == 0
    }));

    let browser = Browser::new(&s);
    let fan = browser.get("/ui/run?wf=fan");
    assert_eq!(fan.status, 200, "{}", fan.body);
    for needle in [
        "<td class=\"category\">structural_limit</td>",
        "<td class=\"kind\">pending_activity_count</td>",
        "<td class=\"bound\">5</td>",
        "id=\"failure\"",
        "WorkflowFailed · structural_limit: pending_activity_count",
    ] {
        assert!(
            fan.body.contains(needle),
            "{needle} missing from {}",
            fan.body
        );
    }
    let journey = browser.get("/ui/run?wf=journey");
    assert_eq!(journey.status, 200, "{}", journey.body);
    for needle in [
        "class=\"span activity\"",
        "class=\"span activity open\"",
        "class=\"span timer\"",
        "activity · greet",
        "<code>pending_activity_count</code>",
        "<td class=\"current\">4</td>",
        "fill warn",
        "show all",
    ] {
        assert!(
            journey.body.contains(needle),
            "{needle} missing from {}",
            journey.body
        );
    }
    // The pending activity table: the slow one, its attempt 0 (never leased).
    assert!(journey.body.contains("<td>slow</td>"), "{}", journey.body);
    let whole = browser.get("/ui/run/payload?wf=journey&run=2&field=memo");
    assert_eq!(whole.status, 200);
    assert!(whole.content_type.starts_with("application/json"));
    assert_eq!(
        serde_json::from_str::<Value>(&whole.body).unwrap()["long"]
            .as_str()
            .unwrap()
            .len(),
        2000
    );
    let event = browser.get("/ui/run/payload?wf=journey&run=2&field=event-0");
    assert_eq!(
        serde_json::from_str::<Value>(&event.body).unwrap()["event_type"],
        "WorkflowStarted"
    );

    let exceptions = browser.get("/ui/exceptions?category=structural_limit");
    assert_eq!(exceptions.status, 200);
    assert!(
        exceptions
            .body
            .contains("<td class=\"kind\">pending_activity_count</td>"),
        "{}",
        exceptions.body
    );
    let recorded = s.get("/api/workflows/fan").1["failures"][0]["structural_limit_value"].clone();
    assert!(recorded.as_u64().is_some_and(|v| v >= 5), "{recorded}");
    let value = format!("<td class=\"value\">{recorded}</td>");
    assert!(
        exceptions.body.contains(&value),
        "{value} missing from {}",
        exceptions.body
    );
    assert!(
        fan.body.contains(&value),
        "{value} missing from {}",
        fan.body
    );
    assert!(
        exceptions
            .body
            .contains("/ui/run?ns=default&amp;wf=fan&amp;run=1#failure"),
        "{}",
        exceptions.body
    );
    let timeouts_only = browser.get("/ui/exceptions?category=timeout");
    assert!(!timeouts_only.body.contains("pending_activity_count"));
}

/// `POST path` on the API with a bearer token.
fn with_token(s: &TestServer, token: &str, path: &str, body: Value) -> (u16, Value) {
    let answer = ureq::post(&format!("{}{path}", s.base))
        .set("authorization", &format!("Bearer {token}"))
        .send_json(body);
    match answer {
        Ok(r) | Err(ureq::Error::Status(_, r)) => {
            (r.status(), r.into_json().unwrap_or(Value::Null))
        }
        Err(e) => panic!("transport error: {e}"),
    }
}

/// `GET path` on the API with a bearer token.
fn read_with_token(s: &TestServer, token: &str, path: &str) -> (u16, Value) {
    let answer = ureq::get(&format!("{}{path}", s.base))
        .set("authorization", &format!("Bearer {token}"))
        .call();
    match answer {
        Ok(r) | Err(ureq::Error::Status(_, r)) => {
            (r.status(), r.into_json().unwrap_or(Value::Null))
        }
        Err(e) => panic!("transport error: {e}"),
    }
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[test]
fn actions_need_the_operator_role_a_csrf_token_and_this_origin() {
    let s = server(with_tokens);
    let start = |id: &str| {
        let (status, body) = with_token(
            &s,
            "op-token",
            "/api/workflows",
            json!({ "workflow_id": id, "workflow_type": "T", "task_queue": "q" }),
        );
        assert_eq!(status, 201, "{body}");
    };
    start("to-cancel");
    start("to-signal");
    let mut browser = Browser::new(&s);
    browser.sign_in("op-token");
    let confirm = browser.get("/ui/run/confirm?wf=to-cancel&run=1&action=cancel");
    assert_eq!(confirm.status, 200, "{}", confirm.body);
    let csrf = hidden(&confirm.body, "csrf");
    let form = |csrf: &str| {
        vec![
            ("csrf", csrf.to_owned()),
            ("wf", "to-cancel".to_owned()),
            ("run", "1".to_owned()),
            ("action", "cancel".to_owned()),
        ]
    };
    let send = |browser: &Browser, pairs: Vec<(&str, String)>| {
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        browser.post("/ui/run/action", &pairs)
    };
    assert_eq!(send(&browser, form("")).status, 403);
    assert_eq!(send(&browser, form(&"0".repeat(64))).status, 403);
    let pairs = form(&csrf);
    let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(
        browser
            .post_from("/ui/run/action", "http://evil.example", &pairs)
            .status,
        403
    );
    assert_eq!(
        read_with_token(&s, "op-token", "/api/workflows/to-cancel").1["status"],
        "running"
    );
    let done = send(&browser, form(&csrf));
    assert_eq!(done.status, 303, "{}", done.body);
    assert!(done.location.unwrap().ends_with("&done=cancel"));
    assert_eq!(
        read_with_token(&s, "op-token", "/api/workflows/to-cancel").1["status"],
        "cancelled"
    );
    let signal = browser.post(
        "/ui/run/action",
        &[
            ("csrf", &csrf),
            ("wf", "to-signal"),
            ("action", "signal"),
            ("name", "go"),
            ("input", "[1]"),
        ],
    );
    assert_eq!(signal.status, 303, "{}", signal.body);
    assert_eq!(
        read_with_token(&s, "op-token", "/api/workflows/to-signal").1["pending"]["signals"],
        1
    );
    // Another session's CSRF token does not carry over.
    let mut other = Browser::new(&s);
    other.sign_in("admin-token");
    assert_eq!(send(&other, form(&csrf)).status, 403);
}

#[test]
fn the_operations_page_charts_sampled_series_and_lists_cache_families() {
    let s = server(|c| c.ui.sample_every = Duration::from_millis(50));
    s.start_workflow("default", "charted", "q");
    s.poll("workflow", "default", "q", "c", 0);
    let browser = Browser::new(&s);
    assert!(support::eventually(Duration::from_secs(30), || {
        let page = browser.get("/ui/operations");
        // The node-wide dw_post_commit_failures_total is charted from the
        // first sample; the run's series from the first sample after its start.
        page.status == 200
            && page.body.matches("<polyline").count() >= 1
            && page.body.contains("dw_workflow_runs_total")
    }));
    let page = browser.get("/ui/operations");
    for needle in [
        "long_poll_signals",
        "server:long-poll-signal:",
        "dw_workflow_runs_total",
        "<td>q</td>",
    ] {
        assert!(
            page.body.contains(needle),
            "{needle} missing from {}",
            page.body
        );
    }
}

#[test]
fn the_operations_page_reads_counts_not_the_drift_report() {
    // The drift report reads every retained run when it is recomputed; the
    // operations page must not trigger it, or its cost grows with the
    // namespace. With a reuse window of an hour, a report the page had
    // computed at 0 runs would still say 0 after a start.
    let s = server(|c| c.drift_report_ttl = Duration::from_secs(3600));
    let browser = Browser::new(&s);
    let page = browser.get("/ui/operations");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("workers registered"), "{}", page.body);
    s.start_workflow("default", "counted", "q");
    let (status, operator) = s.get("/api/system/operator-metrics");
    assert_eq!(status, 200, "{operator}");
    assert_eq!(operator["runs"]["total"], 1, "{operator}");
    assert_eq!(
        operator["projections"]["retained_runs"], 1,
        "the operations page computed (and cached) the drift report: {operator}"
    );
}

/// Every page with a query string reads it the same way: one it cannot
/// read (here a repeated field) is the console's 400 page, naming the
/// problem, never a bare framework rejection.
#[test]
fn an_unreadable_query_string_is_the_consoles_400_on_every_page() {
    let s = server(|_| {});
    let browser = Browser::new(&s);
    for page in [
        "/ui/runs",
        "/ui/run",
        "/ui/run/payload",
        "/ui/run/confirm",
        "/ui/exceptions",
        "/ui/operations",
    ] {
        let answer = browser.get(&format!("{page}?ns=a&ns=b"));
        assert_eq!(answer.status, 400, "{page}: {}", answer.body);
        assert!(answer.content_type.starts_with("text/html"), "{page}");
        assert!(
            answer.body.contains("unreadable query string"),
            "{page}: {}",
            answer.body
        );
    }
}

#[test]
fn the_console_can_be_turned_off() {
    let s = server(|c| c.ui.enabled = false);
    let browser = Browser::new(&s);
    let page = browser.get("/ui/runs");
    assert_eq!(page.status, 404);
    assert!(page.body.contains("route_not_found"));
}

#[test]
fn the_console_settings_come_from_the_environment_or_the_config_file_and_the_contract_lists_them() {
    use dwengine::server::ServerConfig;
    let read = |pairs: &[(&str, &str)]| {
        let env: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .chain([("DW_DATABASE_PATH".to_owned(), ":memory:".to_owned())])
            .collect();
        ServerConfig::from_lookup(|k| env.get(k).cloned(), true)
    };
    let defaults = read(&[]).unwrap();
    assert!(defaults.ui.enabled);
    assert_eq!(defaults.ui.filter_scan_limit, 1_000);
    assert_eq!(defaults.ui.chart_series_scan_limit, 24);
    let set = read(&[
        ("DW_SERVER_UI_ENABLED", "false"),
        ("DW_SERVER_UI_FILTER_SCAN_LIMIT", "50"),
        ("DW_SERVER_UI_CHART_SERIES_SCAN_LIMIT", "0"),
    ])
    .unwrap();
    assert!(!set.ui.enabled);
    assert_eq!(set.ui.filter_scan_limit, 50);
    assert_eq!(set.ui.chart_series_scan_limit, 24);
    let bad = read(&[("DW_SERVER_UI_ENABLED", "maybe")]).unwrap_err();
    assert!(bad.to_string().contains("DW_SERVER_UI_ENABLED"), "{bad}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dwserver.toml");
    std::fs::write(
        &file,
        "[server.ui]\nenabled = false\nfilter_scan_limit = 7\n",
    )
    .unwrap();
    let from_file = ServerConfig::load(
        |k| (k == "DW_DATABASE_PATH").then(|| ":memory:".to_owned()),
        Some(&file),
        true,
    )
    .unwrap();
    assert!(!from_file.ui.enabled);
    assert_eq!(from_file.ui.filter_scan_limit, 7);

    let contract = dwengine::server::contract::limits(&set);
    let enabled = contract
        .iter()
        .find(|l| l.config_key.as_deref() == Some("server.ui.enabled"))
        .expect("the contract lists server.ui.enabled");
    assert_eq!((enabled.default, enabled.current), (1, 0));
    assert_eq!(enabled.env.as_deref(), Some("DW_SERVER_UI_ENABLED"));
    assert!(contract.iter().any(|l| l.config_key.as_deref()
        == Some("server.ui.filter_scan_limit")
        && l.current == 50));
}
