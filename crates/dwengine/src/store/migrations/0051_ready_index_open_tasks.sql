-- `dispatch_ready` (kind, namespace, task_queue, status, due_at_ms) held an
-- entry for every dispatch task, done ones included, though each of its
-- readers names `status = 'ready'` or `status = 'leased'`: a lease's
-- candidates, whether another task of the queue is ready, a poll's binding
-- to the task it leased, a queue's leases, the failing workflow tasks of a
-- namespace. A task moved its entry on each status change (ready to
-- leased, leased to done: four writes and the insert), and a done task's
-- entry stayed until its run was pruned. It now holds the open tasks only,
-- with the same key, so its readers' plans do not change: a task's close
-- deletes its entry and writes none, four index writes a task instead of
-- five, and the index grows with the open tasks, not the history.
-- The condition is written as an OR, not an IN list: SQLite uses a partial
-- index only for a WHERE that implies its condition, and it proves
-- `status = 'ready'` implies `status = 'ready' OR status = 'leased'`, not
-- `status IN (...)`.
DROP INDEX dispatch_ready;
CREATE INDEX dispatch_ready ON dispatch_tasks (kind, namespace, task_queue, status, due_at_ms)
    WHERE status = 'ready' OR status = 'leased';
-- `dispatch_leases` (0049) is made again, unchanged, after it: where a
-- statement names both a namespace and `status = 'leased'` and not a queue
-- (a deregistered worker's released leases), the two indexes' estimates
-- tie and SQLite keeps the one it meets first, the newest in the schema.
-- That walk stays on the leased tasks, not the namespace's open ones (a
-- backlog can be far larger than the leases).
DROP INDEX dispatch_leases;
CREATE INDEX dispatch_leases ON dispatch_tasks (kind, status, lease_expires_at_ms)
    WHERE status = 'leased';
