-- PostgreSQL twin of ../0034_activity_cancelled.sql: an activity its
-- workflow cancelled closes as cancelled, and the activity series count it
-- apart from failures.
ALTER TABLE activities DROP CONSTRAINT activities_status_check,
    ADD CONSTRAINT activities_status_check
    CHECK (status IN ('scheduled', 'completed', 'failed', 'cancelled'));

ALTER TABLE activity_execution_series ADD COLUMN cancelled BIGINT NOT NULL DEFAULT 0;

CREATE OR REPLACE FUNCTION activity_execution_series_close() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE activity_execution_series SET
        completed = completed + (NEW.status = 'completed')::int,
        failed = failed + (NEW.status = 'failed')::int,
        cancelled = cancelled + (NEW.status = 'cancelled')::int,
        latency_count = latency_count + 1,
        latency_sum_ms = latency_sum_ms + GREATEST(c.now_ms - c.scheduled_at_ms, 0),
        le_0_1 = le_0_1 + COALESCE(((c.now_ms - c.scheduled_at_ms) <= 100)::int, 0),
        le_0_5 = le_0_5 + COALESCE(((c.now_ms - c.scheduled_at_ms) <= 500)::int, 0),
        le_1 = le_1 + COALESCE(((c.now_ms - c.scheduled_at_ms) <= 1000)::int, 0),
        le_2_5 = le_2_5 + COALESCE(((c.now_ms - c.scheduled_at_ms) <= 2500)::int, 0),
        le_5 = le_5 + COALESCE(((c.now_ms - c.scheduled_at_ms) <= 5000)::int, 0),
        le_10 = le_10 + COALESCE(((c.now_ms - c.scheduled_at_ms) <= 10000)::int, 0),
        le_30 = le_30 + COALESCE(((c.now_ms - c.scheduled_at_ms) <= 30000)::int, 0),
        le_60 = le_60 + COALESCE(((c.now_ms - c.scheduled_at_ms) <= 60000)::int, 0),
        le_300 = le_300 + COALESCE(((c.now_ms - c.scheduled_at_ms) <= 300000)::int, 0),
        le_900 = le_900 + COALESCE(((c.now_ms - c.scheduled_at_ms) <= 900000)::int, 0)
    FROM (SELECT d.namespace, d.task_queue, r.workflow_type, d.created_at_ms AS scheduled_at_ms,
            unix_now_ms() AS now_ms
          FROM dispatch_tasks d JOIN runs r ON r.id = d.run_id
          WHERE d.kind = 'activity' AND d.item_id = NEW.id) AS c
    WHERE activity_execution_series.namespace = c.namespace
        AND activity_execution_series.task_queue = c.task_queue
        AND activity_execution_series.workflow_type = c.workflow_type
        AND activity_execution_series.activity_type = NEW.activity_type;
    RETURN NULL;
END;
$$;
