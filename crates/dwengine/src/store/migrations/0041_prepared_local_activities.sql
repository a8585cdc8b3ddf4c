-- Prepared local activities (worker protocol 1.20): one row per local
-- activity a workflow task admitted on its own claim (`prepare`, or a
-- `checkpoint-group` member), at its authored `sequence`, holding the
-- current attempt's identities, the claim that runs it, its deadlines and,
-- once recorded, the receipt of its outcome (so a retried report answers
-- the same receipt). The rows are deleted when the run closes, in the same
-- transaction (`completion::finish_run`), so the table holds at most one row
-- per authored local activity of an open run.
CREATE TABLE prepared_local_activities (
    run_id INTEGER NOT NULL REFERENCES runs (id),
    sequence INTEGER NOT NULL,
    activity_type TEXT NOT NULL,
    descriptor TEXT NOT NULL,
    status TEXT NOT NULL,
    attempt_number INTEGER NOT NULL,
    activity_attempt_id TEXT,
    worker_attempt_id TEXT,
    workflow_task_id INTEGER,
    workflow_task_attempt INTEGER,
    lease_owner TEXT,
    scheduled_at_ms INTEGER NOT NULL,
    started_event_id INTEGER,
    start_to_close_deadline_ms INTEGER,
    schedule_to_close_deadline_ms INTEGER,
    heartbeat_deadline_ms INTEGER,
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
    run_id INTEGER PRIMARY KEY REFERENCES runs (id),
    checkpoint_id TEXT NOT NULL,
    receipt TEXT NOT NULL
);
