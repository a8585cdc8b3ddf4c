//! Per-namespace durable resource counts, the authority of the durable-state
//! quota.
//!
//! Each count is read from SQL in the same write transaction as the
//! mutation it admits, so two racing creates cannot both pass a quota of
//! one. Runs come from the per-series aggregates (one row per task queue and
//! workflow type, not per run); registrations from the workers table's
//! namespace range (idle ones are swept); schedules, service-catalog
//! entries, streams and stream items from `namespace_durable_counts`, one
//! row per (namespace, resource) that triggers keep in the transaction of
//! every insert, delete and append, so their read costs the same for ten
//! rows or ten million. Items are the streams' `total_items`: an expired
//! stream counts whole until the reclaim deletes its row. Only the
//! resources asked for are read.

use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::rows::to_u64;
use crate::store::tx::WriteTx;

/// A durable resource of the fixed inventory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DurableResource {
    /// Run rows of the namespace.
    WorkflowRuns,
    /// Runs not yet closed.
    OpenWorkflowRuns,
    /// Worker registrations.
    WorkerRegistrations,
    /// Schedules.
    Schedules,
    /// Workflow output streams, until reclaimed.
    WorkflowStreams,
    /// Items of those streams.
    WorkflowStreamItems,
    /// Service-catalog endpoints, services and operations.
    ServiceCatalogEntries,
}

/// How many resources the inventory has.
pub const DURABLE_RESOURCES: usize = 7;

impl DurableResource {
    /// The fixed inventory, in report order.
    pub const ALL: [DurableResource; DURABLE_RESOURCES] = [
        DurableResource::WorkflowRuns,
        DurableResource::OpenWorkflowRuns,
        DurableResource::WorkerRegistrations,
        DurableResource::Schedules,
        DurableResource::WorkflowStreams,
        DurableResource::WorkflowStreamItems,
        DurableResource::ServiceCatalogEntries,
    ];

    /// The resource's name in configuration and payloads.
    pub fn name(self) -> &'static str {
        match self {
            DurableResource::WorkflowRuns => "workflow_runs",
            DurableResource::OpenWorkflowRuns => "open_workflow_runs",
            DurableResource::WorkerRegistrations => "worker_registrations",
            DurableResource::Schedules => "schedules",
            DurableResource::WorkflowStreams => "workflow_streams",
            DurableResource::WorkflowStreamItems => "workflow_stream_items",
            DurableResource::ServiceCatalogEntries => "service_catalog_entries",
        }
    }

    /// Its position in [`DurableResource::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A namespace's durable resource usage: a count for each resource read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DurableUsage([Option<u64>; DURABLE_RESOURCES]);

impl DurableUsage {
    /// The count of `resource`, if it was read.
    pub fn get(&self, resource: DurableResource) -> Option<u64> {
        self.0[resource.index()]
    }

    /// Records the count of `resource`.
    pub fn set(&mut self, resource: DurableResource, count: u64) {
        self.0[resource.index()] = Some(count);
    }
}

