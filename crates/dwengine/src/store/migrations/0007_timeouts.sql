-- Timeouts the store enforces. An open activity's dispatch row carries its
-- earliest due timeout (schedule-to-start, start-to-close, heartbeat or
-- schedule-to-close) and which one it is; a running run carries its
-- earliest deadline (run or execution timeout). Each deadline is cleared
-- when the row closes, so the partial indexes hold only live deadlines and
-- a sweep finds the due ones by an index walk that stops at its limit.
ALTER TABLE dispatch_tasks ADD COLUMN timeout_at_ms INTEGER;
ALTER TABLE dispatch_tasks ADD COLUMN timeout_kind TEXT;
-- When the current attempt was leased and last heartbeat (heartbeat timeout).
ALTER TABLE dispatch_tasks ADD COLUMN attempt_started_at_ms INTEGER;
ALTER TABLE dispatch_tasks ADD COLUMN last_heartbeat_at_ms INTEGER;
CREATE INDEX dispatch_timeouts ON dispatch_tasks (timeout_at_ms)
    WHERE timeout_at_ms IS NOT NULL;

ALTER TABLE runs ADD COLUMN execution_timeout_seconds INTEGER;
ALTER TABLE runs ADD COLUMN run_timeout_seconds INTEGER;
ALTER TABLE runs ADD COLUMN deadline_at_ms INTEGER;
ALTER TABLE runs ADD COLUMN deadline_kind TEXT;
CREATE INDEX runs_deadlines ON runs (deadline_at_ms) WHERE deadline_at_ms IS NOT NULL;
