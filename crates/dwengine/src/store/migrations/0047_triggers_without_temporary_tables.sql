-- The two counter triggers that built a temporary B-tree every time they
-- fired, rewritten without one. SQLite evaluates an `UPDATE ... FROM` by
-- first writing the joined rows into a temporary table, and materialises a
-- subquery in that FROM into another: each opens an ephemeral B-tree with
-- a pager of its own (about 4,600 instructions to open and close, beside
-- the row written into it), on the writer's hot path (docs/performance.md,
-- "The writer's SQL per workflow").
--
-- `task_queue_state_move` fired on every status change of a workflow or
-- activity task (each claim, each completion, each close of a run): its
-- UPDATE joined a one-row subquery for the current minute. It is now an
-- upsert on the queue's row, as 0039 made `task_queue_state_add`: the
-- minute is computed once in VALUES and read back as
-- `excluded.recent_minute`, the counter deltas likewise. The row always
-- exists when a task moves (`task_queue_state_add` makes it when the task
-- is inserted, 0008 made it for the tasks older than the table, and no
-- statement deletes one), so the conflict branch is the one taken and the
-- row moves exactly as the UPDATE moved it.
DROP TRIGGER task_queue_state_move;
CREATE TRIGGER task_queue_state_move AFTER UPDATE OF status ON dispatch_tasks
WHEN NEW.kind IN ('workflow', 'activity') AND OLD.status != NEW.status
BEGIN
    INSERT INTO task_queue_state (namespace, task_queue, workflow_ready, workflow_leased,
        activity_ready, activity_leased, recent_minute)
    VALUES (NEW.namespace, NEW.task_queue,
        (NEW.kind = 'workflow') * ((NEW.status = 'ready') - (OLD.status = 'ready')),
        (NEW.kind = 'workflow') * ((NEW.status = 'leased') - (OLD.status = 'leased')),
        (NEW.kind = 'activity') * ((NEW.status = 'ready') - (OLD.status = 'ready')),
        (NEW.kind = 'activity') * ((NEW.status = 'leased') - (OLD.status = 'leased')),
        CAST(strftime('%s', 'now') AS INTEGER) / 60)
    ON CONFLICT (namespace, task_queue) DO UPDATE SET
        workflow_ready = workflow_ready + excluded.workflow_ready,
        workflow_leased = workflow_leased + excluded.workflow_leased,
        activity_ready = activity_ready + excluded.activity_ready,
        activity_leased = activity_leased + excluded.activity_leased,
        added_before = CASE WHEN NEW.status != 'leased' THEN added_before
            ELSE CASE recent_minute - excluded.recent_minute
                WHEN 0 THEN added_before WHEN -1 THEN added_recent ELSE 0 END END,
        dispatched_before = CASE WHEN NEW.status != 'leased' THEN dispatched_before
            ELSE CASE recent_minute - excluded.recent_minute
                WHEN 0 THEN dispatched_before WHEN -1 THEN dispatched_recent ELSE 0 END END,
        added_recent = CASE WHEN NEW.status != 'leased'
            OR recent_minute = excluded.recent_minute THEN added_recent ELSE 0 END,
        dispatched_recent = CASE WHEN NEW.status != 'leased' THEN dispatched_recent
            WHEN recent_minute = excluded.recent_minute THEN dispatched_recent + 1 ELSE 1 END,
        recent_minute = CASE WHEN NEW.status = 'leased' THEN excluded.recent_minute
            ELSE recent_minute END;
END;

-- `activity_execution_series_close` fired once per activity closed: its
-- UPDATE joined a subquery (the activity's task and run, and the clock).
-- The series row is now found by a row-value comparison with a scalar
-- subquery (as `activity_execution_series_start` finds it), and the
-- latency columns are set together from one row subquery. Its inner query
-- takes MAX over the activity's one task row (`dispatch_items` is unique
-- on (kind, item_id)): an aggregate is not flattened into the outer
-- query, so the clock is read once rather than once per histogram bucket,
-- and SQLite runs it as a co-routine, not a temporary table. No task row
-- for the activity leaves the series as it was, as the join did.
DROP TRIGGER activity_execution_series_close;
CREATE TRIGGER activity_execution_series_close AFTER UPDATE OF status ON activities
WHEN OLD.status = 'scheduled' AND NEW.status != 'scheduled'
BEGIN
    UPDATE activity_execution_series SET
        completed = completed + (NEW.status = 'completed'),
        failed = failed + (NEW.status = 'failed'),
        cancelled = cancelled + (NEW.status = 'cancelled'),
        (latency_count, latency_sum_ms, le_0_1, le_0_5, le_1, le_2_5, le_5, le_10, le_30,
            le_60, le_300, le_900) = (SELECT latency_count + 1,
            latency_sum_ms + MAX(l.ms, 0),
            le_0_1 + COALESCE(l.ms <= 100, 0),
            le_0_5 + COALESCE(l.ms <= 500, 0),
            le_1 + COALESCE(l.ms <= 1000, 0),
            le_2_5 + COALESCE(l.ms <= 2500, 0),
            le_5 + COALESCE(l.ms <= 5000, 0),
            le_10 + COALESCE(l.ms <= 10000, 0),
            le_30 + COALESCE(l.ms <= 30000, 0),
            le_60 + COALESCE(l.ms <= 60000, 0),
            le_300 + COALESCE(l.ms <= 300000, 0),
            le_900 + COALESCE(l.ms <= 900000, 0)
          FROM (SELECT MAX(CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
                  - d.created_at_ms) AS ms
                FROM dispatch_tasks d WHERE d.kind = 'activity' AND d.item_id = NEW.id) AS l)
    WHERE (namespace, task_queue, workflow_type, activity_type) =
        (SELECT d.namespace, d.task_queue, r.workflow_type, NEW.activity_type
          FROM dispatch_tasks d JOIN runs r ON r.id = d.run_id
          WHERE d.kind = 'activity' AND d.item_id = NEW.id);
END;

-- `workflow_streams_count_delete` (a stream's retention delete, not a
-- workflow's path) deleted its emptied count rows with `resource IN (...)`,
-- which SQLite looks up through a temporary B-tree of the list's values:
-- two deletes by key instead, the same rows gone.
DROP TRIGGER workflow_streams_count_delete;
CREATE TRIGGER workflow_streams_count_delete AFTER DELETE ON workflow_streams BEGIN
    UPDATE namespace_durable_counts SET count = count - 1
        WHERE namespace = OLD.namespace AND resource = 'workflow_streams';
    UPDATE namespace_durable_counts SET count = count - OLD.total_items
        WHERE namespace = OLD.namespace AND resource = 'workflow_stream_items';
    DELETE FROM namespace_durable_counts
        WHERE namespace = OLD.namespace AND resource = 'workflow_streams' AND count = 0;
    DELETE FROM namespace_durable_counts
        WHERE namespace = OLD.namespace AND resource = 'workflow_stream_items' AND count = 0;
END;
