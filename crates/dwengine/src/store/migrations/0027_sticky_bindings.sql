-- Sticky execution: a worker that keeps a run's history in its cache
-- claims the run when it completes one of the run's workflow tasks (the
-- completion's sticky_cache). One row per run at most: the run's next
-- workflow task is held for that worker for hold_ms after it becomes ready
-- (or after the claim, whichever is later), then any poller of the queue
-- takes it. The row goes when the run's next completion carries no claim,
-- when another worker takes the run, when its worker deregisters, and once
-- it expires (expires_at_ms: the cache entry's own TTL) through the bounded
-- sweep of the worker heartbeats (server.workers.sticky_binding_prune_scan_limit).
CREATE TABLE sticky_bindings (
    run_id INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL,
    worker_id TEXT NOT NULL,
    build_id TEXT,
    hold_ms INTEGER NOT NULL,
    bound_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
);
CREATE INDEX sticky_bindings_by_worker ON sticky_bindings (namespace, worker_id);
CREATE INDEX sticky_bindings_by_expiry ON sticky_bindings (expires_at_ms);
