//! Per-namespace durable resource counts, the authority of the durable-state
//! quota.
//!
//! Each count is read from SQL in the same write transaction as the
//! mutation it admits, so two racing creates cannot both pass a quota of
//! one. Runs come from the per-series aggregates (one row per task queue and
//! workflow type, not per run); registrations, schedules and service-catalog
//! entries from their tables' namespace-leading keys; streams and their
//! items from the `workflow_streams_namespace` index, items as the streams'
//! `total_items` (an expired stream counts whole until the reclaim deletes
//! its row). Only the resources asked for are counted, so a quota over one
//! resource pays one count.

use crate::store::rows::to_u64;
use crate::store::tx::WriteTx;
use crate::store::{Error, Store};

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
            let (started, closed): (i64, i64) = self
                .conn
                .prepare_cached(
                    "SELECT COALESCE(SUM(started), 0), \
                     COALESCE(SUM(completed + failed + cancelled + terminated), 0) \
                     FROM workflow_run_series WHERE namespace = ?1",
                )?
                .query_row([namespace], |r| Ok((r.get(0)?, r.get(1)?)))?;
            usage.set(DurableResource::WorkflowRuns, to_u64(started));
            usage.set(
                DurableResource::OpenWorkflowRuns,
                to_u64(started.saturating_sub(closed)),
            );
        }
        if wants(DurableResource::WorkflowStreams) || wants(DurableResource::WorkflowStreamItems) {
            let (streams, items): (i64, i64) = self
                .conn
                .prepare_cached(
                    "SELECT COUNT(*), COALESCE(SUM(total_items), 0) \
                     FROM workflow_streams WHERE namespace = ?1",
                )?
                .query_row([namespace], |r| Ok((r.get(0)?, r.get(1)?)))?;
            usage.set(DurableResource::WorkflowStreams, to_u64(streams));
            usage.set(DurableResource::WorkflowStreamItems, to_u64(items));
        }
        for (resource, sql) in [
            (
                DurableResource::WorkerRegistrations,
                "SELECT COUNT(*) FROM workers WHERE namespace = ?1",
            ),
            (
                DurableResource::Schedules,
                "SELECT COUNT(*) FROM schedules WHERE namespace = ?1",
            ),
            (
                DurableResource::ServiceCatalogEntries,
                "SELECT COUNT(*) FROM service_catalog WHERE namespace = ?1",
            ),
        ] {
            if wants(resource) {
                let n: i64 = self
                    .conn
                    .prepare_cached(sql)?
                    .query_row([namespace], |r| r.get(0))?;
                usage.set(resource, to_u64(n));
            }
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
