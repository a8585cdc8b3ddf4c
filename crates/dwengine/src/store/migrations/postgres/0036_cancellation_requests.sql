-- PostgreSQL twin of ../0036_cancellation_requests.sql: a run's one
-- cooperative cancellation request, deleted when the run closes.
CREATE TABLE cancellation_requests (
    run_id BIGINT PRIMARY KEY REFERENCES runs (id),
    request_id TEXT NOT NULL,
    reason TEXT,
    requested_at_ms BIGINT NOT NULL,
    cleanup_deadline_at_ms BIGINT NOT NULL,
    delivered_sequence BIGINT
);
