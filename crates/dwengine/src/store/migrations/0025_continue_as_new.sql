-- Continue-as-new: a run closes as continued_as_new and a new run of the
-- same workflow id starts in the same transaction; each names the other.

-- The chain: one link each way, set when the successor starts (a fixed two
-- columns per run, however long the chain grows).
ALTER TABLE runs ADD COLUMN continued_from_run_id INTEGER REFERENCES runs (id);
ALTER TABLE runs ADD COLUMN continued_to_run_id INTEGER REFERENCES runs (id);

-- The new terminal status. SQLite cannot alter a CHECK constraint; widening
-- one rewrites the stored schema text (every existing row satisfies the
-- wider check), as 0006_protocol did for cancelled and terminated. After
-- the columns above: ADD COLUMN splices its text in at an offset of the
-- parsed schema, which this rewrite would leave stale within the
-- transaction.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
SET sql = replace(sql,
    'CHECK (status IN (''running'', ''completed'', ''failed'', ''cancelled'', ''terminated''))',
    'CHECK (status IN (''running'', ''completed'', ''failed'', ''cancelled'', ''terminated'', ''continued_as_new''))')
WHERE type = 'table' AND name = 'runs';
PRAGMA writable_schema = OFF;

-- dw_workflow_runs_total's series count runs closed as continued, so that
-- running (started minus the closed counts) leaves them out.
ALTER TABLE workflow_run_series ADD COLUMN continued_as_new INTEGER NOT NULL DEFAULT 0;

DROP TRIGGER workflow_run_series_close;
CREATE TRIGGER workflow_run_series_close AFTER UPDATE OF status ON runs
WHEN OLD.status = 'running' AND NEW.status != 'running'
BEGIN
    UPDATE workflow_run_series SET
        completed = completed + (NEW.status = 'completed'),
        failed = failed + (NEW.status = 'failed'),
        cancelled = cancelled + (NEW.status = 'cancelled'),
        terminated = terminated + (NEW.status = 'terminated'),
        continued_as_new = continued_as_new + (NEW.status = 'continued_as_new'),
        latency_count = latency_count + (NEW.closed_at_ms IS NOT NULL),
        latency_sum_ms = latency_sum_ms + COALESCE(MAX((NEW.closed_at_ms - NEW.created_at_ms), 0), 0),
        le_0_1 = le_0_1 + COALESCE((NEW.closed_at_ms - NEW.created_at_ms) <= 100, 0),
        le_0_5 = le_0_5 + COALESCE((NEW.closed_at_ms - NEW.created_at_ms) <= 500, 0),
        le_1 = le_1 + COALESCE((NEW.closed_at_ms - NEW.created_at_ms) <= 1000, 0),
        le_2_5 = le_2_5 + COALESCE((NEW.closed_at_ms - NEW.created_at_ms) <= 2500, 0),
        le_5 = le_5 + COALESCE((NEW.closed_at_ms - NEW.created_at_ms) <= 5000, 0),
        le_10 = le_10 + COALESCE((NEW.closed_at_ms - NEW.created_at_ms) <= 10000, 0),
        le_30 = le_30 + COALESCE((NEW.closed_at_ms - NEW.created_at_ms) <= 30000, 0),
        le_60 = le_60 + COALESCE((NEW.closed_at_ms - NEW.created_at_ms) <= 60000, 0),
        le_300 = le_300 + COALESCE((NEW.closed_at_ms - NEW.created_at_ms) <= 300000, 0),
        le_900 = le_900 + COALESCE((NEW.closed_at_ms - NEW.created_at_ms) <= 900000, 0)
    WHERE namespace = NEW.namespace AND task_queue = NEW.task_queue
        AND workflow_type = NEW.workflow_type;
END;
