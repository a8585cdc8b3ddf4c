-- PostgreSQL twin of ../0008_metric_series.sql: per-series aggregates
-- behind GET /api/system/prometheus-metrics, kept by triggers in the same
-- transaction as the rows they count. A SQLite boolean is an integer; here
-- a comparison is cast with ::int where SQLite adds it. SQLite's clock
-- ('now' through julianday and strftime) is unix_now_ms() (0000), whole
-- milliseconds fixed for the statement; the minute bucket is it / 60000.

-- dw_workflow_runs_total and dw_workflow_run_latency_seconds, per
-- (namespace, task_queue, workflow_type).
CREATE TABLE workflow_run_series (
    namespace TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    workflow_type TEXT NOT NULL,
    started BIGINT NOT NULL DEFAULT 0,
    completed BIGINT NOT NULL DEFAULT 0,
    failed BIGINT NOT NULL DEFAULT 0,
    cancelled BIGINT NOT NULL DEFAULT 0,
    terminated BIGINT NOT NULL DEFAULT 0,
    latency_count BIGINT NOT NULL DEFAULT 0,
    latency_sum_ms BIGINT NOT NULL DEFAULT 0,
    le_0_1 BIGINT NOT NULL DEFAULT 0,
    le_0_5 BIGINT NOT NULL DEFAULT 0,
    le_1 BIGINT NOT NULL DEFAULT 0,
    le_2_5 BIGINT NOT NULL DEFAULT 0,
    le_5 BIGINT NOT NULL DEFAULT 0,
    le_10 BIGINT NOT NULL DEFAULT 0,
    le_30 BIGINT NOT NULL DEFAULT 0,
    le_60 BIGINT NOT NULL DEFAULT 0,
    le_300 BIGINT NOT NULL DEFAULT 0,
    le_900 BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, task_queue, workflow_type)
);

INSERT INTO workflow_run_series
SELECT namespace, task_queue, workflow_type, COUNT(*),
    SUM((status = 'completed')::int), SUM((status = 'failed')::int), SUM((status = 'cancelled')::int),
    SUM((status = 'terminated')::int),
    SUM((status <> 'running' AND closed_at_ms IS NOT NULL)::int),
    COALESCE(SUM(CASE WHEN status <> 'running' THEN GREATEST(closed_at_ms - created_at_ms, 0) END), 0),
    SUM(COALESCE((status <> 'running' AND closed_at_ms IS NOT NULL AND (closed_at_ms - created_at_ms) <= 100)::int, 0)),
    SUM(COALESCE((status <> 'running' AND closed_at_ms IS NOT NULL AND (closed_at_ms - created_at_ms) <= 500)::int, 0)),
    SUM(COALESCE((status <> 'running' AND closed_at_ms IS NOT NULL AND (closed_at_ms - created_at_ms) <= 1000)::int, 0)),
    SUM(COALESCE((status <> 'running' AND closed_at_ms IS NOT NULL AND (closed_at_ms - created_at_ms) <= 2500)::int, 0)),
    SUM(COALESCE((status <> 'running' AND closed_at_ms IS NOT NULL AND (closed_at_ms - created_at_ms) <= 5000)::int, 0)),
    SUM(COALESCE((status <> 'running' AND closed_at_ms IS NOT NULL AND (closed_at_ms - created_at_ms) <= 10000)::int, 0)),
    SUM(COALESCE((status <> 'running' AND closed_at_ms IS NOT NULL AND (closed_at_ms - created_at_ms) <= 30000)::int, 0)),
    SUM(COALESCE((status <> 'running' AND closed_at_ms IS NOT NULL AND (closed_at_ms - created_at_ms) <= 60000)::int, 0)),
    SUM(COALESCE((status <> 'running' AND closed_at_ms IS NOT NULL AND (closed_at_ms - created_at_ms) <= 300000)::int, 0)),
    SUM(COALESCE((status <> 'running' AND closed_at_ms IS NOT NULL AND (closed_at_ms - created_at_ms) <= 900000)::int, 0))
FROM runs GROUP BY namespace, task_queue, workflow_type;

