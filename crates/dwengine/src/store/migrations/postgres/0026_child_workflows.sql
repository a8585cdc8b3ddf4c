-- PostgreSQL twin of ../0026_child_workflows.sql: children started by
-- workflow code over the wire keep the parent's command sequence, the
-- parent-close policy, the fields the parent's ChildRun* events repeat, the
-- retry policy and the attempt of the open run.
ALTER TABLE children ADD COLUMN sequence BIGINT;
ALTER TABLE children ADD COLUMN parent_close_policy TEXT NOT NULL DEFAULT 'abandon';
ALTER TABLE children ADD COLUMN event_fields TEXT;
ALTER TABLE children ADD COLUMN retry_policy TEXT;
ALTER TABLE children ADD COLUMN attempt BIGINT NOT NULL DEFAULT 1;
