//! The engine's integration tests, in one test binary.
//!
//! One binary instead of one per file: each test binary links the engine
//! and all its dependencies again (about forty links of a large crate),
//! which cost more build time and disk on a 2-core machine than the tests
//! take to run. Each module is one former test file; `common` (the store's
//! set-up) and `support` (real servers on loopback) are shared. The tests
//! of every module run as parallel threads of this one process, so none may
//! rely on process-wide state being its own: environment variables are read,
//! never set (a child process gets its own with `Command::env`), each Redis
//! test leases a database of its own (`support::cache_for`), and a test that
//! re-runs this binary as a child names itself by its full module path
//! (`support::test_path`).

mod common;
mod support;

mod admission;
mod bounds;
mod build_ids;
mod cache_counts;
mod cancellation;
mod cancellation_parking;
mod child_workflows;
mod claim_gate;
mod cluster;
mod command_batches;
mod concurrency;
mod continue_as_new;
mod contract;
mod counters;
mod crash;
mod database_outage;
mod describe_reads;
mod dispatch;
mod durable_selection;
mod durable_state_quota;
mod evidence;
mod external_payloads;
mod group_commit;
mod heartbeat_and_probe;
mod http_archive;
mod http_import;
mod http_schedule_history;
mod http_schedule_races;
mod http_schedules;
mod http_search_attributes;
mod import;
mod lock_order;
mod memo_upserts;
mod message_streams;
mod namespace_admission_metrics;
mod namespaces;
mod pg_schema;
mod prepared_local;
mod projections;
mod prometheus_metrics;
mod query_tasks;
mod redrive;
mod run_status;
mod run_writes;
mod server_api;
mod server_faults;
mod server_log;
mod services;
mod sigkill;
mod signal_order;
#[cfg(feature = "sqs")]
mod sqs;
mod staged_starts;
mod sticky_execution;
mod streams;
mod task_failure_metrics;
mod tasks;
mod timeouts;
mod timer_cohorts;
mod transitions;
mod ui;
mod unsupported;
mod update_validations;
mod wait_slot_processes;
mod webhooks;
mod wire_events;
mod worker_roster;
mod worker_sessions;
mod workflow_service_calls;
