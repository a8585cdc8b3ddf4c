-- Build-id compatibility cohorts: a run belongs to the cohort of the worker
-- build that first leased one of its workflow tasks (NULL: unversioned
-- workers), and each timer row carries its run's cohort, so the due-timer
-- recovery of a poll pass walks only the polled namespace, task queue and
-- cohort through one index, however many timers other cohorts have due.
ALTER TABLE runs ADD COLUMN build_id TEXT;
ALTER TABLE dispatch_tasks ADD COLUMN build_id TEXT;
CREATE INDEX dispatch_due_timers_by_cohort
    ON dispatch_tasks (kind, namespace, task_queue, build_id, status, due_at_ms);
CREATE TRIGGER dispatch_timer_cohort AFTER INSERT ON dispatch_tasks
WHEN NEW.kind = 'timer'
BEGIN
    UPDATE dispatch_tasks SET build_id = (SELECT build_id FROM runs WHERE id = NEW.run_id)
    WHERE id = NEW.id;
END;
