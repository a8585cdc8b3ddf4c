//! Shared set-up for the store's integration tests.
#![allow(dead_code)]

use dwengine::store::{RunId, StartRun, Store, StoreConfig};
use dwpolicy::{LimitKind, StructuralLimits};

/// Limits with the given overrides on top of the defaults.
pub fn limits(overrides: &[(LimitKind, u64)]) -> StructuralLimits {
    let mut limits = StructuralLimits::default();
    for (kind, value) in overrides {
        limits.set(*kind, *value);
    }
    limits
}

pub fn config(overrides: &[(LimitKind, u64)]) -> StoreConfig {
    StoreConfig {
        limits: limits(overrides),
        ..StoreConfig::default()
    }
}

/// An in-memory store with the given limit overrides.
pub fn memory_store(overrides: &[(LimitKind, u64)]) -> Store {
    Store::open_in_memory(config(overrides)).expect("open in-memory store")
}

pub fn start(workflow_id: &str) -> StartRun {
    StartRun {
        workflow_id: workflow_id.to_owned(),
        workflow_type: "OrderWorkflow".to_owned(),
        namespace: "default".to_owned(),
        task_queue: "orders".to_owned(),
        arguments: serde_json::json!({ "order": workflow_id }),
        ..StartRun::default()
    }
}

pub fn started(store: &mut Store, workflow_id: &str) -> RunId {
    store.start_run(start(workflow_id)).expect("start run")
}
