-- PostgreSQL twin of ../0028_worker_sessions.sql: worker sessions, the
-- session an activity task must run in, and what a worker offers sessions.
CREATE TABLE worker_sessions (
    namespace TEXT NOT NULL,
    session_id TEXT NOT NULL,
    queue TEXT NOT NULL,
    holder TEXT NOT NULL,
    options TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('active', 'closed', 'failed')),
    max_concurrent_activities BIGINT NOT NULL,
    allow_reacquire BIGINT NOT NULL,
    lease_seconds BIGINT NOT NULL,
    lease_expires_at_ms BIGINT NOT NULL,
    ttl_expires_at_ms BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    closed_at_ms BIGINT,
    close_reason TEXT,
    PRIMARY KEY (namespace, session_id)
);
CREATE INDEX worker_sessions_by_holder ON worker_sessions (namespace, holder);
CREATE INDEX worker_sessions_by_ttl ON worker_sessions (ttl_expires_at_ms);
ALTER TABLE dispatch_tasks ADD COLUMN session_id TEXT;
CREATE INDEX dispatch_by_session ON dispatch_tasks (namespace, session_id, status)
    WHERE session_id IS NOT NULL;
ALTER TABLE workers ADD COLUMN session_capabilities TEXT;
ALTER TABLE workers ADD COLUMN max_sessions BIGINT;
