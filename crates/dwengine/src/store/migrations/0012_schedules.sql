-- Schedules: one row per (namespace, schedule_id). The definition (spec,
-- action, memo, search attributes, policies) is JSON the server validated;
-- the due scan walks schedules_due, earliest first, a declared scan limit
-- per pass.
CREATE TABLE schedules (
    id INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL,
    schedule_id TEXT NOT NULL,
    definition TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('active', 'paused')),
    next_fire_at_ms INTEGER,
    remaining_actions INTEGER,
    fires_count INTEGER NOT NULL DEFAULT 0,
    failures_count INTEGER NOT NULL DEFAULT 0,
    skipped_count INTEGER NOT NULL DEFAULT 0,
    last_fired_at_ms INTEGER,
    last_skip_reason TEXT,
    latest_workflow_id TEXT,
    latest_run_id INTEGER,
    paused_at_ms INTEGER,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    UNIQUE (namespace, schedule_id)
);
CREATE INDEX schedules_due ON schedules (next_fire_at_ms)
    WHERE status = 'active' AND next_fire_at_ms IS NOT NULL;
