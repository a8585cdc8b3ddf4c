-- A SQLite writer's staged starts (store/start_stage.rs) are written as
-- one multi-row INSERT per table; their triggers still fired once a row.
-- Four of them copy or count what a batch of starts can write or count in
-- one statement: a run's summary and its first timeline entry (copies of
-- the rows just written) and its series' and queue's counters (+1 a row,
-- the same row each time). While `staged_start_flush` holds a row (only
-- inside a flush's own transaction, removed before it commits) those four
-- triggers skip, and the flush writes the summaries and timeline entries
-- from the rows it wrote and adds each series' and queue's count once
-- (`Store::flush_staged_starts`). Every other writer, and any tool
-- writing the file, finds the table empty and is counted as before; the
-- engine test `staged_starts::` compares the rows with starts written one
-- at a time.
CREATE TABLE staged_start_flush (flushing INTEGER PRIMARY KEY);

DROP TRIGGER run_summaries_insert;
CREATE TRIGGER run_summaries_insert AFTER INSERT ON runs
WHEN NEW.details_pruned_at IS NULL AND NOT EXISTS (SELECT 1 FROM staged_start_flush)
BEGIN
    INSERT OR REPLACE INTO run_summaries VALUES (NEW.id, NEW.namespace, NEW.workflow_id,
        NEW.workflow_type, NEW.task_queue, NEW.status, NEW.history_length,
        NEW.created_at_ms, NEW.closed_at_ms);
END;

DROP TRIGGER workflow_run_series_start;
CREATE TRIGGER workflow_run_series_start AFTER INSERT ON runs
WHEN NOT EXISTS (SELECT 1 FROM staged_start_flush)
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

DROP TRIGGER run_timeline_insert;
CREATE TRIGGER run_timeline_insert AFTER INSERT ON history_events
WHEN NOT EXISTS (SELECT 1 FROM staged_start_flush)
    AND (SELECT details_pruned_at FROM runs WHERE id = NEW.run_id) IS NULL
BEGIN
    INSERT OR REPLACE INTO run_timeline_entries
        VALUES (NEW.run_id, NEW.sequence, NEW.event_type, NEW.recorded_at_ms);
END;

DROP TRIGGER task_queue_state_add;
CREATE TRIGGER task_queue_state_add AFTER INSERT ON dispatch_tasks
WHEN NEW.kind IN ('workflow', 'activity') AND NOT EXISTS (SELECT 1 FROM staged_start_flush)
BEGIN
    UPDATE task_queue_state SET
        added_before = CASE recent_minute - CAST(strftime('%s', 'now') AS INTEGER) / 60
            WHEN -1 THEN added_recent ELSE 0 END,
        dispatched_before = CASE recent_minute - CAST(strftime('%s', 'now') AS INTEGER) / 60
            WHEN -1 THEN dispatched_recent ELSE 0 END,
        added_recent = 0,
        dispatched_recent = 0,
        recent_minute = CAST(strftime('%s', 'now') AS INTEGER) / 60
    WHERE namespace = NEW.namespace AND task_queue = NEW.task_queue
        AND recent_minute != CAST(strftime('%s', 'now') AS INTEGER) / 60;
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
        added_recent = added_recent + 1;
END;
