-- Two indexes every workflow start wrote an entry to that no reader of a
-- started run needs; each becomes a partial index holding only the rows
-- its readers look up, so a start writes two B-tree pages fewer (each also
-- copied into the statement journal of the insert that writes it).
--
-- `runs_closed` held every run, though its one reader, the retention
-- prune (`Store::prune_one_expired_run`), looks for closed runs whose
-- details are not yet pruned, oldest first. It now holds exactly those,
-- by namespace and closing time: a run enters it when it closes and
-- leaves it when its details are pruned, and the prune reads the oldest
-- one as a range read in order (it read the whole namespace through
-- `runs_by_namespace` and sorted it before).
DROP INDEX runs_closed;
CREATE INDEX runs_closed ON runs (namespace, closed_at_ms)
    WHERE status != 'running' AND details_pruned_at IS NULL;
-- `dispatch_due_timers_by_cohort` held every dispatch task, though only
-- timer tasks are looked up through it (`Store::has_due_timers`,
-- `Store::fire_due_timers`, whose queries name `kind = 'timer'`).
DROP INDEX dispatch_due_timers_by_cohort;
CREATE INDEX dispatch_due_timers_by_cohort
    ON dispatch_tasks (kind, namespace, task_queue, build_id, status, due_at_ms)
    WHERE kind = 'timer';
