-- PostgreSQL twin of ../0023_signal_waits.sql: signal waits of the wire
-- protocol, one row per wait a workflow opened, recording the signal that
-- satisfied it; the wait a signal was applied to.
CREATE TABLE signal_waits (
    run_id BIGINT NOT NULL REFERENCES runs (id),
    sequence BIGINT NOT NULL,
    signal_name TEXT NOT NULL,
    -- A parallel group member's group metadata (JSON), echoed on its events.
    parallel_group TEXT,
    -- The signal it was applied with; NULL while the wait is open.
    signal_id BIGINT REFERENCES signals (id),
    PRIMARY KEY (run_id, sequence)
);
CREATE INDEX signal_waits_open ON signal_waits (run_id, signal_name, sequence)
    WHERE signal_id IS NULL;

ALTER TABLE signals ADD COLUMN wait_sequence BIGINT;
CREATE INDEX signals_unapplied ON signals (run_id, name, id) WHERE wait_sequence IS NULL;
