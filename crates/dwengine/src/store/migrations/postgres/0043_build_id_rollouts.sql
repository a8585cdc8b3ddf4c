-- PostgreSQL twin of ../0043_build_id_rollouts.sql: what registrations say
-- about their builds, the operator's rollout intent per (namespace, task
-- queue, build id), and timers of runs pinned to the unversioned cohort.
ALTER TABLE workers ADD COLUMN build_id TEXT;
ALTER TABLE workers ADD COLUMN runtime TEXT;
ALTER TABLE workers ADD COLUMN sdk_version TEXT;
ALTER TABLE workers ADD COLUMN registered_at_ms BIGINT;
CREATE INDEX workers_by_queue ON workers (namespace, task_queue, build_id);
CREATE TABLE build_id_rollouts (
    namespace TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    build_id TEXT NOT NULL,
    drain_intent TEXT NOT NULL CHECK (drain_intent IN ('active', 'draining')),
    drained_at_ms BIGINT,
    promoted_at_ms BIGINT,
    rolled_back_at_ms BIGINT,
    new_start_selected BIGINT NOT NULL DEFAULT 0,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (namespace, task_queue, build_id)
);
CREATE OR REPLACE FUNCTION dispatch_timer_cohort() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE dispatch_tasks
    SET build_id = (SELECT NULLIF(build_id, '') FROM runs WHERE id = NEW.run_id)
    WHERE id = NEW.id;
    RETURN NULL;
END;
$$;
