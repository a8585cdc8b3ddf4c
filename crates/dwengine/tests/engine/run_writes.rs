//! The run writer: a PostgreSQL node's completions that write one existing
//! run (an activity's report, a workflow task's completion whose commands
//! stay in its run) commit under the store's write lock taken shared,
//! beside claims, start batches and other nodes' run batches, instead of
//! taking it exclusively (`Connection::begin_run_writes`).
//!
//! Each such completion holds its run's workflow id key, and so does a
//! claim beside others for the run whose task it leases: a completion or a
//! claim that finds the key held, or a completion whose run's close would
//! reach another run, is rerun as an ordinary write and still lands. The
//! run writer is off unless `DW_STORE_RUN_WRITER=on`
//! (`StoreConfig::run_writer`); off, a node has none and every completion
//! is an ordinary write.

#[cfg(dw_test_postgres)]
mod on_postgres {
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::time::Duration;

    use dwengine::store::activity_attempts::{attempt_id, ActivityFence, AttemptOutcome};
    use dwengine::store::db::WRITE_LOCK;
    use dwengine::store::shared::SharedStore;
    use dwengine::store::writer::RunWriteOrder;
    use dwengine::store::{
        Error, LeasedTask, RunStatus, RunWriteStats, Store, StoreConfig, TaskKind, WorkflowCommand,
        WorkflowTaskFence,
    };

    /// How long a write that must not wait for the other session may take
    /// before the test fails (a loaded machine takes well under a second).
    pub const DEADLINE: Duration = Duration::from_secs(60);

    const LEASE: Duration = Duration::from_secs(300);

    /// The store settings of a node with the run writer on.
    pub fn with_run_writer() -> StoreConfig {
        StoreConfig {
            run_writer: true,
            ..StoreConfig::default()
        }
    }

    /// A node's store with the run writer on, on a schema of its own, and
    /// that schema's URL.
    pub fn node() -> (Arc<SharedStore>, String) {
        let url = crate::common::postgres_schema_url();
        let store = SharedStore::open_postgres(&url, with_run_writer(), 2)
            .expect("open a PostgreSQL node's store");
        (Arc::new(store), url)
    }

    /// Another session of the database (another node's transaction).
    pub fn session(url: &str) -> postgres::Client {
        postgres::Client::connect(url, postgres::NoTls).expect("connect")
    }

    /// Starts `workflow_id` on `orders` and leases its first workflow task
    /// through ordinary writes.
    pub fn started_and_leased(node: &SharedStore, workflow_id: &str) -> (i64, u64, String) {
        let start = crate::common::start(workflow_id);
        node.write(move |s| s.start_workflow(start, None))
            .expect("start");
        lease(node, TaskKind::Workflow)
    }

    /// Leases the next task of `kind` on `orders` through an ordinary
    /// write: its id, attempt and owner.
    pub fn lease(node: &SharedStore, kind: TaskKind) -> (i64, u64, String) {
        let task = leased(node, kind);
        (task.task_id, task.attempt, task.lease_owner)
    }

    /// As [`lease`], the whole task.
    pub fn leased(node: &SharedStore, kind: TaskKind) -> LeasedTask {
        node.write(move |s| s.lease_task(kind, "default", "orders", "w", "p", LEASE))
            .expect("a lease")
            .expect("a ready task")
    }

    /// A workflow task's completion of `commands`, as the run writer runs it.
    pub fn completion(
        task: i64,
        attempt: u64,
        owner: String,
        commands: Vec<WorkflowCommand>,
    ) -> impl Fn(&Store) -> Result<RunStatus, Error> + Clone + Send + 'static {
        move |s| {
            let fence = WorkflowTaskFence {
                lease_owner: &owner,
                attempt,
            };
            Ok(s.complete_workflow_task(task, fence, &commands)?.run_status)
        }
    }

    /// An activity attempt's completion, as the run writer runs it.
    pub fn activity_completion(
        task: i64,
        attempt: u64,
        owner: String,
    ) -> impl Fn(&Store) -> Result<AttemptOutcome, Error> + Clone + Send + 'static {
        move |s| {
            let attempt_id = attempt_id(task, attempt);
            let fence = ActivityFence {
                lease_owner: &owner,
                activity_attempt_id: &attempt_id,
            };
            s.complete_activity_attempt(task, fence, &serde_json::json!("done"))
        }
    }

    /// Takes `workflow_id`'s key in an open transaction of `client`, as a
    /// completion, a claim or a start of that id beside others does.
    pub fn hold_key<'a>(
        client: &'a mut postgres::Client,
        workflow_id: &str,
    ) -> postgres::Transaction<'a> {
        let mut tx = client.transaction().expect("begin");
        let held: bool = tx
            .query_one(
                "SELECT pg_try_advisory_xact_lock(hashtextextended(current_schema() || '/' || 'default' || chr(31) || $1, 0))",
                &[&workflow_id],
            )
            .expect("take the key")
            .get(0);
        assert!(held, "nothing else holds {workflow_id}'s key");
        tx
    }

    /// The event types of `workflow_id`'s history.
    pub fn history(client: &mut postgres::Client, workflow_id: &str) -> Vec<String> {
        client
            .query(
                "SELECT e.event_type FROM history_events e JOIN runs r ON r.id = e.run_id \
                 WHERE r.workflow_id = $1 ORDER BY e.sequence",
                &[&workflow_id],
            )
            .expect("history")
            .iter()
            .map(|row| row.get(0))
            .collect()
    }

    /// Runs `write` on the node's run writer on a thread of its own and
    /// waits for its answer at most [`DEADLINE`].
    pub fn write_run_within<R, F>(node: &Arc<SharedStore>, write: F) -> Result<R, Error>
    where
        R: Send + 'static,
        F: Fn(&Store) -> Result<R, Error> + Clone + Send + 'static,
    {
        let (answer, answered) = mpsc::channel();
        let node = node.clone();
        std::thread::spawn(move || {
            let _ = answer.send(node.write_run(RunWriteOrder::Other, write));
        });
        answered
            .recv_timeout(DEADLINE)
            .expect("the write answered while the other session held what it held")
    }

    pub fn write_lock_shared(client: &mut postgres::Client) -> postgres::Transaction<'_> {
        let mut tx = client.transaction().expect("begin");
        tx.execute(
            "SELECT pg_advisory_xact_lock_shared($1, hashtext(current_schema()))",
            &[&WRITE_LOCK],
        )
        .expect("take the write lock shared");
        tx
    }

    pub fn stats(node: &SharedStore) -> RunWriteStats {
        node.run_write_stats()
            .expect("a PostgreSQL node has a run writer")
    }
}

