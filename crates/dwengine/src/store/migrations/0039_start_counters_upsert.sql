-- A start's two counter triggers as one upsert each. Every run insert
-- bumped its series row with an INSERT OR IGNORE and then an UPDATE, and
-- every workflow or activity task insert its queue's row the same way,
-- the UPDATE joined to a one-row subquery for the current minute, which
-- SQLite evaluates through two temporary tables. As upserts, each trigger
-- is one statement and no temporary table: about a tenth of the store
-- writer's time per start (docs/performance.md, "Starts against raw
-- SQLite"). The rows they leave are the same: a new row starts from the
-- values the old UPDATE gave a row of zeros, an existing row moves as it
-- did.
DROP TRIGGER workflow_run_series_start;
CREATE TRIGGER workflow_run_series_start AFTER INSERT ON runs
BEGIN
    INSERT INTO workflow_run_series (namespace, task_queue, workflow_type, started,
        completed, failed, cancelled, terminated)
    VALUES (NEW.namespace, NEW.task_queue, NEW.workflow_type, 1,
        NEW.status = 'completed', NEW.status = 'failed', NEW.status = 'cancelled',
        NEW.status = 'terminated')
    ON CONFLICT (namespace, task_queue, workflow_type) DO UPDATE SET
        started = started + 1,
        completed = completed + excluded.completed,
        failed = failed + excluded.failed,
        cancelled = cancelled + excluded.cancelled,
        terminated = terminated + excluded.terminated;
END;

DROP TRIGGER task_queue_state_add;
CREATE TRIGGER task_queue_state_add AFTER INSERT ON dispatch_tasks
WHEN NEW.kind IN ('workflow', 'activity')
BEGIN
    INSERT INTO task_queue_state (namespace, task_queue, workflow_ready, workflow_leased,
        activity_ready, activity_leased, recent_minute, added_recent, added_before,
        dispatched_recent, dispatched_before)
    VALUES (NEW.namespace, NEW.task_queue,
        NEW.kind = 'workflow' AND NEW.status = 'ready',
        NEW.kind = 'workflow' AND NEW.status = 'leased',
        NEW.kind = 'activity' AND NEW.status = 'ready',
        NEW.kind = 'activity' AND NEW.status = 'leased',
        CAST(strftime('%s', 'now') AS INTEGER) / 60, 1, 0, 0, 0)
    ON CONFLICT (namespace, task_queue) DO UPDATE SET
        workflow_ready = workflow_ready + excluded.workflow_ready,
        workflow_leased = workflow_leased + excluded.workflow_leased,
        activity_ready = activity_ready + excluded.activity_ready,
        activity_leased = activity_leased + excluded.activity_leased,
        added_before = CASE recent_minute - excluded.recent_minute
            WHEN 0 THEN added_before WHEN -1 THEN added_recent ELSE 0 END,
        dispatched_before = CASE recent_minute - excluded.recent_minute
            WHEN 0 THEN dispatched_before WHEN -1 THEN dispatched_recent ELSE 0 END,
        added_recent = CASE WHEN recent_minute = excluded.recent_minute
            THEN added_recent ELSE 0 END + 1,
        dispatched_recent = CASE WHEN recent_minute = excluded.recent_minute
            THEN dispatched_recent ELSE 0 END,
        recent_minute = excluded.recent_minute;
END;
