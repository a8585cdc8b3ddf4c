-- Runtime external payload lifecycle: which holder references which
-- stored payload, so payload rows are bounded by what runs, streams and
-- schedules still hold plus the uploads of the last grace window.
--
-- external_payload_refs holds one row per (holder, holder id, payload):
-- a run holds every payload its history, activity arguments and results,
-- signal and update payloads and update results name; a workflow stream
-- the payloads its items name; a schedule those of its definition (the
-- start input of every fire). Triggers on those tables write the rows in
-- the same transaction as the row that names the payload, for either
-- reference form: the SDK's runtime envelope (reference_id) and the seed's
-- durable-workflow.v2.external-payload-reference.v1 envelope whose uri is
-- dw-runtime://external-payloads/v1/<reference_id>. Only payloads stored
-- in the holder's own namespace are held (a primary-key probe per
-- reference found, the JSON walk driving); a cheap instr() test skips
-- every row that names no reference before any JSON is parsed.
--
-- ref_count is the payload's holder count, kept by the triggers below. A
-- payload with ref_count 0 whose last upload is older than the orphan
-- grace is deleted: at once when retention prunes the last run holding it,
-- else by the orphan sweep, which walks external_payloads_unreferenced
-- oldest upload first under its scan limit. The usage triggers of 0016
-- take the deleted bytes and objects off the namespace's quota.
ALTER TABLE external_payloads ADD COLUMN ref_count INTEGER NOT NULL DEFAULT 0
    CHECK (ref_count >= 0);
ALTER TABLE external_payloads ADD COLUMN last_uploaded_at_ms INTEGER NOT NULL DEFAULT 0;
UPDATE external_payloads SET last_uploaded_at_ms = created_at_ms;
CREATE INDEX external_payloads_unreferenced
    ON external_payloads (last_uploaded_at_ms) WHERE ref_count = 0;

CREATE TABLE external_payload_refs (
    holder       TEXT NOT NULL CHECK (holder IN ('run', 'stream', 'schedule')),
    holder_id    INTEGER NOT NULL,
    reference_id TEXT NOT NULL,
    PRIMARY KEY (holder, holder_id, reference_id)
) WITHOUT ROWID;

CREATE TRIGGER external_payload_refs_count_insert AFTER INSERT ON external_payload_refs
BEGIN
    UPDATE external_payloads SET ref_count = ref_count + 1
    WHERE reference_id = NEW.reference_id;
END;
CREATE TRIGGER external_payload_refs_count_delete AFTER DELETE ON external_payload_refs
BEGIN
    UPDATE external_payloads SET ref_count = ref_count - 1
    WHERE reference_id = OLD.reference_id;
END;

-- A deleted stream or schedule releases what it held.
CREATE TRIGGER external_payload_refs_stream_release AFTER DELETE ON workflow_streams
BEGIN
    DELETE FROM external_payload_refs WHERE holder = 'stream' AND holder_id = OLD.id;
END;
CREATE TRIGGER external_payload_refs_schedule_release AFTER DELETE ON schedules
BEGIN
    DELETE FROM external_payload_refs WHERE holder = 'schedule' AND holder_id = OLD.id;
END;

CREATE TRIGGER external_payload_refs_history AFTER INSERT ON history_events
WHEN instr(NEW.payload, 'external-payload-reference.v1') > 0 AND json_valid(NEW.payload)
BEGIN
    INSERT OR IGNORE INTO external_payload_refs (holder, holder_id, reference_id)
    SELECT 'run', NEW.run_id, iif(t.key = 'uri', substr(t.atom, 35), t.atom)
    FROM json_tree(NEW.payload) t
    WHERE ((t.key = 'reference_id' AND substr(t.atom, 1, 3) = 'ep_')
        OR (t.key = 'uri' AND substr(t.atom, 1, 37) = 'dw-runtime://external-payloads/v1/ep_'))
      AND EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = iif(t.key = 'uri', substr(t.atom, 35), t.atom)
                    AND p.namespace = (SELECT namespace FROM runs WHERE id = NEW.run_id));
END;

CREATE TRIGGER external_payload_refs_activity_arguments AFTER INSERT ON activities
WHEN instr(NEW.arguments, 'external-payload-reference.v1') > 0 AND json_valid(NEW.arguments)
BEGIN
    INSERT OR IGNORE INTO external_payload_refs (holder, holder_id, reference_id)
    SELECT 'run', NEW.run_id, iif(t.key = 'uri', substr(t.atom, 35), t.atom)
    FROM json_tree(NEW.arguments) t
    WHERE ((t.key = 'reference_id' AND substr(t.atom, 1, 3) = 'ep_')
        OR (t.key = 'uri' AND substr(t.atom, 1, 37) = 'dw-runtime://external-payloads/v1/ep_'))
      AND EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = iif(t.key = 'uri', substr(t.atom, 35), t.atom)
                    AND p.namespace = (SELECT namespace FROM runs WHERE id = NEW.run_id));
