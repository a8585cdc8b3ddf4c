-- The schedule audit stream (GET /api/schedules/{id}/history): at most
-- SCHEDULE_AUDIT_ENTRIES rows per (namespace, schedule_id), the oldest
-- deleted in the transaction that appends. A deleted schedule's stream
-- stays readable, marked with deleted_at_ms, until the schedule sweep
-- removes it after the fixed retention (a scan-limited pass through the
-- partial index).
CREATE TABLE schedule_audit (
    id INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL,
    schedule_id TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    event_type TEXT NOT NULL,
    recorded_at_ms INTEGER NOT NULL,
    workflow_id TEXT,
    run_id INTEGER,
    payload TEXT NOT NULL,
    deleted_at_ms INTEGER,
    UNIQUE (namespace, schedule_id, sequence)
);
CREATE INDEX schedule_audit_deleted ON schedule_audit (deleted_at_ms)
    WHERE deleted_at_ms IS NOT NULL;
