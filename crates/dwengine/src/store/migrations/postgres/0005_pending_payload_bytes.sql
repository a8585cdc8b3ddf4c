-- PostgreSQL twin of ../0005_pending_payload_bytes.sql: the payload bytes of
-- a run's received signals and accepted updates, kept on the run row.
ALTER TABLE runs ADD COLUMN pending_payload_bytes BIGINT NOT NULL DEFAULT 0
    CHECK (pending_payload_bytes >= 0);
UPDATE runs SET pending_payload_bytes =
    (SELECT COALESCE(SUM(octet_length(payload)), 0) FROM signals
        WHERE signals.run_id = runs.id AND signals.status = 'received')
  + (SELECT COALESCE(SUM(octet_length(payload)), 0) FROM updates
        WHERE updates.run_id = runs.id AND updates.status = 'accepted');