END;

CREATE TRIGGER external_payload_refs_activity_result AFTER UPDATE OF result ON activities
WHEN instr(NEW.result, 'external-payload-reference.v1') > 0 AND json_valid(NEW.result)
BEGIN
    INSERT OR IGNORE INTO external_payload_refs (holder, holder_id, reference_id)
    SELECT 'run', NEW.run_id, iif(t.key = 'uri', substr(t.atom, 35), t.atom)
    FROM json_tree(NEW.result) t
    WHERE ((t.key = 'reference_id' AND substr(t.atom, 1, 3) = 'ep_')
        OR (t.key = 'uri' AND substr(t.atom, 1, 37) = 'dw-runtime://external-payloads/v1/ep_'))
      AND EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = iif(t.key = 'uri', substr(t.atom, 35), t.atom)
                    AND p.namespace = (SELECT namespace FROM runs WHERE id = NEW.run_id));
END;

CREATE TRIGGER external_payload_refs_signal AFTER INSERT ON signals
WHEN instr(NEW.payload, 'external-payload-reference.v1') > 0 AND json_valid(NEW.payload)
BEGIN
    INSERT OR IGNORE INTO external_payload_refs (holder, holder_id, reference_id)
    SELECT 'run', NEW.run_id, iif(t.key = 'uri', substr(t.atom, 35), t.atom)
    FROM json_tree(NEW.payload) t
    WHERE ((t.key = 'reference_id' AND substr(t.atom, 1, 3) = 'ep_')
        OR (t.key = 'uri' AND substr(t.atom, 1, 37) = 'dw-runtime://external-payloads/v1/ep_'))
      AND EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = iif(t.key = 'uri', substr(t.atom, 35), t.atom)
                    AND p.namespace = (SELECT namespace FROM runs WHERE id = NEW.run_id));
END;

CREATE TRIGGER external_payload_refs_update_payload AFTER INSERT ON updates
WHEN instr(NEW.payload, 'external-payload-reference.v1') > 0 AND json_valid(NEW.payload)
BEGIN
    INSERT OR IGNORE INTO external_payload_refs (holder, holder_id, reference_id)
    SELECT 'run', NEW.run_id, iif(t.key = 'uri', substr(t.atom, 35), t.atom)
    FROM json_tree(NEW.payload) t
    WHERE ((t.key = 'reference_id' AND substr(t.atom, 1, 3) = 'ep_')
        OR (t.key = 'uri' AND substr(t.atom, 1, 37) = 'dw-runtime://external-payloads/v1/ep_'))
      AND EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = iif(t.key = 'uri', substr(t.atom, 35), t.atom)
                    AND p.namespace = (SELECT namespace FROM runs WHERE id = NEW.run_id));
END;

CREATE TRIGGER external_payload_refs_update_result AFTER UPDATE OF result ON updates
WHEN instr(NEW.result, 'external-payload-reference.v1') > 0 AND json_valid(NEW.result)
BEGIN
    INSERT OR IGNORE INTO external_payload_refs (holder, holder_id, reference_id)
    SELECT 'run', NEW.run_id, iif(t.key = 'uri', substr(t.atom, 35), t.atom)
    FROM json_tree(NEW.result) t
    WHERE ((t.key = 'reference_id' AND substr(t.atom, 1, 3) = 'ep_')
        OR (t.key = 'uri' AND substr(t.atom, 1, 37) = 'dw-runtime://external-payloads/v1/ep_'))
      AND EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = iif(t.key = 'uri', substr(t.atom, 35), t.atom)
                    AND p.namespace = (SELECT namespace FROM runs WHERE id = NEW.run_id));
END;

CREATE TRIGGER external_payload_refs_stream_item AFTER INSERT ON workflow_stream_items
WHEN instr(NEW.payload, 'external-payload-reference.v1') > 0 AND json_valid(NEW.payload)
BEGIN
    INSERT OR IGNORE INTO external_payload_refs (holder, holder_id, reference_id)
    SELECT 'stream', NEW.stream_id, iif(t.key = 'uri', substr(t.atom, 35), t.atom)
    FROM json_tree(NEW.payload) t
    WHERE ((t.key = 'reference_id' AND substr(t.atom, 1, 3) = 'ep_')
        OR (t.key = 'uri' AND substr(t.atom, 1, 37) = 'dw-runtime://external-payloads/v1/ep_'))
      AND EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = iif(t.key = 'uri', substr(t.atom, 35), t.atom)
                    AND p.namespace = (SELECT namespace FROM workflow_streams WHERE id = NEW.stream_id));
END;

