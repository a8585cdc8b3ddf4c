use super::*;
use crate::cache::MemoryCache;
use serde_json::json;

fn broker(f: impl FnOnce(&mut QueryTaskSettings)) -> (Arc<MemoryCache>, WorkflowQueryTaskBroker) {
    let cache = Arc::new(MemoryCache::default());
    let mut settings = QueryTaskSettings {
        timeout_seconds: Some(5),
        ..QueryTaskSettings::default()
    };
    f(&mut settings);
    let broker = WorkflowQueryTaskBroker::new(cache.clone(), settings, "node-1");
    (cache, broker)
}

fn query(queue: &str, name: &str) -> NewQuery {
    NewQuery {
        namespace: "ns".into(),
        task_queue: queue.into(),
        run_id: 7,
        workflow_id: "wf".into(),
        workflow_type: "Order".into(),
        query_name: name.into(),
        arguments: json!(null),
    }
}

fn keys(cache: &MemoryCache) -> usize {
    cache.count_prefix(WorkflowQueryTaskBroker::PREFIX).unwrap()
}

#[test]
fn a_query_round_trip_removes_every_key_it_made() {
    let (cache, broker) = broker(|_| {});
    let task = broker.enqueue(query("q", "stage")).unwrap();
    assert_eq!(broker.pending("ns", "q").unwrap(), 1);
    let claimed = broker.claim("ns", "q", "w1", "p1").unwrap().unwrap();
    assert!(!claimed.replayed);
    assert_eq!(claimed.task.id, task.id);
    assert_eq!(claimed.task.attempt, 1);
    broker
        .answer(&task.id, "w1", 1, false, json!({"result": 3}))
        .unwrap();
    assert_eq!(
        broker.pending("ns", "q").unwrap(),
        0,
        "completion removes the id"
    );
    let answered = broker
        .await_answer(&task, Duration::from_millis(5))
        .unwrap()
        .unwrap();
    assert_eq!(answered.status, QueryStatus::Completed);
    assert_eq!(answered.answer, Some(json!({"result": 3})));
    assert_eq!(
        keys(&cache),
        0,
        "task, queue, lease, lock and index are gone"
    );
}

/// The caller's wait ended (its last look found no answer) and the worker
/// answered before the task was removed: the removal hands that answer
/// back, so a report told 200 is never a caller told 504. After the
/// removal a report finds nothing (404), the other side of the same lock.
#[test]
fn an_answer_recorded_after_the_callers_last_look_is_returned_by_the_removal() {
    let (cache, broker) = broker(|_| {});
    let task = broker.enqueue(query("q", "stage")).unwrap();
    broker.claim("ns", "q", "w1", "p1").unwrap().unwrap();
    broker
        .answer(&task.id, "w1", 1, false, json!({"result": 7}))
        .unwrap();
    let removed = broker.finish(&task).unwrap().expect("the answer");
    assert_eq!(removed.status, QueryStatus::Completed);
    assert_eq!(removed.answer, Some(json!({"result": 7})));
    assert_eq!(keys(&cache), 0);

    let late = broker.enqueue(query("q", "stage")).unwrap();
    broker.claim("ns", "q", "w1", "p2").unwrap().unwrap();
    assert!(broker.finish(&late).unwrap().is_none(), "not answered");
    assert!(matches!(
        broker.answer(&late.id, "w1", 1, false, json!(1)),
        Err(BrokerError::NotFound(_))
    ));
}

#[test]
fn reports_are_fenced_by_the_active_lease() {
    let (_, broker) = broker(|_| {});
    let task = broker.enqueue(query("q", "stage")).unwrap();
    let stale = |r: Result<(), BrokerError>| match r {
        Err(BrokerError::Stale { reason, .. }) => reason,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        stale(broker.answer(&task.id, "w1", 1, false, json!(1))),
        "query_task_not_leased"
    );
    broker.claim("ns", "q", "w1", "p1").unwrap().unwrap();
    assert_eq!(
        stale(broker.answer(&task.id, "w2", 1, false, json!(1))),
        "lease_owner_mismatch"
    );
    assert_eq!(
        stale(broker.answer(&task.id, "w1", 2, false, json!(1))),
        "query_task_attempt_mismatch"
    );
    assert!(matches!(
        broker.answer("nope", "w1", 1, false, json!(1)),
        Err(BrokerError::NotFound(_))
    ));
    broker
        .answer(&task.id, "w1", 1, true, json!({"message": "no"}))
        .unwrap();
    assert_eq!(
        broker.task(&task.id).unwrap().unwrap().status,
        QueryStatus::Failed
    );
}

