-- PostgreSQL twin of ../0041_prepared_local_activities.sql: prepared local
-- activities and the run's latest checkpoint, deleted when the run closes.
CREATE TABLE prepared_local_activities (
    run_id BIGINT NOT NULL REFERENCES runs (id),
    sequence BIGINT NOT NULL,
    activity_type TEXT NOT NULL,
    descriptor TEXT NOT NULL,
    status TEXT NOT NULL,
    attempt_number BIGINT NOT NULL,
    activity_attempt_id TEXT,
    worker_attempt_id TEXT,
    workflow_task_id BIGINT,
    workflow_task_attempt BIGINT,
    lease_owner TEXT,
    scheduled_at_ms BIGINT NOT NULL,
    started_event_id BIGINT,
    start_to_close_deadline_ms BIGINT,
    schedule_to_close_deadline_ms BIGINT,
    heartbeat_deadline_ms BIGINT,
    heartbeat_details TEXT,
    receipt TEXT,
    PRIMARY KEY (run_id, sequence)
);
CREATE INDEX prepared_local_activities_by_attempt
    ON prepared_local_activities (run_id, activity_attempt_id);
-- The run's latest prepared checkpoint (one row per open run, replaced by
-- the next): a retried checkpoint answers its receipt instead of writing
-- its commands twice. Deleted with the run's close.
CREATE TABLE prepared_local_checkpoints (
    run_id BIGINT PRIMARY KEY REFERENCES runs (id),
    checkpoint_id TEXT NOT NULL,
    receipt TEXT NOT NULL
);
