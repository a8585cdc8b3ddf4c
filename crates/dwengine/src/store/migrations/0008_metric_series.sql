-- Per-series aggregates behind GET /api/system/prometheus-metrics, kept by
-- triggers in the same transaction as the rows they count, so a scrape reads
-- at most limit + 1 aggregate rows per surface however many runs, activities
-- or tasks a namespace holds. Latency buckets are cumulative (each column
-- counts observations at or below its bound, in seconds: le_2_5 is 2.5 s),
-- as a Prometheus histogram reports them.

-- dw_workflow_runs_total and dw_workflow_run_latency_seconds, per
-- (namespace, task_queue, workflow_type). Running runs are started minus the
-- four terminal counts: a run closes once and never reopens.
CREATE TABLE workflow_run_series (
    namespace TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    workflow_type TEXT NOT NULL,
    started INTEGER NOT NULL DEFAULT 0,
    completed INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    cancelled INTEGER NOT NULL DEFAULT 0,
    terminated INTEGER NOT NULL DEFAULT 0,
    latency_count INTEGER NOT NULL DEFAULT 0,
    latency_sum_ms INTEGER NOT NULL DEFAULT 0,
    le_0_1 INTEGER NOT NULL DEFAULT 0,
    le_0_5 INTEGER NOT NULL DEFAULT 0,
    le_1 INTEGER NOT NULL DEFAULT 0,
    le_2_5 INTEGER NOT NULL DEFAULT 0,
    le_5 INTEGER NOT NULL DEFAULT 0,
    le_10 INTEGER NOT NULL DEFAULT 0,
    le_30 INTEGER NOT NULL DEFAULT 0,
    le_60 INTEGER NOT NULL DEFAULT 0,
    le_300 INTEGER NOT NULL DEFAULT 0,
    le_900 INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, task_queue, workflow_type)
) WITHOUT ROWID;

INSERT INTO workflow_run_series
SELECT namespace, task_queue, workflow_type, COUNT(*),
    SUM(status = 'completed'), SUM(status = 'failed'), SUM(status = 'cancelled'),
    SUM(status = 'terminated'),
    SUM(status != 'running' AND closed_at_ms IS NOT NULL),
    COALESCE(SUM(CASE WHEN status != 'running' THEN MAX(closed_at_ms - created_at_ms, 0) END), 0),
    SUM(COALESCE(status != 'running' AND closed_at_ms IS NOT NULL AND (closed_at_ms - created_at_ms) <= 100, 0)),
    SUM(COALESCE(status != 'running' AND closed_at_ms IS NOT NULL AND (closed_at_ms - created_at_ms) <= 500, 0)),
    SUM(COALESCE(status != 'running' AND closed_at_ms IS NOT NULL AND (closed_at_ms - created_at_ms) <= 1000, 0)),
    SUM(COALESCE(status != 'running' AND closed_at_ms IS NOT NULL AND (closed_at_ms - created_at_ms) <= 2500, 0)),
    SUM(COALESCE(status != 'running' AND closed_at_ms IS NOT NULL AND (closed_at_ms - created_at_ms) <= 5000, 0)),
    SUM(COALESCE(status != 'running' AND closed_at_ms IS NOT NULL AND (closed_at_ms - created_at_ms) <= 10000, 0)),
    SUM(COALESCE(status != 'running' AND closed_at_ms IS NOT NULL AND (closed_at_ms - created_at_ms) <= 30000, 0)),
    SUM(COALESCE(status != 'running' AND closed_at_ms IS NOT NULL AND (closed_at_ms - created_at_ms) <= 60000, 0)),
    SUM(COALESCE(status != 'running' AND closed_at_ms IS NOT NULL AND (closed_at_ms - created_at_ms) <= 300000, 0)),
    SUM(COALESCE(status != 'running' AND closed_at_ms IS NOT NULL AND (closed_at_ms - created_at_ms) <= 900000, 0))
FROM runs GROUP BY namespace, task_queue, workflow_type;

CREATE TRIGGER workflow_run_series_start AFTER INSERT ON runs
BEGIN
    INSERT OR IGNORE INTO workflow_run_series (namespace, task_queue, workflow_type)
        VALUES (NEW.namespace, NEW.task_queue, NEW.workflow_type);
    UPDATE workflow_run_series SET
        started = started + 1,
        completed = completed + (NEW.status = 'completed'),
        failed = failed + (NEW.status = 'failed'),
        cancelled = cancelled + (NEW.status = 'cancelled'),
        terminated = terminated + (NEW.status = 'terminated')
    WHERE namespace = NEW.namespace AND task_queue = NEW.task_queue
        AND workflow_type = NEW.workflow_type;
END;

