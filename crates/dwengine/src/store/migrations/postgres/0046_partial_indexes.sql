-- PostgreSQL twin of ../0046_partial_indexes.sql: `runs_closed` holds the
-- closed runs whose details are not yet pruned (the retention prune's
-- walk, oldest closing time first) and `dispatch_due_timers_by_cohort`
-- the timer tasks only, so a start writes neither index.
DROP INDEX runs_closed;
CREATE INDEX runs_closed ON runs (namespace, closed_at_ms)
    WHERE status <> 'running' AND details_pruned_at IS NULL;
DROP INDEX dispatch_due_timers_by_cohort;
CREATE INDEX dispatch_due_timers_by_cohort
    ON dispatch_tasks (kind, namespace, task_queue, build_id, status, due_at_ms)
    WHERE kind = 'timer';
