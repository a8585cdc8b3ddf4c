-- The registrations that declare update validators, by namespace and task
-- queue: every update asks whether one guards it, and without this index
-- that question read every registration of the namespace. (SQLite's
-- planner prefers the primary key's namespace prefix: the query names
-- this index, INDEXED BY, which the PostgreSQL seam drops.)
CREATE INDEX workers_validating ON workers (namespace, task_queue)
    WHERE update_validators IS NOT NULL;