CREATE TRIGGER workflow_run_series_close AFTER UPDATE OF status ON runs
WHEN OLD.status = 'running' AND NEW.status != 'running'
BEGIN
    UPDATE workflow_run_series SET
        completed = completed + (NEW.status = 'completed'),
        failed = failed + (NEW.status = 'failed'),
        cancelled = cancelled + (NEW.status = 'cancelled'),
        terminated = terminated + (NEW.status = 'terminated'),
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

-- dw_activity_executions_total and dw_activity_execution_latency_seconds, per
-- (namespace, task_queue, workflow_type, activity_type). An execution starts
-- when its activity task is queued (the task's queue is the label, which may
-- differ from the run's) and closes when the activity completes or fails;
-- latency runs from scheduling to that close, across retries. Activities run
-- in-process by the store's own executor have no task and are not executions.
CREATE TABLE activity_execution_series (
    namespace TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    workflow_type TEXT NOT NULL,
    activity_type TEXT NOT NULL,
    started INTEGER NOT NULL DEFAULT 0,
    completed INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    latency_count INTEGER NOT NULL DEFAULT 0,
    latency_sum_ms INTEGER NOT NULL DEFAULT 0,
    le_0_1 INTEGER NOT NULL DEFAULT 0,
    le_0_5 INTEGER NOT NULL DEFAULT 0,
    le_1 INTEGER NOT NULL DEFAULT 0,
    le_2_5 INTEGER NOT NULL DEFAULT 0,
    le_5 INTEGER NOT NULL DEFAULT 0,
    le_10 INTEGER NOT NULL DEFAULT 0,
    le_30 INTEGER NOT NULL DEFAULT 0,
    le_60 INTEGER NOT NULL DEFAULT 0,
    le_300 INTEGER NOT NULL DEFAULT 0,
    le_900 INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, task_queue, workflow_type, activity_type)
) WITHOUT ROWID;

INSERT INTO activity_execution_series
    (namespace, task_queue, workflow_type, activity_type, started, completed, failed)
SELECT d.namespace, d.task_queue, r.workflow_type, a.activity_type, COUNT(*),
    SUM(a.status = 'completed'), SUM(a.status = 'failed')
FROM dispatch_tasks d JOIN activities a ON a.id = d.item_id JOIN runs r ON r.id = d.run_id
WHERE d.kind = 'activity'
GROUP BY d.namespace, d.task_queue, r.workflow_type, a.activity_type;

CREATE TRIGGER activity_execution_series_start AFTER INSERT ON dispatch_tasks
WHEN NEW.kind = 'activity' AND NEW.item_id IS NOT NULL
BEGIN
    INSERT OR IGNORE INTO activity_execution_series
        (namespace, task_queue, workflow_type, activity_type)
    SELECT NEW.namespace, NEW.task_queue, r.workflow_type, a.activity_type
        FROM runs r, activities a WHERE r.id = NEW.run_id AND a.id = NEW.item_id;
    UPDATE activity_execution_series SET started = started + 1
    WHERE (namespace, task_queue, workflow_type, activity_type) =
        (SELECT NEW.namespace, NEW.task_queue, r.workflow_type, a.activity_type
            FROM runs r, activities a WHERE r.id = NEW.run_id AND a.id = NEW.item_id);
END;

CREATE TRIGGER activity_execution_series_close AFTER UPDATE OF status ON activities
WHEN OLD.status = 'scheduled' AND NEW.status != 'scheduled'
BEGIN
    UPDATE activity_execution_series SET
        completed = completed + (NEW.status = 'completed'),
        failed = failed + (NEW.status = 'failed'),
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

-- dw_task_queue_runtime_state, per (namespace, task_queue): the ready and
-- leased workflow and activity tasks (gauges moved by every status change of
-- a task row), and the tasks added and dispatched in the current and the
-- previous minute bucket (recent_minute is the latest bucket with any).
-- A scrape discovers the queues with active tasks through a partial index,
-- and the queues active in the last minute buckets through an index on
-- recent_minute, so it never walks idle queues.
CREATE TABLE task_queue_state (
    namespace TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    workflow_ready INTEGER NOT NULL DEFAULT 0,
    workflow_leased INTEGER NOT NULL DEFAULT 0,
    activity_ready INTEGER NOT NULL DEFAULT 0,
    activity_leased INTEGER NOT NULL DEFAULT 0,
    recent_minute INTEGER NOT NULL DEFAULT 0,
    added_recent INTEGER NOT NULL DEFAULT 0,
    added_before INTEGER NOT NULL DEFAULT 0,
    dispatched_recent INTEGER NOT NULL DEFAULT 0,
    dispatched_before INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, task_queue)
) WITHOUT ROWID;
CREATE INDEX task_queue_state_active ON task_queue_state (namespace, task_queue)
    WHERE workflow_ready + workflow_leased + activity_ready + activity_leased > 0;
