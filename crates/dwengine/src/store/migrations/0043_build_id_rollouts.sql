-- Build-id rollouts of a task queue (GET /api/task-queues/{name}/build-ids,
-- its drain, resume and promote).
--
-- What a registration says about its worker's build: the build id (NULL:
-- the unversioned cohort), runtime and SDK version it sent, and when the
-- worker first registered (kept across re-registrations).
ALTER TABLE workers ADD COLUMN build_id TEXT;
ALTER TABLE workers ADD COLUMN runtime TEXT;
ALTER TABLE workers ADD COLUMN sdk_version TEXT;
ALTER TABLE workers ADD COLUMN registered_at_ms INTEGER;
CREATE INDEX workers_by_queue ON workers (namespace, task_queue, build_id);
-- The operator's intent per (namespace, task queue, build id; '' is the
-- unversioned cohort): draining (its workers claim no new task), and the
-- one cohort per queue selected for fresh starts (promoted). A namespace
-- keeps at most 1,000 rows (a write past that is 409
-- build_id_rollout_limit_exceeded); a row left active, unselected and
-- without registered workers is deleted by the write that leaves it so.
CREATE TABLE build_id_rollouts (
    namespace TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    build_id TEXT NOT NULL,
    drain_intent TEXT NOT NULL CHECK (drain_intent IN ('active', 'draining')),
    drained_at_ms INTEGER,
    promoted_at_ms INTEGER,
    rolled_back_at_ms INTEGER,
    new_start_selected INTEGER NOT NULL DEFAULT 0,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (namespace, task_queue, build_id)
) WITHOUT ROWID;
-- A run pinned to the unversioned cohort carries build_id '' (a start on a
-- queue whose promoted cohort is the unversioned one): its timers are the
-- unversioned cohort's (NULL), as an unpinned run's are.
DROP TRIGGER dispatch_timer_cohort;
CREATE TRIGGER dispatch_timer_cohort AFTER INSERT ON dispatch_tasks
WHEN NEW.kind = 'timer'
BEGIN
    UPDATE dispatch_tasks
    SET build_id = (SELECT NULLIF(build_id, '') FROM runs WHERE id = NEW.run_id)
    WHERE id = NEW.id;
END;