CREATE FUNCTION workflow_run_series_start() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO workflow_run_series (namespace, task_queue, workflow_type)
        VALUES (NEW.namespace, NEW.task_queue, NEW.workflow_type)
        ON CONFLICT DO NOTHING;
    UPDATE workflow_run_series SET
        started = started + 1,
        completed = completed + (NEW.status = 'completed')::int,
        failed = failed + (NEW.status = 'failed')::int,
        cancelled = cancelled + (NEW.status = 'cancelled')::int,
        terminated = terminated + (NEW.status = 'terminated')::int
    WHERE namespace = NEW.namespace AND task_queue = NEW.task_queue
        AND workflow_type = NEW.workflow_type;
    RETURN NULL;
END;
$$;
CREATE TRIGGER workflow_run_series_start AFTER INSERT ON runs
    FOR EACH ROW EXECUTE FUNCTION workflow_run_series_start();

CREATE FUNCTION workflow_run_series_close() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE workflow_run_series SET
        completed = completed + (NEW.status = 'completed')::int,
        failed = failed + (NEW.status = 'failed')::int,
        cancelled = cancelled + (NEW.status = 'cancelled')::int,
        terminated = terminated + (NEW.status = 'terminated')::int,
        latency_count = latency_count + (NEW.closed_at_ms IS NOT NULL)::int,
        -- SQLite: COALESCE(MAX(closed - created, 0), 0), 0 when closed_at_ms is NULL.
        latency_sum_ms = latency_sum_ms + GREATEST(COALESCE(NEW.closed_at_ms - NEW.created_at_ms, 0), 0),
        le_0_1 = le_0_1 + COALESCE(((NEW.closed_at_ms - NEW.created_at_ms) <= 100)::int, 0),
        le_0_5 = le_0_5 + COALESCE(((NEW.closed_at_ms - NEW.created_at_ms) <= 500)::int, 0),
        le_1 = le_1 + COALESCE(((NEW.closed_at_ms - NEW.created_at_ms) <= 1000)::int, 0),
        le_2_5 = le_2_5 + COALESCE(((NEW.closed_at_ms - NEW.created_at_ms) <= 2500)::int, 0),
        le_5 = le_5 + COALESCE(((NEW.closed_at_ms - NEW.created_at_ms) <= 5000)::int, 0),
        le_10 = le_10 + COALESCE(((NEW.closed_at_ms - NEW.created_at_ms) <= 10000)::int, 0),
        le_30 = le_30 + COALESCE(((NEW.closed_at_ms - NEW.created_at_ms) <= 30000)::int, 0),
        le_60 = le_60 + COALESCE(((NEW.closed_at_ms - NEW.created_at_ms) <= 60000)::int, 0),
        le_300 = le_300 + COALESCE(((NEW.closed_at_ms - NEW.created_at_ms) <= 300000)::int, 0),
        le_900 = le_900 + COALESCE(((NEW.closed_at_ms - NEW.created_at_ms) <= 900000)::int, 0)
    WHERE namespace = NEW.namespace AND task_queue = NEW.task_queue
        AND workflow_type = NEW.workflow_type;
    RETURN NULL;
END;
$$;
CREATE TRIGGER workflow_run_series_close AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (OLD.status = 'running' AND NEW.status <> 'running')
    EXECUTE FUNCTION workflow_run_series_close();

-- dw_activity_executions_total and dw_activity_execution_latency_seconds, per
-- (namespace, task_queue, workflow_type, activity_type).
CREATE TABLE activity_execution_series (
    namespace TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    workflow_type TEXT NOT NULL,
    activity_type TEXT NOT NULL,
    started BIGINT NOT NULL DEFAULT 0,
    completed BIGINT NOT NULL DEFAULT 0,
    failed BIGINT NOT NULL DEFAULT 0,
    latency_count BIGINT NOT NULL DEFAULT 0,
    latency_sum_ms BIGINT NOT NULL DEFAULT 0,
    le_0_1 BIGINT NOT NULL DEFAULT 0,
    le_0_5 BIGINT NOT NULL DEFAULT 0,
    le_1 BIGINT NOT NULL DEFAULT 0,
    le_2_5 BIGINT NOT NULL DEFAULT 0,
    le_5 BIGINT NOT NULL DEFAULT 0,
    le_10 BIGINT NOT NULL DEFAULT 0,
    le_30 BIGINT NOT NULL DEFAULT 0,
    le_60 BIGINT NOT NULL DEFAULT 0,
    le_300 BIGINT NOT NULL DEFAULT 0,
    le_900 BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, task_queue, workflow_type, activity_type)
);

