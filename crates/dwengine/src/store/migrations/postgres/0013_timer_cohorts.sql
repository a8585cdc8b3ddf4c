-- PostgreSQL twin of ../0013_timer_cohorts.sql: build-id compatibility
-- cohorts; each timer row carries its run's cohort.
ALTER TABLE runs ADD COLUMN build_id TEXT;
ALTER TABLE dispatch_tasks ADD COLUMN build_id TEXT;
CREATE INDEX dispatch_due_timers_by_cohort
    ON dispatch_tasks (kind, namespace, task_queue, build_id, status, due_at_ms);

CREATE FUNCTION dispatch_timer_cohort() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE dispatch_tasks SET build_id = (SELECT build_id FROM runs WHERE id = NEW.run_id)
    WHERE id = NEW.id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER dispatch_timer_cohort AFTER INSERT ON dispatch_tasks
    FOR EACH ROW WHEN (NEW.kind = 'timer')
    EXECUTE FUNCTION dispatch_timer_cohort();
