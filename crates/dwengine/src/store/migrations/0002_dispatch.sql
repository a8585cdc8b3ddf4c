-- Work handed to remote workers: workflow tasks, activity tasks and timers
-- waiting to fire, each leased to one poll at a time. A lease records the
-- poll request that claimed it (the single reserved binding the replay of a
-- repeated poll reads), so idempotent polls add no rows of their own.
CREATE TABLE dispatch_tasks (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('workflow', 'activity', 'timer')),
    run_id INTEGER NOT NULL REFERENCES runs (id),
    item_id INTEGER,
    namespace TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ready', 'leased', 'done')),
    due_at_ms INTEGER NOT NULL,
    lease_owner TEXT,
    lease_expires_at_ms INTEGER,
    poll_request_id TEXT,
    attempt INTEGER NOT NULL DEFAULT 0,
    created_at_ms INTEGER NOT NULL
);
CREATE INDEX dispatch_ready ON dispatch_tasks (kind, namespace, task_queue, status, due_at_ms);
CREATE INDEX dispatch_leases ON dispatch_tasks (kind, status, lease_expires_at_ms);
CREATE INDEX dispatch_by_run ON dispatch_tasks (run_id, kind, status);
CREATE UNIQUE INDEX dispatch_items ON dispatch_tasks (kind, item_id) WHERE item_id IS NOT NULL;

ALTER TABLE runs ADD COLUMN cancel_requested_at_ms INTEGER;
ALTER TABLE runs ADD COLUMN closed_at_ms INTEGER;
-- A committed marker: the root row stays, history and details are removed.
ALTER TABLE runs ADD COLUMN details_pruned_at_ms INTEGER;
CREATE INDEX runs_closed ON runs (namespace, status, closed_at_ms);

-- History stays append-only except for retention of a marked run.
DROP TRIGGER history_events_append_only_delete;
CREATE TRIGGER history_events_append_only_delete BEFORE DELETE ON history_events
WHEN (SELECT details_pruned_at_ms FROM runs WHERE id = OLD.run_id) IS NULL
BEGIN
    SELECT RAISE(ABORT, 'history is append-only');
END;

-- Registered workers: one row per (namespace, worker id), overwritten by heartbeats.
CREATE TABLE workers (
    namespace TEXT NOT NULL,
    worker_id TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    last_heartbeat_ms INTEGER NOT NULL,
    PRIMARY KEY (namespace, worker_id)
) WITHOUT ROWID;
