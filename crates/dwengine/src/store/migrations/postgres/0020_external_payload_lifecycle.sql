-- PostgreSQL twin of ../0020_external_payload_lifecycle.sql: which holder
-- (a run, a workflow stream, a schedule) references which stored payload,
-- kept by triggers in the transaction of the row that names it, and each
-- payload's holder count. SQLite walks each document with json_tree behind
-- a cheap instr() test and json_valid(); payload_reference_ids (0000) does
-- the same walk (same marker test, same keys and prefixes, a document that
-- is not JSON names nothing). INSERT OR IGNORE is ON CONFLICT DO NOTHING
-- (DISTINCT: one document may name a payload twice, which SQLite's OR
-- IGNORE absorbs row by row and PostgreSQL's ON CONFLICT refuses within one
-- statement).
ALTER TABLE external_payloads ADD COLUMN ref_count BIGINT NOT NULL DEFAULT 0
    CHECK (ref_count >= 0);
ALTER TABLE external_payloads ADD COLUMN last_uploaded_at_ms BIGINT NOT NULL DEFAULT 0;
UPDATE external_payloads SET last_uploaded_at_ms = created_at_ms;
CREATE INDEX external_payloads_unreferenced
    ON external_payloads (last_uploaded_at_ms) WHERE ref_count = 0;

CREATE TABLE external_payload_refs (
    holder       TEXT NOT NULL CHECK (holder IN ('run', 'stream', 'schedule')),
    holder_id    BIGINT NOT NULL,
    reference_id TEXT NOT NULL,
    PRIMARY KEY (holder, holder_id, reference_id)
);

CREATE FUNCTION external_payload_refs_count_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE external_payloads SET ref_count = ref_count + 1
    WHERE reference_id = NEW.reference_id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER external_payload_refs_count_insert AFTER INSERT ON external_payload_refs
    FOR EACH ROW EXECUTE FUNCTION external_payload_refs_count_insert();

CREATE FUNCTION external_payload_refs_count_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE external_payloads SET ref_count = ref_count - 1
    WHERE reference_id = OLD.reference_id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER external_payload_refs_count_delete AFTER DELETE ON external_payload_refs
    FOR EACH ROW EXECUTE FUNCTION external_payload_refs_count_delete();

-- A deleted stream or schedule releases what it held.
CREATE FUNCTION external_payload_refs_stream_release() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM external_payload_refs WHERE holder = 'stream' AND holder_id = OLD.id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER external_payload_refs_stream_release AFTER DELETE ON workflow_streams
    FOR EACH ROW EXECUTE FUNCTION external_payload_refs_stream_release();

CREATE FUNCTION external_payload_refs_schedule_release() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM external_payload_refs WHERE holder = 'schedule' AND holder_id = OLD.id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER external_payload_refs_schedule_release AFTER DELETE ON schedules
    FOR EACH ROW EXECUTE FUNCTION external_payload_refs_schedule_release();

CREATE FUNCTION external_payload_refs_history() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO external_payload_refs (holder, holder_id, reference_id)
    SELECT DISTINCT 'run', NEW.run_id, r.id FROM payload_reference_ids(NEW.payload) AS r(id)
    WHERE EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = r.id AND p.namespace = (SELECT namespace FROM runs WHERE id = NEW.run_id))
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$;
CREATE TRIGGER external_payload_refs_history AFTER INSERT ON history_events
    FOR EACH ROW EXECUTE FUNCTION external_payload_refs_history();

CREATE FUNCTION external_payload_refs_activity_arguments() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO external_payload_refs (holder, holder_id, reference_id)
    SELECT DISTINCT 'run', NEW.run_id, r.id FROM payload_reference_ids(NEW.arguments) AS r(id)
    WHERE EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = r.id AND p.namespace = (SELECT namespace FROM runs WHERE id = NEW.run_id))
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$;
CREATE TRIGGER external_payload_refs_activity_arguments AFTER INSERT ON activities
    FOR EACH ROW EXECUTE FUNCTION external_payload_refs_activity_arguments();

