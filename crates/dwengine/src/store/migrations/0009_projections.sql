-- Run projections: a summary per run and four detail projections, kept by
-- triggers in the same transaction as the rows they project, and the
-- retention marker under its contract name.
--
-- Retention removes a closed run's history and every projection of it and
-- keeps its root row, stamped with details_pruned_at (Unix milliseconds).
-- The triggers never write a projection row for a marked run, so neither
-- a later write nor a rebuild can recreate what retention deleted.
--
-- Runs written before this migration get no projection rows here: their
-- absence is what the drift report calls needs_rebuild, until an operator
-- rebuilds them (POST /api/system/projections/rebuild).
ALTER TABLE runs RENAME COLUMN details_pruned_at_ms TO details_pruned_at;

CREATE TABLE run_summaries (
    run_id INTEGER PRIMARY KEY REFERENCES runs (id),
    namespace TEXT NOT NULL,
    workflow_id TEXT NOT NULL,
    workflow_type TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    status TEXT NOT NULL,
    history_length INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    closed_at_ms INTEGER
);

-- One entry per history event: the run's timeline without its payloads.
CREATE TABLE run_timeline_entries (
    run_id INTEGER NOT NULL REFERENCES runs (id),
    sequence INTEGER NOT NULL,
    event_type TEXT NOT NULL,
    recorded_at_ms INTEGER,
    PRIMARY KEY (run_id, sequence)
) WITHOUT ROWID;

-- One entry per timer the run started, with its current status.
CREATE TABLE run_timer_entries (
    timer_id INTEGER PRIMARY KEY REFERENCES timers (id),
    run_id INTEGER NOT NULL REFERENCES runs (id),
    delay_ms INTEGER NOT NULL,
    status TEXT NOT NULL
);
CREATE INDEX run_timer_entries_by_run ON run_timer_entries (run_id);

-- What an open run waits on: its scheduled activities, pending timers and
-- open children (an entry goes when the item closes).
CREATE TABLE run_waits (
    run_id INTEGER NOT NULL REFERENCES runs (id),
    kind TEXT NOT NULL CHECK (kind IN ('activity', 'timer', 'child')),
    item_id INTEGER NOT NULL,
    PRIMARY KEY (run_id, kind, item_id)
) WITHOUT ROWID;

-- A child run's parent.
CREATE TABLE run_lineage_entries (
    run_id INTEGER PRIMARY KEY REFERENCES runs (id),
    parent_run_id INTEGER NOT NULL REFERENCES runs (id)
);

-- The summary follows the run row, unless the run is marked.
CREATE TRIGGER run_summaries_insert AFTER INSERT ON runs
WHEN NEW.details_pruned_at IS NULL
BEGIN
    INSERT OR REPLACE INTO run_summaries VALUES (NEW.id, NEW.namespace, NEW.workflow_id,
        NEW.workflow_type, NEW.task_queue, NEW.status, NEW.history_length,
        NEW.created_at_ms, NEW.closed_at_ms);
END;
CREATE TRIGGER run_summaries_update AFTER UPDATE OF status, history_length, closed_at_ms ON runs
WHEN NEW.details_pruned_at IS NULL
BEGIN
    INSERT OR REPLACE INTO run_summaries VALUES (NEW.id, NEW.namespace, NEW.workflow_id,
        NEW.workflow_type, NEW.task_queue, NEW.status, NEW.history_length,
        NEW.created_at_ms, NEW.closed_at_ms);
END;

CREATE TRIGGER run_lineage_insert AFTER INSERT ON runs
WHEN NEW.parent_run_id IS NOT NULL AND NEW.details_pruned_at IS NULL
BEGIN
    INSERT OR REPLACE INTO run_lineage_entries VALUES (NEW.id, NEW.parent_run_id);
END;

CREATE TRIGGER run_timeline_insert AFTER INSERT ON history_events
WHEN (SELECT details_pruned_at FROM runs WHERE id = NEW.run_id) IS NULL
BEGIN
    INSERT OR REPLACE INTO run_timeline_entries
        VALUES (NEW.run_id, NEW.sequence, NEW.event_type, NEW.recorded_at_ms);
END;

CREATE TRIGGER run_timer_entries_insert AFTER INSERT ON timers
WHEN (SELECT details_pruned_at FROM runs WHERE id = NEW.run_id) IS NULL
BEGIN
    INSERT OR REPLACE INTO run_timer_entries VALUES (NEW.id, NEW.run_id, NEW.delay_ms, NEW.status);
    INSERT OR IGNORE INTO run_waits SELECT NEW.run_id, 'timer', NEW.id WHERE NEW.status = 'pending';
END;
CREATE TRIGGER run_timer_entries_update AFTER UPDATE OF status ON timers
WHEN (SELECT details_pruned_at FROM runs WHERE id = NEW.run_id) IS NULL
BEGIN
    UPDATE run_timer_entries SET status = NEW.status WHERE timer_id = NEW.id;
    DELETE FROM run_waits WHERE run_id = NEW.run_id AND kind = 'timer' AND item_id = NEW.id
        AND NEW.status != 'pending';
END;

CREATE TRIGGER run_waits_activity_insert AFTER INSERT ON activities
WHEN NEW.status = 'scheduled' AND (SELECT details_pruned_at FROM runs WHERE id = NEW.run_id) IS NULL
BEGIN
    INSERT OR IGNORE INTO run_waits VALUES (NEW.run_id, 'activity', NEW.id);
END;
CREATE TRIGGER run_waits_activity_close AFTER UPDATE OF status ON activities
WHEN NEW.status != 'scheduled'
BEGIN
    DELETE FROM run_waits WHERE run_id = NEW.run_id AND kind = 'activity' AND item_id = NEW.id;
END;

CREATE TRIGGER run_waits_child_insert AFTER INSERT ON children
WHEN NEW.status = 'open' AND (SELECT details_pruned_at FROM runs WHERE id = NEW.parent_run_id) IS NULL
BEGIN
    INSERT OR IGNORE INTO run_waits VALUES (NEW.parent_run_id, 'child', NEW.id);
END;
CREATE TRIGGER run_waits_child_close AFTER UPDATE OF status ON children
WHEN NEW.status != 'open'
BEGIN
    DELETE FROM run_waits WHERE run_id = NEW.parent_run_id AND kind = 'child' AND item_id = NEW.id;
END;
