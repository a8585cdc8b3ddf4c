-- Worker sessions: a session routes the activities that name it to the one
-- worker holding it (a process-local resource lives there). One row per
-- (namespace, session id): its holder, its options as the SDK sent them
-- (canonical JSON), its holder lease (renewed by the holder's heartbeats
-- and its activities' heartbeats) and its TTL (fixed at creation, never
-- extended). A session ends closed (its holder closed it), failed (its
-- holder went away and it may not be reacquired) or at its TTL; its
-- pending activities then fail. Rows are deleted once past their TTL by
-- the bounded sweep of the worker heartbeats
-- (server.workers.worker_session_prune_scan_limit).
CREATE TABLE worker_sessions (
    namespace TEXT NOT NULL,
    session_id TEXT NOT NULL,
    queue TEXT NOT NULL,
    holder TEXT NOT NULL,
    options TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('active', 'closed', 'failed')),
    max_concurrent_activities INTEGER NOT NULL,
    allow_reacquire INTEGER NOT NULL,
    lease_seconds INTEGER NOT NULL,
    lease_expires_at_ms INTEGER NOT NULL,
    ttl_expires_at_ms INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    closed_at_ms INTEGER,
    close_reason TEXT,
    PRIMARY KEY (namespace, session_id)
);
CREATE INDEX worker_sessions_by_holder ON worker_sessions (namespace, holder);
CREATE INDEX worker_sessions_by_ttl ON worker_sessions (ttl_expires_at_ms);
-- The session an activity task must run in (NULL: any worker of its queue).
ALTER TABLE dispatch_tasks ADD COLUMN session_id TEXT;
CREATE INDEX dispatch_by_session ON dispatch_tasks (namespace, session_id, status)
    WHERE session_id IS NOT NULL;
-- What a registered worker offers sessions: NULL when it did not ask for
-- worker_sessions, else the JSON list of the capabilities it named (the
-- resource requirements it satisfies) and its session capacity.
ALTER TABLE workers ADD COLUMN session_capabilities TEXT;
ALTER TABLE workers ADD COLUMN max_sessions INTEGER;
