-- PostgreSQL twin of ../0007_timeouts.sql: timeouts the store enforces. An
-- open activity's dispatch row carries its earliest due timeout and which
-- one it is; a running run carries its earliest deadline. The partial
-- indexes hold only live deadlines.
ALTER TABLE dispatch_tasks ADD COLUMN timeout_at_ms BIGINT;
ALTER TABLE dispatch_tasks ADD COLUMN timeout_kind TEXT;
-- When the current attempt was leased and last heartbeat (heartbeat timeout).
ALTER TABLE dispatch_tasks ADD COLUMN attempt_started_at_ms BIGINT;
ALTER TABLE dispatch_tasks ADD COLUMN last_heartbeat_at_ms BIGINT;
CREATE INDEX dispatch_timeouts ON dispatch_tasks (timeout_at_ms)
    WHERE timeout_at_ms IS NOT NULL;

ALTER TABLE runs ADD COLUMN execution_timeout_seconds BIGINT;
ALTER TABLE runs ADD COLUMN run_timeout_seconds BIGINT;
ALTER TABLE runs ADD COLUMN deadline_at_ms BIGINT;
ALTER TABLE runs ADD COLUMN deadline_kind TEXT;
CREATE INDEX runs_deadlines ON runs (deadline_at_ms) WHERE deadline_at_ms IS NOT NULL;