#[test]
fn an_active_lease_is_replayed_only_to_its_original_poll_request() {
    let (_, broker) = broker(|_| {});
    let first = broker.enqueue(query("q", "a")).unwrap();
    let second = broker.enqueue(query("q", "b")).unwrap();
    let claimed = broker.claim("ns", "q", "w1", "p1").unwrap().unwrap();
    assert_eq!(claimed.task.id, first.id);
    // The same request again: the same task, the same attempt.
    let again = broker.claim("ns", "q", "w1", "p1").unwrap().unwrap();
    assert!(again.replayed);
    assert_eq!(
        (again.task.id.as_str(), again.task.attempt),
        (first.id.as_str(), 1)
    );
    // Another request of the same worker gets the next task, not the lease.
    let other = broker.claim("ns", "q", "w1", "p2").unwrap().unwrap();
    assert!(!other.replayed);
    assert_eq!(other.task.id, second.id);
    // Another worker with the same request id gets nothing.
    assert!(broker.claim("ns", "q", "w2", "p1").unwrap().is_none());
}

#[test]
fn a_short_lease_lapses_and_the_task_is_claimed_again_before_its_deadline() {
    let (_, broker) = broker(|s| s.lease_timeout_seconds = 1);
    let task = broker.enqueue(query("q", "a")).unwrap();
    let claimed = broker.claim("ns", "q", "w1", "p1").unwrap().unwrap();
    let lease_ms = claimed.task.lease_expires_at_ms.unwrap() - claimed.task.created_at_ms;
    assert!((1_000..1_100).contains(&lease_ms), "{lease_ms}");
    assert!(broker.claim("ns", "q", "w2", "p9").unwrap().is_none());
    std::thread::sleep(Duration::from_millis(1_150));
    let retaken = broker.claim("ns", "q", "w2", "p9").unwrap().unwrap();
    assert_eq!(
        (retaken.task.id.as_str(), retaken.task.attempt),
        (task.id.as_str(), 2)
    );
    // The first worker's late answer is refused; its index entry is pruned.
    assert!(matches!(
        broker.answer(&task.id, "w1", 1, false, json!(1)),
        Err(BrokerError::Stale {
            reason: "lease_owner_mismatch",
            ..
        })
    ));
    assert!(broker.claim("ns", "q", "w1", "p1").unwrap().is_none());
}

#[test]
fn the_pending_cap_refuses_clearly_and_pruning_frees_room() {
    let (cache, broker) = broker(|s| s.max_pending_per_queue = Some(2));
    let a = broker.enqueue(query("q", "a")).unwrap();
    broker.enqueue(query("q", "b")).unwrap();
    let refused = broker.enqueue(query("q", "c")).unwrap_err();
    assert!(matches!(
        refused,
        BrokerError::QueueFull {
            pending: 2,
            limit: 2,
            ..
        }
    ));
    assert!(refused
        .to_string()
        .contains("server.query_tasks.max_pending_per_queue = 2"));
    // Another queue has its own cap.
    broker.enqueue(query("other", "a")).unwrap();
    // A record that vanished (its TTL ended) is pruned on the next write.
    cache
        .forget(&WorkflowQueryTaskBroker::task_key(&a.id))
        .unwrap();
    broker.enqueue(query("q", "c")).unwrap();
    assert_eq!(broker.pending("ns", "q").unwrap(), 2);
}

#[test]
fn a_timed_out_query_leaves_nothing_and_past_deadlines_are_pruned() {
    let (cache, broker) = broker(|s| s.timeout_seconds = Some(0));
    let task = broker.enqueue(query("q", "a")).unwrap();
    assert_eq!(task.deadline_ms, task.created_at_ms);
    assert_eq!(
        broker.pending("ns", "q").unwrap(),
        0,
        "already past its deadline"
    );
    assert!(broker.claim("ns", "q", "w1", "p1").unwrap().is_none());
    assert!(broker
        .await_answer(&task, Duration::from_millis(1))
        .unwrap()
        .is_none());
    assert_eq!(keys(&cache), 0);
}

#[test]
fn markers_are_one_expiring_key_per_worker_and_queue() {
    let (cache, broker) = broker(|_| {});
    for _ in 0..3 {
        broker
            .mark_poller("ns", "q", "w1", Some(Duration::ZERO))
            .unwrap();
    }
    broker.mark_poller("ns", "q", "w2", None).unwrap();
    assert_eq!(keys(&cache), 2);
    assert!(broker.is_polling("ns", "q", "w1").unwrap());
    assert!(!broker.is_polling("ns", "other", "w1").unwrap());
    std::thread::sleep(Duration::from_millis(5_100));
    assert!(!broker.is_polling("ns", "q", "w1").unwrap(), "0 s + 5 s");
    assert!(broker.is_polling("ns", "q", "w2").unwrap(), "90 s");
}

#[test]
fn keys_are_built_from_the_prefix_and_hide_user_names() {
    for key in [
        WorkflowQueryTaskBroker::queue_key("tenant", "orders"),
        WorkflowQueryTaskBroker::queue_lock_key("tenant", "orders"),
        WorkflowQueryTaskBroker::marker_key("tenant", "orders", "w"),
        WorkflowQueryTaskBroker::leased_index_key("tenant", "orders", "w"),
    ] {
        assert!(key.starts_with(WorkflowQueryTaskBroker::PREFIX), "{key}");
        assert!(!key.contains("tenant") && !key.contains("orders"), "{key}");
    }
}
