-- The payload bytes of a run's received signals and accepted updates,
-- kept on the run row like the pending counts, so admission checks the
-- per-run byte budget by reading one row.
ALTER TABLE runs ADD COLUMN pending_payload_bytes INTEGER NOT NULL DEFAULT 0
    CHECK (pending_payload_bytes >= 0);
UPDATE runs SET pending_payload_bytes =
    (SELECT COALESCE(SUM(length(CAST(payload AS BLOB))), 0) FROM signals
        WHERE signals.run_id = runs.id AND signals.status = 'received')
  + (SELECT COALESCE(SUM(length(CAST(payload AS BLOB))), 0) FROM updates
        WHERE updates.run_id = runs.id AND updates.status = 'accepted');
