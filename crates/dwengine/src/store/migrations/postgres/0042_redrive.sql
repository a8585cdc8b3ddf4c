-- PostgreSQL twin of ../0042_redrive.sql: a failed run's successor names its
-- resume point and the request id that started it.
ALTER TABLE runs ADD COLUMN resume_step_sequence BIGINT;
ALTER TABLE runs ADD COLUMN redrive_request_id TEXT;
CREATE UNIQUE INDEX runs_by_redrive_request ON runs (namespace, workflow_id, redrive_request_id)
    WHERE redrive_request_id IS NOT NULL;
