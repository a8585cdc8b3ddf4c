-- The Durable Workflow wire protocol: its terminal statuses, timestamps on
-- history, command sequences on the items a command creates, activity
-- attempts with retry options, fenced workflow tasks, worker-routed query
-- tasks and registered namespaces.

-- Cancelled and terminated are terminal statuses of their own. SQLite cannot
-- alter a CHECK constraint, but widening one may rewrite the stored schema
-- text (every existing row satisfies the wider check); see "Making Other
-- Kinds Of Table Schema Changes" in SQLite's ALTER TABLE documentation.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
SET sql = replace(sql, 'CHECK (status IN (''running'', ''completed'', ''failed''))',
    'CHECK (status IN (''running'', ''completed'', ''failed'', ''cancelled'', ''terminated''))')
WHERE type = 'table' AND name = 'runs';
PRAGMA writable_schema = OFF;

ALTER TABLE history_events ADD COLUMN recorded_at_ms INTEGER;

-- The workflow sequence of the command that created an item, and what the
-- protocol needs to run, retry and report it.
ALTER TABLE activities ADD COLUMN sequence INTEGER;
ALTER TABLE activities ADD COLUMN options TEXT;
ALTER TABLE timers ADD COLUMN sequence INTEGER;
ALTER TABLE timers ADD COLUMN timer_kind TEXT;
ALTER TABLE timers ADD COLUMN condition_wait_id TEXT;
-- A parallel group member's group metadata (JSON), echoed on its events.
ALTER TABLE timers ADD COLUMN parallel_group TEXT;

-- A leased workflow task remembers the newest signal its worker saw (those
-- are processed when it completes) and why its last attempt failed.
ALTER TABLE dispatch_tasks ADD COLUMN signal_watermark INTEGER;
ALTER TABLE dispatch_tasks ADD COLUMN last_error TEXT;

-- Control-plane queries routed to a worker of the run's task queue. A row
-- lives only while its caller waits: the caller deletes it on its answer or
-- its timeout, so the table holds at most the in-flight queries.
CREATE TABLE query_tasks (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs (id),
    namespace TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    query_name TEXT NOT NULL,
    arguments TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ready', 'leased', 'completed', 'failed')),
    lease_owner TEXT,
    lease_expires_at_ms INTEGER,
    attempt INTEGER NOT NULL DEFAULT 0,
    answer TEXT,
    created_at_ms INTEGER NOT NULL
);
CREATE INDEX query_tasks_ready ON query_tasks (namespace, task_queue, status, id);

-- Namespaces a client may name in X-Namespace; `default` always exists.
CREATE TABLE namespaces (
    name TEXT PRIMARY KEY,
    description TEXT NOT NULL DEFAULT '',
    retention_days INTEGER,
    created_at_ms INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO namespaces (name, created_at_ms) VALUES ('default', 0);

-- The condition wait a run's workflow is blocked on (JSON: id, sequence, key,
-- fingerprint, timeout timer), so a completion can tell a satisfied wait from
-- a re-issued one without scanning history.
ALTER TABLE runs ADD COLUMN open_condition_wait TEXT;
