-- PostgreSQL twin of ../0016_external_payloads.sql: runtime external
-- payloads, one row per (namespace, codec, sha256, size), and the
-- namespace's byte/object total kept by triggers.
CREATE TABLE external_payloads (
    reference_id  TEXT PRIMARY KEY,
    namespace     TEXT NOT NULL,
    codec         TEXT NOT NULL,
    size_bytes    BIGINT NOT NULL CHECK (size_bytes >= 0),
    sha256        TEXT NOT NULL,
    data          BYTEA NOT NULL,
    created_at_ms BIGINT NOT NULL,
    UNIQUE (namespace, codec, sha256, size_bytes)
);
CREATE TABLE external_payload_usage (
    namespace TEXT PRIMARY KEY,
    bytes     BIGINT NOT NULL DEFAULT 0,
    objects   BIGINT NOT NULL DEFAULT 0
);

CREATE FUNCTION external_payload_usage_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO external_payload_usage AS u (namespace, bytes, objects)
    VALUES (NEW.namespace, NEW.size_bytes, 1)
    ON CONFLICT (namespace) DO UPDATE SET
        bytes = u.bytes + NEW.size_bytes, objects = u.objects + 1;
    RETURN NULL;
END;
$$;
CREATE TRIGGER external_payload_usage_insert AFTER INSERT ON external_payloads
    FOR EACH ROW EXECUTE FUNCTION external_payload_usage_insert();

CREATE FUNCTION external_payload_usage_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE external_payload_usage
    SET bytes = bytes - OLD.size_bytes, objects = objects - 1
    WHERE namespace = OLD.namespace;
    RETURN NULL;
END;
$$;
CREATE TRIGGER external_payload_usage_delete AFTER DELETE ON external_payloads
    FOR EACH ROW EXECUTE FUNCTION external_payload_usage_delete();
