-- An activity its workflow cancelled (a selection member it no longer
-- needs) closes as cancelled, not failed: dw_activity_executions' series
-- count it apart, so failures mean failures.

-- SQLite cannot alter a CHECK constraint; widening one rewrites the stored
-- schema text (every existing row satisfies the wider check), as
-- 0025_continue_as_new did for the runs table.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
SET sql = replace(sql,
    'CHECK (status IN (''scheduled'', ''completed'', ''failed''))',
    'CHECK (status IN (''scheduled'', ''completed'', ''failed'', ''cancelled''))')
WHERE type = 'table' AND name = 'activities';
PRAGMA writable_schema = OFF;

-- Before this migration a cancelled member closed as failed with reason
-- selection_operation_cancelled in its result; those rows keep their
-- status (the series already counted them).
ALTER TABLE activity_execution_series ADD COLUMN cancelled INTEGER NOT NULL DEFAULT 0;

DROP TRIGGER activity_execution_series_close;
CREATE TRIGGER activity_execution_series_close AFTER UPDATE OF status ON activities
WHEN OLD.status = 'scheduled' AND NEW.status != 'scheduled'
BEGIN
    UPDATE activity_execution_series SET
        completed = completed + (NEW.status = 'completed'),
        failed = failed + (NEW.status = 'failed'),
        cancelled = cancelled + (NEW.status = 'cancelled'),
        latency_count = latency_count + 1,
        latency_sum_ms = latency_sum_ms + MAX((c.now_ms - c.scheduled_at_ms), 0),
        le_0_1 = le_0_1 + COALESCE((c.now_ms - c.scheduled_at_ms) <= 100, 0),
        le_0_5 = le_0_5 + COALESCE((c.now_ms - c.scheduled_at_ms) <= 500, 0),
        le_1 = le_1 + COALESCE((c.now_ms - c.scheduled_at_ms) <= 1000, 0),
        le_2_5 = le_2_5 + COALESCE((c.now_ms - c.scheduled_at_ms) <= 2500, 0),
        le_5 = le_5 + COALESCE((c.now_ms - c.scheduled_at_ms) <= 5000, 0),
        le_10 = le_10 + COALESCE((c.now_ms - c.scheduled_at_ms) <= 10000, 0),
        le_30 = le_30 + COALESCE((c.now_ms - c.scheduled_at_ms) <= 30000, 0),
        le_60 = le_60 + COALESCE((c.now_ms - c.scheduled_at_ms) <= 60000, 0),
        le_300 = le_300 + COALESCE((c.now_ms - c.scheduled_at_ms) <= 300000, 0),
        le_900 = le_900 + COALESCE((c.now_ms - c.scheduled_at_ms) <= 900000, 0)
    FROM (SELECT d.namespace, d.task_queue, r.workflow_type, d.created_at_ms AS scheduled_at_ms,
            CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) AS now_ms
          FROM dispatch_tasks d JOIN runs r ON r.id = d.run_id
          WHERE d.kind = 'activity' AND d.item_id = NEW.id) AS c
    WHERE activity_execution_series.namespace = c.namespace
        AND activity_execution_series.task_queue = c.task_queue
        AND activity_execution_series.workflow_type = c.workflow_type
        AND activity_execution_series.activity_type = NEW.activity_type;
END;
