-- Runtime external payloads: bytes a client or worker uploaded through
-- POST /api/external-payloads/v1, referenced from history by the
-- durable-workflow.v2.runtime-external-payload-reference.v1 envelope.
-- One row per (namespace, codec, sha256, size): a repeated upload of the
-- same bytes returns the same reference and adds no row. The usage table
-- is the namespace's byte/object total, kept by triggers in the same
-- transaction as the rows, so the quota reads one row, never a scan.
CREATE TABLE external_payloads (
    reference_id  TEXT PRIMARY KEY,
    namespace     TEXT NOT NULL,
    codec         TEXT NOT NULL,
    size_bytes    INTEGER NOT NULL CHECK (size_bytes >= 0),
    sha256        TEXT NOT NULL,
    data          BLOB NOT NULL,
    created_at_ms INTEGER NOT NULL,
    UNIQUE (namespace, codec, sha256, size_bytes)
);
CREATE TABLE external_payload_usage (
    namespace TEXT PRIMARY KEY,
    bytes     INTEGER NOT NULL DEFAULT 0,
    objects   INTEGER NOT NULL DEFAULT 0
);
CREATE TRIGGER external_payload_usage_insert AFTER INSERT ON external_payloads
BEGIN
    INSERT INTO external_payload_usage (namespace, bytes, objects)
    VALUES (NEW.namespace, NEW.size_bytes, 1)
    ON CONFLICT (namespace) DO UPDATE SET
        bytes = bytes + NEW.size_bytes, objects = objects + 1;
END;
CREATE TRIGGER external_payload_usage_delete AFTER DELETE ON external_payloads
BEGIN
    UPDATE external_payload_usage
    SET bytes = bytes - OLD.size_bytes, objects = objects - 1
    WHERE namespace = OLD.namespace;
END;