CREATE FUNCTION external_payload_refs_activity_result() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO external_payload_refs (holder, holder_id, reference_id)
    SELECT DISTINCT 'run', NEW.run_id, r.id FROM payload_reference_ids(NEW.result) AS r(id)
    WHERE EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = r.id AND p.namespace = (SELECT namespace FROM runs WHERE id = NEW.run_id))
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$;
CREATE TRIGGER external_payload_refs_activity_result AFTER UPDATE OF result ON activities
    FOR EACH ROW EXECUTE FUNCTION external_payload_refs_activity_result();

CREATE FUNCTION external_payload_refs_signal() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO external_payload_refs (holder, holder_id, reference_id)
    SELECT DISTINCT 'run', NEW.run_id, r.id FROM payload_reference_ids(NEW.payload) AS r(id)
    WHERE EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = r.id AND p.namespace = (SELECT namespace FROM runs WHERE id = NEW.run_id))
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$;
CREATE TRIGGER external_payload_refs_signal AFTER INSERT ON signals
    FOR EACH ROW EXECUTE FUNCTION external_payload_refs_signal();

CREATE FUNCTION external_payload_refs_update_payload() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO external_payload_refs (holder, holder_id, reference_id)
    SELECT DISTINCT 'run', NEW.run_id, r.id FROM payload_reference_ids(NEW.payload) AS r(id)
    WHERE EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = r.id AND p.namespace = (SELECT namespace FROM runs WHERE id = NEW.run_id))
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$;
CREATE TRIGGER external_payload_refs_update_payload AFTER INSERT ON updates
    FOR EACH ROW EXECUTE FUNCTION external_payload_refs_update_payload();

CREATE FUNCTION external_payload_refs_update_result() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO external_payload_refs (holder, holder_id, reference_id)
    SELECT DISTINCT 'run', NEW.run_id, r.id FROM payload_reference_ids(NEW.result) AS r(id)
    WHERE EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = r.id AND p.namespace = (SELECT namespace FROM runs WHERE id = NEW.run_id))
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$;
CREATE TRIGGER external_payload_refs_update_result AFTER UPDATE OF result ON updates
    FOR EACH ROW EXECUTE FUNCTION external_payload_refs_update_result();

CREATE FUNCTION external_payload_refs_stream_item() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO external_payload_refs (holder, holder_id, reference_id)
    SELECT DISTINCT 'stream', NEW.stream_id, r.id FROM payload_reference_ids(NEW.payload) AS r(id)
    WHERE EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = r.id AND p.namespace = (SELECT namespace FROM workflow_streams WHERE id = NEW.stream_id))
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$;
CREATE TRIGGER external_payload_refs_stream_item AFTER INSERT ON workflow_stream_items
    FOR EACH ROW EXECUTE FUNCTION external_payload_refs_stream_item();

CREATE FUNCTION external_payload_refs_schedule() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO external_payload_refs (holder, holder_id, reference_id)
    SELECT DISTINCT 'schedule', NEW.id, r.id FROM payload_reference_ids(NEW.definition) AS r(id)
    WHERE EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = r.id AND p.namespace = NEW.namespace)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$;
CREATE TRIGGER external_payload_refs_schedule AFTER INSERT ON schedules
    FOR EACH ROW EXECUTE FUNCTION external_payload_refs_schedule();

-- A new definition replaces the schedule's references (one function, so
-- the release runs before the insert).
CREATE FUNCTION external_payload_refs_schedule_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM external_payload_refs WHERE holder = 'schedule' AND holder_id = OLD.id;
    INSERT INTO external_payload_refs (holder, holder_id, reference_id)
    SELECT DISTINCT 'schedule', NEW.id, r.id FROM payload_reference_ids(NEW.definition) AS r(id)
    WHERE EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = r.id AND p.namespace = NEW.namespace)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$;