impl Store {
    /// `namespace`'s usage of each of `resources` (the others stay unread).
    pub fn durable_usage(
        &self,
        namespace: &str,
        resources: &[DurableResource],
    ) -> Result<DurableUsage, Error> {
        let mut usage = DurableUsage::default();
        let wants = |r: DurableResource| resources.contains(&r);
        if wants(DurableResource::WorkflowRuns) || wants(DurableResource::OpenWorkflowRuns) {
            // The runs this transaction started or closed count too.
            self.conn.settle_counters()?;
            let (started, closed): (i64, i64) = self
                .conn
                .prepare_cached(
                    "SELECT COALESCE(CAST(SUM(started) AS BIGINT), 0), \
                     COALESCE(CAST(SUM(completed + failed + cancelled + terminated) AS BIGINT), 0) \
                     FROM workflow_run_series WHERE namespace = ?1",
                )?
                .query_row([namespace], |r| Ok((r.get(0)?, r.get(1)?)))?;
            usage.set(DurableResource::WorkflowRuns, to_u64(started));
            usage.set(
                DurableResource::OpenWorkflowRuns,
                to_u64(started.saturating_sub(closed)),
            );
        }
        // Kept by triggers (migration 0022): one row per resource in use.
        let kept = [
            DurableResource::Schedules,
            DurableResource::WorkflowStreams,
            DurableResource::WorkflowStreamItems,
            DurableResource::ServiceCatalogEntries,
        ];
        if kept.iter().any(|r| wants(*r)) {
            for resource in kept.into_iter().filter(|r| wants(*r)) {
                usage.set(resource, 0);
            }
            let rows = self
                .conn
                .prepare_cached(
                    "SELECT resource, count FROM namespace_durable_counts WHERE namespace = ?1",
                )?
                .query_map([namespace], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            for (name, count) in rows {
                if let Some(resource) = kept.into_iter().find(|r| r.name() == name && wants(*r)) {
                    usage.set(resource, to_u64(count));
                }
            }
        }
        if wants(DurableResource::WorkerRegistrations) {
            let n: i64 = self
                .conn
                .prepare_cached("SELECT COUNT(*) FROM workers WHERE namespace = ?1")?
                .query_row([namespace], |r| r.get(0))?;
            usage.set(DurableResource::WorkerRegistrations, to_u64(n));
        }
        Ok(usage)
    }

    /// Runs `mutation` in a savepoint of the open write and keeps its
    /// writes only when it returns `Ok(Ok(_))`: `Ok(Err(_))` (a refusal
    /// decided after the mutation looked at its own effect) and `Err` undo
    /// exactly its writes.
    pub fn undoable<R, X>(
        &self,
        mutation: impl FnOnce(&Store) -> Result<Result<R, X>, Error>,
    ) -> Result<Result<R, X>, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let outcome = mutation(self)?;
        if outcome.is_ok() {
            tx.commit()?;
        }
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::config::StoreConfig;
    use crate::store::model::StartRun;
    use crate::store::schedules::AuditEvent;
    use crate::store::service_catalog::CatalogLevel;
    use crate::store::streams::{NewStreamItem, StreamAppend, StreamOrigin};

    fn counts(store: &Store, namespace: &str) -> [u64; 4] {
        let usage = store
            .durable_usage(namespace, &DurableResource::ALL)
            .unwrap();
        [
            DurableResource::Schedules,
            DurableResource::WorkflowStreams,
            DurableResource::WorkflowStreamItems,
            DurableResource::ServiceCatalogEntries,
        ]
        .map(|r| usage.get(r).unwrap())
    }

    fn leftover_rows(store: &Store) -> i64 {
        store
            .conn
            .query_row("SELECT COUNT(*) FROM namespace_durable_counts", [], |r| {
                r.get(0)
            })
            .unwrap()
    }

    /// The trigger-kept counts follow every insert, append, delete and
    /// reclaim, and a namespace whose rows are all gone leaves no count row.
    #[test]
    fn kept_counts_follow_every_write_and_vanish_at_zero() {
        let store = Store::open_in_memory(StoreConfig::default()).unwrap();
        let doc = serde_json::json!({});
        assert!(store
            .create_schedule("a", "s1", &doc, true, None, None)
            .unwrap());
        assert!(store
            .create_schedule("a", "s2", &doc, true, None, None)
            .unwrap());
        assert!(!store
            .create_schedule("a", "s1", &doc, true, None, None)
            .unwrap());
        store
            .create_catalog_entry("a", CatalogLevel::Endpoint, 0, "billing", &doc)
            .unwrap()
            .unwrap();
        let run = store
            .start_run(StartRun {
                workflow_id: "w".into(),
                workflow_type: "T".into(),
                namespace: "a".into(),
                task_queue: "q".into(),
                arguments: serde_json::Value::Null,
                memo: Default::default(),
                search_attributes: Default::default(),
            })
            .unwrap();
        let items = vec![NewStreamItem::default(); 3];
        for name in ["x", "y"] {
            store
                .append_stream(
                    run,
                    StreamAppend {
                        name,
                        items: &items,
                        origin: StreamOrigin::Client,
                        origin_reference: None,
                        max_pending_items: None,
                    },
                )
                .unwrap();
        }
        assert_eq!(counts(&store, "a"), [2, 2, 6, 1]);
        assert_eq!(counts(&store, "b"), [0, 0, 0, 0]);

        let audit = AuditEvent {
            event_type: "ScheduleDeleted",
            payload: serde_json::json!({}),
        };
        assert!(store.delete_schedule("a", "s1", &audit).unwrap());
        // Closing both streams and reclaiming them item by item: a stream
        // counts whole until its row goes.
        store.close_stream(run, "x", None, Some(1)).unwrap();
        store.close_stream(run, "y", None, Some(1)).unwrap();
        let later = crate::store::rows::now_ms() + 10_000;
        store.reclaim_expired_streams("a", later, 10, 4).unwrap();
        assert_eq!(counts(&store, "a"), [1, 1, 3, 1]);
        store.reclaim_expired_streams("a", later, 10, 4).unwrap();
        assert_eq!(counts(&store, "a"), [1, 0, 0, 1]);
        assert!(store.delete_schedule("a", "s2", &audit).unwrap());
        store
            .delete_catalog_entry("a", CatalogLevel::Endpoint, 0, "billing")
            .unwrap();
        assert_eq!(counts(&store, "a"), [0, 0, 0, 0]);
        assert_eq!(leftover_rows(&store), 0);
    }
}