INSERT INTO activity_execution_series
    (namespace, task_queue, workflow_type, activity_type, started, completed, failed)
SELECT d.namespace, d.task_queue, r.workflow_type, a.activity_type, COUNT(*),
    SUM((a.status = 'completed')::int), SUM((a.status = 'failed')::int)
FROM dispatch_tasks d JOIN activities a ON a.id = d.item_id JOIN runs r ON r.id = d.run_id
WHERE d.kind = 'activity'
GROUP BY d.namespace, d.task_queue, r.workflow_type, a.activity_type;

CREATE FUNCTION activity_execution_series_start() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO activity_execution_series
        (namespace, task_queue, workflow_type, activity_type)
    SELECT NEW.namespace, NEW.task_queue, r.workflow_type, a.activity_type
        FROM runs r, activities a WHERE r.id = NEW.run_id AND a.id = NEW.item_id
    ON CONFLICT DO NOTHING;
    UPDATE activity_execution_series SET started = started + 1
    WHERE (namespace, task_queue, workflow_type, activity_type) =
        (SELECT NEW.namespace, NEW.task_queue, r.workflow_type, a.activity_type
            FROM runs r, activities a WHERE r.id = NEW.run_id AND a.id = NEW.item_id);
    RETURN NULL;
END;
$$;
CREATE TRIGGER activity_execution_series_start AFTER INSERT ON dispatch_tasks
    FOR EACH ROW WHEN (NEW.kind = 'activity' AND NEW.item_id IS NOT NULL)
    EXECUTE FUNCTION activity_execution_series_start();

CREATE FUNCTION activity_execution_series_close() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE activity_execution_series SET
        completed = completed + (NEW.status = 'completed')::int,
        failed = failed + (NEW.status = 'failed')::int,
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
CREATE TRIGGER activity_execution_series_close AFTER UPDATE OF status ON activities
    FOR EACH ROW WHEN (OLD.status = 'scheduled' AND NEW.status <> 'scheduled')
    EXECUTE FUNCTION activity_execution_series_close();

-- dw_task_queue_runtime_state, per (namespace, task_queue): ready and leased
-- gauges, tasks added and dispatched in the current and previous minute.
CREATE TABLE task_queue_state (
    namespace TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    workflow_ready BIGINT NOT NULL DEFAULT 0,
    workflow_leased BIGINT NOT NULL DEFAULT 0,
    activity_ready BIGINT NOT NULL DEFAULT 0,
    activity_leased BIGINT NOT NULL DEFAULT 0,
    recent_minute BIGINT NOT NULL DEFAULT 0,
    added_recent BIGINT NOT NULL DEFAULT 0,
    added_before BIGINT NOT NULL DEFAULT 0,
    dispatched_recent BIGINT NOT NULL DEFAULT 0,
    dispatched_before BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, task_queue)
);
CREATE INDEX task_queue_state_active ON task_queue_state (namespace, task_queue)
    WHERE workflow_ready + workflow_leased + activity_ready + activity_leased > 0;
CREATE INDEX task_queue_state_recent ON task_queue_state (namespace, recent_minute, task_queue);

INSERT INTO task_queue_state (namespace, task_queue, workflow_ready, workflow_leased,
    activity_ready, activity_leased)
SELECT namespace, task_queue,
    SUM((kind = 'workflow' AND status = 'ready')::int), SUM((kind = 'workflow' AND status = 'leased')::int),
    SUM((kind = 'activity' AND status = 'ready')::int), SUM((kind = 'activity' AND status = 'leased')::int)
FROM dispatch_tasks WHERE kind IN ('workflow', 'activity')
GROUP BY namespace, task_queue;