CREATE TRIGGER external_payload_refs_schedule AFTER INSERT ON schedules
WHEN instr(NEW.definition, 'external-payload-reference.v1') > 0 AND json_valid(NEW.definition)
BEGIN
    INSERT OR IGNORE INTO external_payload_refs (holder, holder_id, reference_id)
    SELECT 'schedule', NEW.id, iif(t.key = 'uri', substr(t.atom, 35), t.atom)
    FROM json_tree(NEW.definition) t
    WHERE ((t.key = 'reference_id' AND substr(t.atom, 1, 3) = 'ep_')
        OR (t.key = 'uri' AND substr(t.atom, 1, 37) = 'dw-runtime://external-payloads/v1/ep_'))
      AND EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = iif(t.key = 'uri', substr(t.atom, 35), t.atom)
                    AND p.namespace = NEW.namespace);
END;

-- A new definition replaces the schedule's references (one trigger, so
-- the release runs before the insert).
CREATE TRIGGER external_payload_refs_schedule_update AFTER UPDATE OF definition ON schedules
BEGIN
    DELETE FROM external_payload_refs WHERE holder = 'schedule' AND holder_id = OLD.id;
    INSERT OR IGNORE INTO external_payload_refs (holder, holder_id, reference_id)
    SELECT 'schedule', NEW.id, iif(t.key = 'uri', substr(t.atom, 35), t.atom)
    FROM json_tree(iif(instr(NEW.definition, 'external-payload-reference.v1') > 0 AND json_valid(NEW.definition), NEW.definition, '[]')) t
    WHERE ((t.key = 'reference_id' AND substr(t.atom, 1, 3) = 'ep_')
        OR (t.key = 'uri' AND substr(t.atom, 1, 37) = 'dw-runtime://external-payloads/v1/ep_'))
      AND EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = iif(t.key = 'uri', substr(t.atom, 35), t.atom)
                    AND p.namespace = NEW.namespace);
END;

-- Rows written before this migration: the same references, once.
WITH src AS MATERIALIZED (
    SELECT run_id, payload AS doc FROM history_events
    WHERE EXISTS (SELECT 1 FROM external_payloads) AND payload IS NOT NULL AND instr(payload, 'external-payload-reference.v1') > 0 AND json_valid(payload)
)
INSERT OR IGNORE INTO external_payload_refs (holder, holder_id, reference_id)
SELECT 'run', src.run_id, iif(t.key = 'uri', substr(t.atom, 35), t.atom)
    FROM src, json_tree(src.doc) t
    WHERE ((t.key = 'reference_id' AND substr(t.atom, 1, 3) = 'ep_')
        OR (t.key = 'uri' AND substr(t.atom, 1, 37) = 'dw-runtime://external-payloads/v1/ep_'))
      AND EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = iif(t.key = 'uri', substr(t.atom, 35), t.atom)
                    AND p.namespace = (SELECT namespace FROM runs WHERE id = src.run_id));

WITH src AS MATERIALIZED (
    SELECT run_id, arguments AS doc FROM activities
    WHERE EXISTS (SELECT 1 FROM external_payloads) AND arguments IS NOT NULL AND instr(arguments, 'external-payload-reference.v1') > 0 AND json_valid(arguments)
)
INSERT OR IGNORE INTO external_payload_refs (holder, holder_id, reference_id)
SELECT 'run', src.run_id, iif(t.key = 'uri', substr(t.atom, 35), t.atom)
    FROM src, json_tree(src.doc) t
    WHERE ((t.key = 'reference_id' AND substr(t.atom, 1, 3) = 'ep_')
        OR (t.key = 'uri' AND substr(t.atom, 1, 37) = 'dw-runtime://external-payloads/v1/ep_'))
      AND EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = iif(t.key = 'uri', substr(t.atom, 35), t.atom)
                    AND p.namespace = (SELECT namespace FROM runs WHERE id = src.run_id));

WITH src AS MATERIALIZED (
    SELECT run_id, result AS doc FROM activities
    WHERE EXISTS (SELECT 1 FROM external_payloads) AND result IS NOT NULL AND instr(result, 'external-payload-reference.v1') > 0 AND json_valid(result)
)
INSERT OR IGNORE INTO external_payload_refs (holder, holder_id, reference_id)
SELECT 'run', src.run_id, iif(t.key = 'uri', substr(t.atom, 35), t.atom)
    FROM src, json_tree(src.doc) t
    WHERE ((t.key = 'reference_id' AND substr(t.atom, 1, 3) = 'ep_')
        OR (t.key = 'uri' AND substr(t.atom, 1, 37) = 'dw-runtime://external-payloads/v1/ep_'))
      AND EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = iif(t.key = 'uri', substr(t.atom, 35), t.atom)
                    AND p.namespace = (SELECT namespace FROM runs WHERE id = src.run_id));

