-- PostgreSQL twin of ../0051_ready_index_open_tasks.sql: `dispatch_ready`
-- holds the open (ready or leased) tasks only, with the same key (each of
-- its readers names one of the two statuses), so a task's close deletes
-- its entry and a done task leaves none behind.
DROP INDEX dispatch_ready;
CREATE INDEX dispatch_ready ON dispatch_tasks (kind, namespace, task_queue, status, due_at_ms)
    WHERE status = 'ready' OR status = 'leased';
