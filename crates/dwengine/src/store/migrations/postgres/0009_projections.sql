-- PostgreSQL twin of ../0009_projections.sql: run projections (a summary
-- per run and four detail projections) kept by triggers in the same
-- transaction as the rows they project, and the retention marker under its
-- contract name. The triggers never write a projection row for a marked
-- run. SQLite's INSERT OR REPLACE is ON CONFLICT (key) DO UPDATE here (no
-- other unique key on these tables, so the two agree); a WHEN that reads
-- another table is an IF in the function.
ALTER TABLE runs RENAME COLUMN details_pruned_at_ms TO details_pruned_at;
-- SQLite rewrites the history guard's WHEN to the new name; a PL/pgSQL
-- body is text, so the function follows the rename here.
CREATE OR REPLACE FUNCTION history_events_append_only_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT details_pruned_at FROM runs WHERE id = OLD.run_id) IS NULL THEN
        RAISE EXCEPTION 'history is append-only' USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN OLD;
END;
$$;

CREATE TABLE run_summaries (
    run_id BIGINT PRIMARY KEY REFERENCES runs (id),
    namespace TEXT NOT NULL,
    workflow_id TEXT NOT NULL,
    workflow_type TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    status TEXT NOT NULL,
    history_length BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    closed_at_ms BIGINT
);

-- One entry per history event: the run's timeline without its payloads.
CREATE TABLE run_timeline_entries (
    run_id BIGINT NOT NULL REFERENCES runs (id),
    sequence BIGINT NOT NULL,
    event_type TEXT NOT NULL,
    recorded_at_ms BIGINT,
    PRIMARY KEY (run_id, sequence)
);

-- One entry per timer the run started, with its current status.
CREATE TABLE run_timer_entries (
    timer_id BIGINT PRIMARY KEY REFERENCES timers (id),
    run_id BIGINT NOT NULL REFERENCES runs (id),
    delay_ms BIGINT NOT NULL,
    status TEXT NOT NULL
);
CREATE INDEX run_timer_entries_by_run ON run_timer_entries (run_id);

-- What an open run waits on: its scheduled activities, pending timers and
-- open children (an entry goes when the item closes).
CREATE TABLE run_waits (
    run_id BIGINT NOT NULL REFERENCES runs (id),
    kind TEXT NOT NULL CHECK (kind IN ('activity', 'timer', 'child')),
    item_id BIGINT NOT NULL,
    PRIMARY KEY (run_id, kind, item_id)
);

-- A child run's parent.
CREATE TABLE run_lineage_entries (
    run_id BIGINT PRIMARY KEY REFERENCES runs (id),
    parent_run_id BIGINT NOT NULL REFERENCES runs (id)
);

-- The summary follows the run row, unless the run is marked.
CREATE FUNCTION run_summaries_upsert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_summaries (run_id, namespace, workflow_id, workflow_type, task_queue,
        status, history_length, created_at_ms, closed_at_ms)
    VALUES (NEW.id, NEW.namespace, NEW.workflow_id, NEW.workflow_type, NEW.task_queue,
        NEW.status, NEW.history_length, NEW.created_at_ms, NEW.closed_at_ms)
    ON CONFLICT (run_id) DO UPDATE SET
        namespace = excluded.namespace, workflow_id = excluded.workflow_id,
        workflow_type = excluded.workflow_type, task_queue = excluded.task_queue,
        status = excluded.status, history_length = excluded.history_length,
        created_at_ms = excluded.created_at_ms, closed_at_ms = excluded.closed_at_ms;
    RETURN NULL;
END;
$$;
CREATE TRIGGER run_summaries_insert AFTER INSERT ON runs
    FOR EACH ROW WHEN (NEW.details_pruned_at IS NULL)
    EXECUTE FUNCTION run_summaries_upsert();
CREATE TRIGGER run_summaries_update AFTER UPDATE OF status, history_length, closed_at_ms ON runs
    FOR EACH ROW WHEN (NEW.details_pruned_at IS NULL)
    EXECUTE FUNCTION run_summaries_upsert();