CREATE INDEX task_queue_state_recent ON task_queue_state (namespace, recent_minute, task_queue);

INSERT INTO task_queue_state (namespace, task_queue, workflow_ready, workflow_leased,
    activity_ready, activity_leased)
SELECT namespace, task_queue,
    SUM(kind = 'workflow' AND status = 'ready'), SUM(kind = 'workflow' AND status = 'leased'),
    SUM(kind = 'activity' AND status = 'ready'), SUM(kind = 'activity' AND status = 'leased')
FROM dispatch_tasks WHERE kind IN ('workflow', 'activity')
GROUP BY namespace, task_queue;

CREATE TRIGGER task_queue_state_add AFTER INSERT ON dispatch_tasks
WHEN NEW.kind IN ('workflow', 'activity')
BEGIN
    INSERT OR IGNORE INTO task_queue_state (namespace, task_queue)
        VALUES (NEW.namespace, NEW.task_queue);
    UPDATE task_queue_state SET
        workflow_ready = workflow_ready + (NEW.kind = 'workflow' AND NEW.status = 'ready'),
        workflow_leased = workflow_leased + (NEW.kind = 'workflow' AND NEW.status = 'leased'),
        activity_ready = activity_ready + (NEW.kind = 'activity' AND NEW.status = 'ready'),
        activity_leased = activity_leased + (NEW.kind = 'activity' AND NEW.status = 'leased'),
        added_before = CASE recent_minute - m.now WHEN 0 THEN added_before WHEN -1 THEN added_recent ELSE 0 END,
        dispatched_before = CASE recent_minute - m.now WHEN 0 THEN dispatched_before WHEN -1 THEN dispatched_recent ELSE 0 END,
        added_recent = CASE WHEN recent_minute = m.now THEN added_recent ELSE 0 END + 1,
        dispatched_recent = CASE WHEN recent_minute = m.now THEN dispatched_recent ELSE 0 END,
        recent_minute = m.now
    FROM (SELECT CAST(strftime('%s', 'now') AS INTEGER) / 60 AS now) AS m
    WHERE namespace = NEW.namespace AND task_queue = NEW.task_queue;
END;

CREATE TRIGGER task_queue_state_move AFTER UPDATE OF status ON dispatch_tasks
WHEN NEW.kind IN ('workflow', 'activity') AND OLD.status != NEW.status
BEGIN
    UPDATE task_queue_state SET
        workflow_ready = workflow_ready + (NEW.kind = 'workflow')
            * ((NEW.status = 'ready') - (OLD.status = 'ready')),
        workflow_leased = workflow_leased + (NEW.kind = 'workflow')
            * ((NEW.status = 'leased') - (OLD.status = 'leased')),
        activity_ready = activity_ready + (NEW.kind = 'activity')
            * ((NEW.status = 'ready') - (OLD.status = 'ready')),
        activity_leased = activity_leased + (NEW.kind = 'activity')
            * ((NEW.status = 'leased') - (OLD.status = 'leased')),
        added_before = CASE WHEN NEW.status != 'leased' THEN added_before
            ELSE CASE recent_minute - m.now WHEN 0 THEN added_before WHEN -1 THEN added_recent ELSE 0 END END,
        dispatched_before = CASE WHEN NEW.status != 'leased' THEN dispatched_before
            ELSE CASE recent_minute - m.now WHEN 0 THEN dispatched_before WHEN -1 THEN dispatched_recent ELSE 0 END END,
        added_recent = CASE WHEN NEW.status != 'leased' OR recent_minute = m.now THEN added_recent ELSE 0 END,
        dispatched_recent = CASE WHEN NEW.status != 'leased' THEN dispatched_recent
            WHEN recent_minute = m.now THEN dispatched_recent + 1 ELSE 1 END,
        recent_minute = CASE WHEN NEW.status = 'leased' THEN m.now ELSE recent_minute END
    FROM (SELECT CAST(strftime('%s', 'now') AS INTEGER) / 60 AS now) AS m
    WHERE namespace = NEW.namespace AND task_queue = NEW.task_queue;
END;

CREATE TRIGGER task_queue_state_remove AFTER DELETE ON dispatch_tasks
WHEN OLD.kind IN ('workflow', 'activity') AND OLD.status IN ('ready', 'leased')
BEGIN
    UPDATE task_queue_state SET
        workflow_ready = workflow_ready - (OLD.kind = 'workflow' AND OLD.status = 'ready'),
        workflow_leased = workflow_leased - (OLD.kind = 'workflow' AND OLD.status = 'leased'),
        activity_ready = activity_ready - (OLD.kind = 'activity' AND OLD.status = 'ready'),
        activity_leased = activity_leased - (OLD.kind = 'activity' AND OLD.status = 'leased')
    WHERE namespace = OLD.namespace AND task_queue = OLD.task_queue;
END;
