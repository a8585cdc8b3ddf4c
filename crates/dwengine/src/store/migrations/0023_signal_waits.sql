-- Signal waits of the wire protocol (`open_signal_wait`, the SDKs'
-- `wait_signal`). One row per wait a workflow opened; it records the signal
-- that satisfied it. A run holds at most one row per command it issued (each
-- also writes a `SignalWaitOpened` event, so `history_transaction_size` and
-- the run's history bound them), and the rows stay with the run like its
-- timers and signals.
CREATE TABLE signal_waits (
    run_id INTEGER NOT NULL REFERENCES runs (id),
    sequence INTEGER NOT NULL,
    signal_name TEXT NOT NULL,
    -- A parallel group member's group metadata (JSON), echoed on its events.
    parallel_group TEXT,
    -- The signal it was applied with; NULL while the wait is open.
    signal_id INTEGER REFERENCES signals (id),
    PRIMARY KEY (run_id, sequence)
) WITHOUT ROWID;
CREATE INDEX signal_waits_open ON signal_waits (run_id, signal_name, sequence)
    WHERE signal_id IS NULL;

-- The wait a signal was applied to (NULL while no wait took it): a signal
-- satisfies at most one wait, the oldest open one of its name.
ALTER TABLE signals ADD COLUMN wait_sequence INTEGER;
CREATE INDEX signals_unapplied ON signals (run_id, name, id) WHERE wait_sequence IS NULL;
