-- A queue's minute bucket moved apart from its counts. Both queue triggers
-- assigned `recent_minute` every time they fired (the value mostly equal),
-- and SQLite rewrites every index holding an assigned column, so each task
-- insert and each task status move deleted and reinserted the queue's
-- `task_queue_state_recent` entry: two B-tree writes and a page in every
-- transaction of a workflow (docs/performance.md, "The writer's SQL per
-- workflow"). The bucket now moves in a statement of its own that changes
-- a row only when the minute turned (`recent_minute != now`): it shifts
-- the current bucket's counts into the previous bucket's (or zeroes both
-- when more than a minute passed) and zeroes the current ones. The counts
-- statement after it never assigns `recent_minute`. Within one firing
-- SQLite reads the clock once, so both statements see the same minute,
-- and the rows end as before (`schema.rs` holds the two to each other).

DROP TRIGGER task_queue_state_add;
CREATE TRIGGER task_queue_state_add AFTER INSERT ON dispatch_tasks
WHEN NEW.kind IN ('workflow', 'activity')
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

-- A status move changes the minute bucket only when it leases (a
-- dispatch); the counts statement is a plain UPDATE of the queue's row
-- (0047 had made it an upsert to read the minute once).
DROP TRIGGER task_queue_state_move;
CREATE TRIGGER task_queue_state_move AFTER UPDATE OF status ON dispatch_tasks
WHEN NEW.kind IN ('workflow', 'activity') AND OLD.status != NEW.status
BEGIN
    UPDATE task_queue_state SET
        added_before = CASE recent_minute - CAST(strftime('%s', 'now') AS INTEGER) / 60
            WHEN -1 THEN added_recent ELSE 0 END,
        dispatched_before = CASE recent_minute - CAST(strftime('%s', 'now') AS INTEGER) / 60
            WHEN -1 THEN dispatched_recent ELSE 0 END,
        added_recent = 0,
        dispatched_recent = 0,
        recent_minute = CAST(strftime('%s', 'now') AS INTEGER) / 60
    WHERE NEW.status = 'leased' AND namespace = NEW.namespace AND task_queue = NEW.task_queue
        AND recent_minute != CAST(strftime('%s', 'now') AS INTEGER) / 60;
    UPDATE task_queue_state SET
        workflow_ready = workflow_ready + (NEW.kind = 'workflow')
            * ((NEW.status = 'ready') - (OLD.status = 'ready')),
        workflow_leased = workflow_leased + (NEW.kind = 'workflow')
            * ((NEW.status = 'leased') - (OLD.status = 'leased')),
        activity_ready = activity_ready + (NEW.kind = 'activity')
            * ((NEW.status = 'ready') - (OLD.status = 'ready')),
        activity_leased = activity_leased + (NEW.kind = 'activity')
            * ((NEW.status = 'leased') - (OLD.status = 'leased')),
        dispatched_recent = dispatched_recent + (NEW.status = 'leased')
    WHERE namespace = NEW.namespace AND task_queue = NEW.task_queue;
END;
