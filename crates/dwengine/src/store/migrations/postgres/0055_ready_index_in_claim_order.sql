-- A claim takes the first ready task of its queue in `due_at_ms, id` order
-- (`FOR UPDATE SKIP LOCKED LIMIT 1`). `dispatch_ready` ended at
-- `due_at_ms`, so PostgreSQL could not read the queue in that order: it
-- read every ready task of the queue, ran the candidate's checks (its run's
-- leased task, its sticky binding, its run's build) on each, and sorted
-- them, to lock one. Under SDK load a queue holds tens of ready tasks (55
-- read and checked for one claim, 0.4 ms, while the claim held the write
-- lock shared and other nodes' writers waited for it). With `id` last the
-- index is the claim's order and the scan stops at the first task it may
-- lock.
DROP INDEX dispatch_ready;
CREATE INDEX dispatch_ready ON dispatch_tasks (kind, namespace, task_queue, status, due_at_ms, id);