#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn completions_of_a_run_commit_while_another_transaction_holds_the_write_lock_shared() {
    #[cfg(dw_test_postgres)]
    {
        use dwengine::store::activity_attempts::AttemptOutcome;
        use dwengine::store::{RunStatus, RunWriteStats, TaskKind, WorkflowCommand};
        use on_postgres::*;

        let (node, url) = node();
        let (task, attempt, owner) = started_and_leased(&node, "beside");
        // Another node's claim (or start batch) holds the write lock shared
        // for as long as this test needs: an ordinary write would wait for
        // it, a write of the run writer commits beside it.
        let mut other = session(&url);
        let held = write_lock_shared(&mut other);
        let charge = WorkflowCommand::activity("charge", serde_json::json!([1]));
        let status = write_run_within(&node, completion(task, attempt, owner, vec![charge]))
            .expect("the completion commits");
        assert_eq!(status, RunStatus::Running);
        held.rollback().expect("let the write lock go");

        let (task, attempt, owner) = lease(&node, TaskKind::Activity);
        let mut other = session(&url);
        let held = write_lock_shared(&mut other);
        let outcome = write_run_within(&node, activity_completion(task, attempt, owner))
            .expect("the report commits");
        assert_eq!(outcome, AttemptOutcome::Completed);
        held.rollback().expect("let the write lock go");
        let (task, attempt, owner) = lease(&node, TaskKind::Workflow);
        let mut other = session(&url);
        let held = write_lock_shared(&mut other);
        let done = serde_json::from_value::<WorkflowCommand>(
            serde_json::json!({ "type": "complete_workflow", "result": "ok" }),
        )
        .unwrap();
        let status = write_run_within(&node, completion(task, attempt, owner, vec![done]))
            .expect("the last completion commits");
        assert_eq!(status, RunStatus::Completed);
        held.rollback().expect("let the write lock go");

        assert_eq!(
            stats(&node),
            RunWriteStats {
                beside: 3,
                rerun: 0
            }
        );
        let mut check = session(&url);
        let events = history(&mut check, "beside");
        for event in [
            "ActivityScheduled",
            "ActivityCompleted",
            "WorkflowCompleted",
        ] {
            assert_eq!(
                events.iter().filter(|e| *e == event).count(),
                1,
                "{event} once: {events:?}"
            );
        }
    }
}

#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_report_whose_run_key_is_held_elsewhere_is_rerun_as_an_ordinary_write() {
    #[cfg(dw_test_postgres)]
    {
        use dwengine::store::activity_attempts::AttemptOutcome;
        use dwengine::store::{RunWriteStats, TaskKind, WorkflowCommand};
        use on_postgres::*;

        let (node, url) = node();
        let (task, attempt, owner) = started_and_leased(&node, "keyed");
        let charge = WorkflowCommand::activity("charge", serde_json::json!([1]));
        node.write(completion(task, attempt, owner, vec![charge]))
            .expect("schedule the activity");
        let (task, attempt, owner) = lease(&node, TaskKind::Activity);
        // Another transaction writes this workflow id (a start of it on
        // another node, or its completion there): the report must not
        // run beside it, so it runs as an ordinary write (the write lock
        // itself is free, so it commits at once).
        let mut other = session(&url);
        let held = hold_key(&mut other, "keyed");
        let outcome = write_run_within(&node, activity_completion(task, attempt, owner))
            .expect("the report lands as an ordinary write");
        assert_eq!(outcome, AttemptOutcome::Completed);
        assert_eq!(
            stats(&node),
            RunWriteStats {
                beside: 0,
                rerun: 1
            }
        );
        held.rollback().expect("let the key go");
        let mut check = session(&url);
        let events = history(&mut check, "keyed");
        assert_eq!(
            events.iter().filter(|e| *e == "ActivityCompleted").count(),
            1,
            "{events:?}"
        );
        // Its workflow task is queued, to be claimed.
        assert_eq!(leased(&node, TaskKind::Workflow).workflow_id, "keyed");
    }
}

