-- Redrive: a failed run's successor, a new run of the same workflow id that
-- starts with the failed run's completed activity prefix in its history and
-- resumes at the failed activity. Two fixed columns per run, however often a
-- workflow is redriven (each redrive is a run of its own, under the same
-- limits, counters and retention as any other).

-- The successor's resume point (the failed step's sequence); NULL on every
-- run that was not started by a redrive.
ALTER TABLE runs ADD COLUMN resume_step_sequence INTEGER;
-- The caller's request id that made a retried redrive converge on the same
-- successor: unique per workflow id, like a start's.
ALTER TABLE runs ADD COLUMN redrive_request_id TEXT;
CREATE UNIQUE INDEX runs_by_redrive_request ON runs (namespace, workflow_id, redrive_request_id)
    WHERE redrive_request_id IS NOT NULL;