CREATE FUNCTION task_queue_state_add() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    now_minute bigint := unix_now_ms() / 60000;
BEGIN
    INSERT INTO task_queue_state (namespace, task_queue)
        VALUES (NEW.namespace, NEW.task_queue)
        ON CONFLICT DO NOTHING;
    UPDATE task_queue_state SET
        workflow_ready = workflow_ready + (NEW.kind = 'workflow' AND NEW.status = 'ready')::int,
        workflow_leased = workflow_leased + (NEW.kind = 'workflow' AND NEW.status = 'leased')::int,
        activity_ready = activity_ready + (NEW.kind = 'activity' AND NEW.status = 'ready')::int,
        activity_leased = activity_leased + (NEW.kind = 'activity' AND NEW.status = 'leased')::int,
        added_before = CASE recent_minute - now_minute WHEN 0 THEN added_before WHEN -1 THEN added_recent ELSE 0 END,
        dispatched_before = CASE recent_minute - now_minute WHEN 0 THEN dispatched_before WHEN -1 THEN dispatched_recent ELSE 0 END,
        added_recent = CASE WHEN recent_minute = now_minute THEN added_recent ELSE 0 END + 1,
        dispatched_recent = CASE WHEN recent_minute = now_minute THEN dispatched_recent ELSE 0 END,
        recent_minute = now_minute
    WHERE namespace = NEW.namespace AND task_queue = NEW.task_queue;
    RETURN NULL;
END;
$$;
CREATE TRIGGER task_queue_state_add AFTER INSERT ON dispatch_tasks
    FOR EACH ROW WHEN (NEW.kind IN ('workflow', 'activity'))
    EXECUTE FUNCTION task_queue_state_add();

CREATE FUNCTION task_queue_state_move() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    now_minute bigint := unix_now_ms() / 60000;
BEGIN
    UPDATE task_queue_state SET
        workflow_ready = workflow_ready + (NEW.kind = 'workflow')::int
            * ((NEW.status = 'ready')::int - (OLD.status = 'ready')::int),
        workflow_leased = workflow_leased + (NEW.kind = 'workflow')::int
            * ((NEW.status = 'leased')::int - (OLD.status = 'leased')::int),
        activity_ready = activity_ready + (NEW.kind = 'activity')::int
            * ((NEW.status = 'ready')::int - (OLD.status = 'ready')::int),
        activity_leased = activity_leased + (NEW.kind = 'activity')::int
            * ((NEW.status = 'leased')::int - (OLD.status = 'leased')::int),
        added_before = CASE WHEN NEW.status <> 'leased' THEN added_before
            ELSE CASE recent_minute - now_minute WHEN 0 THEN added_before WHEN -1 THEN added_recent ELSE 0 END END,
        dispatched_before = CASE WHEN NEW.status <> 'leased' THEN dispatched_before
            ELSE CASE recent_minute - now_minute WHEN 0 THEN dispatched_before WHEN -1 THEN dispatched_recent ELSE 0 END END,
        added_recent = CASE WHEN NEW.status <> 'leased' OR recent_minute = now_minute THEN added_recent ELSE 0 END,
        dispatched_recent = CASE WHEN NEW.status <> 'leased' THEN dispatched_recent
            WHEN recent_minute = now_minute THEN dispatched_recent + 1 ELSE 1 END,
        recent_minute = CASE WHEN NEW.status = 'leased' THEN now_minute ELSE recent_minute END
    WHERE namespace = NEW.namespace AND task_queue = NEW.task_queue;
    RETURN NULL;
END;
$$;
CREATE TRIGGER task_queue_state_move AFTER UPDATE OF status ON dispatch_tasks
    FOR EACH ROW WHEN (NEW.kind IN ('workflow', 'activity') AND OLD.status <> NEW.status)
    EXECUTE FUNCTION task_queue_state_move();

CREATE FUNCTION task_queue_state_remove() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE task_queue_state SET
        workflow_ready = workflow_ready - (OLD.kind = 'workflow' AND OLD.status = 'ready')::int,
        workflow_leased = workflow_leased - (OLD.kind = 'workflow' AND OLD.status = 'leased')::int,
        activity_ready = activity_ready - (OLD.kind = 'activity' AND OLD.status = 'ready')::int,
        activity_leased = activity_leased - (OLD.kind = 'activity' AND OLD.status = 'leased')::int
    WHERE namespace = OLD.namespace AND task_queue = OLD.task_queue;
    RETURN NULL;
END;
$$;
CREATE TRIGGER task_queue_state_remove AFTER DELETE ON dispatch_tasks
    FOR EACH ROW WHEN (OLD.kind IN ('workflow', 'activity') AND OLD.status IN ('ready', 'leased'))
    EXECUTE FUNCTION task_queue_state_remove();