CREATE TRIGGER external_payload_refs_schedule_update AFTER UPDATE OF definition ON schedules
    FOR EACH ROW EXECUTE FUNCTION external_payload_refs_schedule_update();

-- Rows written before this migration: the same references, once.

INSERT INTO external_payload_refs (holder, holder_id, reference_id)
SELECT DISTINCT 'run', src.run_id, r.id
FROM history_events src CROSS JOIN LATERAL payload_reference_ids(src.payload) AS r(id)
WHERE EXISTS (SELECT 1 FROM external_payloads p
              WHERE p.reference_id = r.id AND p.namespace = (SELECT namespace FROM runs WHERE id = src.run_id))
ON CONFLICT DO NOTHING;

INSERT INTO external_payload_refs (holder, holder_id, reference_id)
SELECT DISTINCT 'run', src.run_id, r.id
FROM activities src CROSS JOIN LATERAL payload_reference_ids(src.arguments) AS r(id)
WHERE EXISTS (SELECT 1 FROM external_payloads p
              WHERE p.reference_id = r.id AND p.namespace = (SELECT namespace FROM runs WHERE id = src.run_id))
ON CONFLICT DO NOTHING;

INSERT INTO external_payload_refs (holder, holder_id, reference_id)
SELECT DISTINCT 'run', src.run_id, r.id
FROM activities src CROSS JOIN LATERAL payload_reference_ids(src.result) AS r(id)
WHERE EXISTS (SELECT 1 FROM external_payloads p
              WHERE p.reference_id = r.id AND p.namespace = (SELECT namespace FROM runs WHERE id = src.run_id))
ON CONFLICT DO NOTHING;

INSERT INTO external_payload_refs (holder, holder_id, reference_id)
SELECT DISTINCT 'run', src.run_id, r.id
FROM signals src CROSS JOIN LATERAL payload_reference_ids(src.payload) AS r(id)
WHERE EXISTS (SELECT 1 FROM external_payloads p
              WHERE p.reference_id = r.id AND p.namespace = (SELECT namespace FROM runs WHERE id = src.run_id))
ON CONFLICT DO NOTHING;

INSERT INTO external_payload_refs (holder, holder_id, reference_id)
SELECT DISTINCT 'run', src.run_id, r.id
FROM updates src CROSS JOIN LATERAL payload_reference_ids(src.payload) AS r(id)
WHERE EXISTS (SELECT 1 FROM external_payloads p
              WHERE p.reference_id = r.id AND p.namespace = (SELECT namespace FROM runs WHERE id = src.run_id))
ON CONFLICT DO NOTHING;

INSERT INTO external_payload_refs (holder, holder_id, reference_id)
SELECT DISTINCT 'run', src.run_id, r.id
FROM updates src CROSS JOIN LATERAL payload_reference_ids(src.result) AS r(id)
WHERE EXISTS (SELECT 1 FROM external_payloads p
              WHERE p.reference_id = r.id AND p.namespace = (SELECT namespace FROM runs WHERE id = src.run_id))
ON CONFLICT DO NOTHING;

INSERT INTO external_payload_refs (holder, holder_id, reference_id)
SELECT DISTINCT 'stream', src.stream_id, r.id
FROM workflow_stream_items src CROSS JOIN LATERAL payload_reference_ids(src.payload) AS r(id)
WHERE EXISTS (SELECT 1 FROM external_payloads p
              WHERE p.reference_id = r.id AND p.namespace = (SELECT namespace FROM workflow_streams WHERE id = src.stream_id))
ON CONFLICT DO NOTHING;

INSERT INTO external_payload_refs (holder, holder_id, reference_id)
SELECT DISTINCT 'schedule', src.id, r.id
FROM schedules src CROSS JOIN LATERAL payload_reference_ids(src.definition) AS r(id)
WHERE EXISTS (SELECT 1 FROM external_payloads p
              WHERE p.reference_id = r.id AND p.namespace = src.namespace)
ON CONFLICT DO NOTHING;
