-- PostgreSQL twin of ../0004_idempotency.sql: request ids that make client
-- operations converge after a crash.
ALTER TABLE runs ADD COLUMN start_request_id TEXT;
ALTER TABLE runs ADD COLUMN cancel_request_id TEXT;
ALTER TABLE runs ADD COLUMN terminate_request_id TEXT;
CREATE UNIQUE INDEX runs_by_start_request ON runs (namespace, workflow_id, start_request_id)
    WHERE start_request_id IS NOT NULL;

-- Idle worker registrations are swept oldest heartbeat first.
CREATE INDEX workers_by_heartbeat ON workers (last_heartbeat_ms);
