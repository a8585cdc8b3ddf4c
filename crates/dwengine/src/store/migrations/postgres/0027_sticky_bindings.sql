-- PostgreSQL twin of ../0027_sticky_bindings.sql: a run's sticky binding to
-- the worker that caches its history (one row per run at most).
CREATE TABLE sticky_bindings (
    run_id BIGINT PRIMARY KEY,
    namespace TEXT NOT NULL,
    worker_id TEXT NOT NULL,
    build_id TEXT,
    hold_ms BIGINT NOT NULL,
    bound_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL
);
CREATE INDEX sticky_bindings_by_worker ON sticky_bindings (namespace, worker_id);
CREATE INDEX sticky_bindings_by_expiry ON sticky_bindings (expires_at_ms);
