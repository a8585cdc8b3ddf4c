-- Cooperative cancellation (worker protocol 1.20): a run's one pending
-- cancellation request, from the client's request until the run closes
-- (the row is deleted with the run's close, in the same transaction), so
-- the table holds at most one row per open run. `delivered_sequence` is
-- the authored call a worker delivered it at (NULL while pending).
CREATE TABLE cancellation_requests (
    run_id INTEGER PRIMARY KEY REFERENCES runs (id),
    request_id TEXT NOT NULL,
    reason TEXT,
    requested_at_ms INTEGER NOT NULL,
    cleanup_deadline_at_ms INTEGER NOT NULL,
    delivered_sequence INTEGER
);