CREATE FUNCTION run_lineage_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_lineage_entries (run_id, parent_run_id) VALUES (NEW.id, NEW.parent_run_id)
    ON CONFLICT (run_id) DO UPDATE SET parent_run_id = excluded.parent_run_id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER run_lineage_insert AFTER INSERT ON runs
    FOR EACH ROW WHEN (NEW.parent_run_id IS NOT NULL AND NEW.details_pruned_at IS NULL)
    EXECUTE FUNCTION run_lineage_insert();

CREATE FUNCTION run_timeline_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT details_pruned_at FROM runs WHERE id = NEW.run_id) IS NULL THEN
        INSERT INTO run_timeline_entries (run_id, sequence, event_type, recorded_at_ms)
        VALUES (NEW.run_id, NEW.sequence, NEW.event_type, NEW.recorded_at_ms)
        ON CONFLICT (run_id, sequence) DO UPDATE SET
            event_type = excluded.event_type, recorded_at_ms = excluded.recorded_at_ms;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER run_timeline_insert AFTER INSERT ON history_events
    FOR EACH ROW EXECUTE FUNCTION run_timeline_insert();

CREATE FUNCTION run_timer_entries_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT details_pruned_at FROM runs WHERE id = NEW.run_id) IS NULL THEN
        INSERT INTO run_timer_entries (timer_id, run_id, delay_ms, status)
        VALUES (NEW.id, NEW.run_id, NEW.delay_ms, NEW.status)
        ON CONFLICT (timer_id) DO UPDATE SET
            run_id = excluded.run_id, delay_ms = excluded.delay_ms, status = excluded.status;
        IF NEW.status = 'pending' THEN
            INSERT INTO run_waits (run_id, kind, item_id) VALUES (NEW.run_id, 'timer', NEW.id)
            ON CONFLICT DO NOTHING;
        END IF;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER run_timer_entries_insert AFTER INSERT ON timers
    FOR EACH ROW EXECUTE FUNCTION run_timer_entries_insert();

CREATE FUNCTION run_timer_entries_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT details_pruned_at FROM runs WHERE id = NEW.run_id) IS NULL THEN
        UPDATE run_timer_entries SET status = NEW.status WHERE timer_id = NEW.id;
        IF NEW.status <> 'pending' THEN
            DELETE FROM run_waits WHERE run_id = NEW.run_id AND kind = 'timer' AND item_id = NEW.id;
        END IF;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER run_timer_entries_update AFTER UPDATE OF status ON timers
    FOR EACH ROW EXECUTE FUNCTION run_timer_entries_update();

CREATE FUNCTION run_waits_activity_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT details_pruned_at FROM runs WHERE id = NEW.run_id) IS NULL THEN
        INSERT INTO run_waits (run_id, kind, item_id) VALUES (NEW.run_id, 'activity', NEW.id)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER run_waits_activity_insert AFTER INSERT ON activities
    FOR EACH ROW WHEN (NEW.status = 'scheduled')
    EXECUTE FUNCTION run_waits_activity_insert();

CREATE FUNCTION run_waits_activity_close() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM run_waits WHERE run_id = NEW.run_id AND kind = 'activity' AND item_id = NEW.id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER run_waits_activity_close AFTER UPDATE OF status ON activities
    FOR EACH ROW WHEN (NEW.status <> 'scheduled')
    EXECUTE FUNCTION run_waits_activity_close();

CREATE FUNCTION run_waits_child_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT details_pruned_at FROM runs WHERE id = NEW.parent_run_id) IS NULL THEN
        INSERT INTO run_waits (run_id, kind, item_id) VALUES (NEW.parent_run_id, 'child', NEW.id)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER run_waits_child_insert AFTER INSERT ON children
    FOR EACH ROW WHEN (NEW.status = 'open')
    EXECUTE FUNCTION run_waits_child_insert();

CREATE FUNCTION run_waits_child_close() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM run_waits WHERE run_id = NEW.parent_run_id AND kind = 'child' AND item_id = NEW.id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER run_waits_child_close AFTER UPDATE OF status ON children
    FOR EACH ROW WHEN (NEW.status <> 'open')
    EXECUTE FUNCTION run_waits_child_close();
