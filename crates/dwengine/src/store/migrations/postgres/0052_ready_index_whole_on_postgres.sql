-- 0051 made `dispatch_ready` partial (open tasks only). On PostgreSQL that
-- cost more than it saved: a read of one run's open workflow task
-- (`run_id = (SELECT id FROM runs WHERE namespace = ? AND workflow_id = ?
-- ...) AND kind = 'workflow' AND status = 'ready'`, every describe) cannot
-- know the run id when it is planned, and the planner then estimates the
-- smaller partial index, keyed by kind and status, as cheap as
-- `dispatch_by_run`: it walked every ready workflow task of every
-- namespace and filtered them by run (5,180 rows for one answer after a
-- few seconds of starts; 17 ms a describe, and three nodes' SDK runs fell
-- from 34-39 to 3-5 completed workflows a second). The whole index is
-- estimated dearer than `dispatch_by_run`, as before 0051.
DROP INDEX dispatch_ready;
CREATE INDEX dispatch_ready ON dispatch_tasks (kind, namespace, task_queue, status, due_at_ms);
