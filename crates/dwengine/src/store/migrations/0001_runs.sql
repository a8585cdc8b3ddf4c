-- Runs, their append-only history, and the per-run items that structural
-- limits bound. Pending counters live on the run row so that a limit check
-- reads one row instead of counting the run's items.
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    workflow_id TEXT NOT NULL,
    workflow_type TEXT NOT NULL,
    namespace TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('running', 'completed', 'failed')),
    origin TEXT NOT NULL CHECK (origin IN ('v2', 'v1_projection')),
    parent_run_id INTEGER REFERENCES runs (id),
    memo TEXT NOT NULL,
    search_attributes TEXT NOT NULL,
    pending_activity_count INTEGER NOT NULL DEFAULT 0 CHECK (pending_activity_count >= 0),
    pending_timer_count INTEGER NOT NULL DEFAULT 0 CHECK (pending_timer_count >= 0),
    pending_child_count INTEGER NOT NULL DEFAULT 0 CHECK (pending_child_count >= 0),
    pending_signal_count INTEGER NOT NULL DEFAULT 0 CHECK (pending_signal_count >= 0),
    pending_update_count INTEGER NOT NULL DEFAULT 0 CHECK (pending_update_count >= 0),
    history_length INTEGER NOT NULL DEFAULT 0,
    history_bytes INTEGER NOT NULL DEFAULT 0,
    command_count INTEGER NOT NULL DEFAULT 0,
    created_at_ms INTEGER NOT NULL
);
CREATE INDEX runs_by_workflow ON runs (namespace, workflow_id);

CREATE TABLE history_events (
    run_id INTEGER NOT NULL REFERENCES runs (id),
    sequence INTEGER NOT NULL,
    event_type TEXT NOT NULL,
    payload TEXT NOT NULL,
    command_index INTEGER,
    PRIMARY KEY (run_id, sequence)
) WITHOUT ROWID;
CREATE UNIQUE INDEX history_commands ON history_events (run_id, command_index)
    WHERE command_index IS NOT NULL;
CREATE TRIGGER history_events_append_only_update BEFORE UPDATE ON history_events
BEGIN
    SELECT RAISE(ABORT, 'history is append-only');
END;
CREATE TRIGGER history_events_append_only_delete BEFORE DELETE ON history_events
BEGIN
    SELECT RAISE(ABORT, 'history is append-only');
END;

CREATE TABLE activities (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs (id),
    activity_type TEXT NOT NULL,
    arguments TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('scheduled', 'completed', 'failed')),
    result TEXT
);
CREATE INDEX activities_by_run ON activities (run_id, status);

CREATE TABLE timers (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs (id),
    delay_ms INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'fired', 'cancelled'))
);
CREATE INDEX timers_by_run ON timers (run_id, status);

CREATE TABLE children (
    id INTEGER PRIMARY KEY,
    parent_run_id INTEGER NOT NULL REFERENCES runs (id),
    child_run_id INTEGER NOT NULL UNIQUE REFERENCES runs (id),
    status TEXT NOT NULL CHECK (status IN ('open', 'closed')),
    closed_status TEXT
);
CREATE INDEX children_by_parent ON children (parent_run_id, status);

CREATE TABLE signals (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs (id),
    name TEXT NOT NULL,
    payload TEXT NOT NULL,
    request_id TEXT,
    status TEXT NOT NULL CHECK (status IN ('received', 'processed'))
);
CREATE INDEX signals_by_run ON signals (run_id, status);
CREATE UNIQUE INDEX signals_by_request ON signals (run_id, request_id)
    WHERE request_id IS NOT NULL;

CREATE TABLE updates (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs (id),
    name TEXT NOT NULL,
    payload TEXT NOT NULL,
    request_id TEXT,
    status TEXT NOT NULL CHECK (status IN ('accepted', 'completed', 'rejected')),
    result TEXT
);
CREATE INDEX updates_by_run ON updates (run_id, status);
CREATE UNIQUE INDEX updates_by_request ON updates (run_id, request_id)
    WHERE request_id IS NOT NULL;

CREATE TABLE failures (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs (id),
    failure_category TEXT NOT NULL,
    message TEXT NOT NULL,
    structural_limit_kind TEXT,
    structural_limit_value INTEGER,
    structural_limit_configured INTEGER,
    created_at_ms INTEGER NOT NULL
);
CREATE INDEX failures_by_run ON failures (run_id);