#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_claim_beside_others_takes_the_key_of_the_run_it_leases() {
    #[cfg(dw_test_postgres)]
    {
        use dwengine::store::{Error, Store, TaskKind};
        use on_postgres::*;

        let url = crate::common::postgres_schema_url();
        let store = Store::open_postgres(&url, with_run_writer()).expect("open");
        store
            .start_workflow(crate::common::start("claimed"), None)
            .expect("start");
        let claim = || {
            store.claim(|s| {
                s.lease_task(
                    TaskKind::Workflow,
                    "default",
                    "orders",
                    "w",
                    "p",
                    std::time::Duration::from_secs(60),
                )
            })
        };
        let mut other = session(&url);
        let held = hold_key(&mut other, "claimed");
        // A completion of that run holds the key: the claim beside others
        // does not lease its task beside it, it asks for the write lock.
        assert!(
            matches!(claim(), Err(Error::ClaimNeedsWriteLock)),
            "a claim beside a held run key must be rerun as an ordinary write"
        );
        held.rollback().expect("let the key go");
        let task = claim()
            .expect("the claim")
            .expect("the workflow task, once the key is free");
        assert_eq!(task.workflow_id, "claimed");
    }
}

#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_completion_reaching_another_run_is_rerun_as_an_ordinary_write() {
    #[cfg(dw_test_postgres)]
    {
        use dwengine::store::{RunStatus, RunWriteStats, TaskKind, WorkflowCommand};
        use on_postgres::*;

        let (node, url) = node();
        // A child: its close gives its parent an event and a task.
        let (task, attempt, owner) = started_and_leased(&node, "parent");
        let child = serde_json::from_value::<WorkflowCommand>(serde_json::json!({
            "type": "start_child_workflow", "workflow_type": "Child", "queue": "orders",
        }))
        .unwrap();
        // Starting a child reaches beyond the run: the run writer sends it
        // on to the ordinary writer.
        let status = write_run_within(&node, completion(task, attempt, owner, vec![child]))
            .expect("the child starts");
        assert_eq!(status, RunStatus::Running);
        assert_eq!(
            stats(&node),
            RunWriteStats {
                beside: 0,
                rerun: 1
            }
        );
        let child_task = leased(&node, TaskKind::Workflow);
        assert_ne!(child_task.workflow_id, "parent");
        let (task, attempt, owner) = (
            child_task.task_id,
            child_task.attempt,
            child_task.lease_owner,
        );
        let done = serde_json::from_value::<WorkflowCommand>(
            serde_json::json!({ "type": "complete_workflow", "result": "ok" }),
        )
        .unwrap();
        let status = write_run_within(&node, completion(task, attempt, owner, vec![done]))
            .expect("the child completes");
        assert_eq!(status, RunStatus::Completed);
        assert_eq!(
            stats(&node),
            RunWriteStats {
                beside: 0,
                rerun: 2
            },
            "the child's close reaches its parent"
        );
        let mut check = session(&url);
        let parent = history(&mut check, "parent");
        assert!(
            parent.iter().any(|e| e == "ChildRunCompleted"),
            "the parent hears of its child's end: {parent:?}"
        );
        assert_eq!(
            leased(&node, TaskKind::Workflow).workflow_id,
            "parent",
            "the parent has a workflow task to see it"
        );
    }
}

#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn without_the_switch_a_node_has_no_run_writer_and_completions_are_ordinary_writes() {
    #[cfg(dw_test_postgres)]
    {
        use dwengine::store::shared::SharedStore;
        use dwengine::store::writer::RunWriteOrder;
        use dwengine::store::{RunStatus, StoreConfig, WorkflowCommand};
        use on_postgres::*;

        let url = crate::common::postgres_schema_url();
        let node = SharedStore::open_postgres(&url, StoreConfig::default(), 2).expect("open");
        assert_eq!(node.run_write_stats(), None);
        let (task, attempt, owner) = started_and_leased(&node, "ordinary");
        let charge = WorkflowCommand::activity("charge", serde_json::json!([1]));
        let status = node
            .write_run(
                RunWriteOrder::Activities,
                completion(task, attempt, owner, vec![charge]),
            )
            .expect("the completion commits as an ordinary write");
        assert_eq!(status, RunStatus::Running);
        let mut check = session(&url);
        assert!(history(&mut check, "ordinary")
            .iter()
            .any(|e| e == "ActivityScheduled"));
    }
}