WITH src AS MATERIALIZED (
    SELECT run_id, payload AS doc FROM signals
    WHERE EXISTS (SELECT 1 FROM external_payloads) AND payload IS NOT NULL AND instr(payload, 'external-payload-reference.v1') > 0 AND json_valid(payload)
)
INSERT OR IGNORE INTO external_payload_refs (holder, holder_id, reference_id)
SELECT 'run', src.run_id, iif(t.key = 'uri', substr(t.atom, 35), t.atom)
    FROM src, json_tree(src.doc) t
    WHERE ((t.key = 'reference_id' AND substr(t.atom, 1, 3) = 'ep_')
        OR (t.key = 'uri' AND substr(t.atom, 1, 37) = 'dw-runtime://external-payloads/v1/ep_'))
      AND EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = iif(t.key = 'uri', substr(t.atom, 35), t.atom)
                    AND p.namespace = (SELECT namespace FROM runs WHERE id = src.run_id));

WITH src AS MATERIALIZED (
    SELECT run_id, payload AS doc FROM updates
    WHERE EXISTS (SELECT 1 FROM external_payloads) AND payload IS NOT NULL AND instr(payload, 'external-payload-reference.v1') > 0 AND json_valid(payload)
)
INSERT OR IGNORE INTO external_payload_refs (holder, holder_id, reference_id)
SELECT 'run', src.run_id, iif(t.key = 'uri', substr(t.atom, 35), t.atom)
    FROM src, json_tree(src.doc) t
    WHERE ((t.key = 'reference_id' AND substr(t.atom, 1, 3) = 'ep_')
        OR (t.key = 'uri' AND substr(t.atom, 1, 37) = 'dw-runtime://external-payloads/v1/ep_'))
      AND EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = iif(t.key = 'uri', substr(t.atom, 35), t.atom)
                    AND p.namespace = (SELECT namespace FROM runs WHERE id = src.run_id));

WITH src AS MATERIALIZED (
    SELECT run_id, result AS doc FROM updates
    WHERE EXISTS (SELECT 1 FROM external_payloads) AND result IS NOT NULL AND instr(result, 'external-payload-reference.v1') > 0 AND json_valid(result)
)
INSERT OR IGNORE INTO external_payload_refs (holder, holder_id, reference_id)
SELECT 'run', src.run_id, iif(t.key = 'uri', substr(t.atom, 35), t.atom)
    FROM src, json_tree(src.doc) t
    WHERE ((t.key = 'reference_id' AND substr(t.atom, 1, 3) = 'ep_')
        OR (t.key = 'uri' AND substr(t.atom, 1, 37) = 'dw-runtime://external-payloads/v1/ep_'))
      AND EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = iif(t.key = 'uri', substr(t.atom, 35), t.atom)
                    AND p.namespace = (SELECT namespace FROM runs WHERE id = src.run_id));

WITH src AS MATERIALIZED (
    SELECT stream_id, payload AS doc FROM workflow_stream_items
    WHERE EXISTS (SELECT 1 FROM external_payloads) AND payload IS NOT NULL AND instr(payload, 'external-payload-reference.v1') > 0 AND json_valid(payload)
)
INSERT OR IGNORE INTO external_payload_refs (holder, holder_id, reference_id)
SELECT 'stream', src.stream_id, iif(t.key = 'uri', substr(t.atom, 35), t.atom)
    FROM src, json_tree(src.doc) t
    WHERE ((t.key = 'reference_id' AND substr(t.atom, 1, 3) = 'ep_')
        OR (t.key = 'uri' AND substr(t.atom, 1, 37) = 'dw-runtime://external-payloads/v1/ep_'))
      AND EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = iif(t.key = 'uri', substr(t.atom, 35), t.atom)
                    AND p.namespace = (SELECT namespace FROM workflow_streams WHERE id = src.stream_id));

WITH src AS MATERIALIZED (
    SELECT id, namespace, definition AS doc FROM schedules
    WHERE EXISTS (SELECT 1 FROM external_payloads) AND definition IS NOT NULL AND instr(definition, 'external-payload-reference.v1') > 0 AND json_valid(definition)
)
INSERT OR IGNORE INTO external_payload_refs (holder, holder_id, reference_id)
SELECT 'schedule', src.id, iif(t.key = 'uri', substr(t.atom, 35), t.atom)
    FROM src, json_tree(src.doc) t
    WHERE ((t.key = 'reference_id' AND substr(t.atom, 1, 3) = 'ep_')
        OR (t.key = 'uri' AND substr(t.atom, 1, 37) = 'dw-runtime://external-payloads/v1/ep_'))
      AND EXISTS (SELECT 1 FROM external_payloads p
                  WHERE p.reference_id = iif(t.key = 'uri', substr(t.atom, 35), t.atom)
                    AND p.namespace = src.namespace);

