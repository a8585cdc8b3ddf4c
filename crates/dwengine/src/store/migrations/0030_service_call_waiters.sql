-- Nexus service operations started by workflow code (the
-- start_service_operation command): one row per call a workflow awaits,
-- naming the caller run, the command's sequence (the caller's
-- ServiceCallStarted and its terminal ServiceCall* event share it), the
-- service call and the run the call started, and the fields every event of
-- the call repeats (JSON). When the linked run closes, its waiters get their
-- terminal event and a workflow task and their rows are deleted; a caller
-- holds at most one row per command it issued (each also writes a
-- ServiceCallStarted event, so history_transaction_size and the run's
-- history bound them).
CREATE TABLE service_call_waiters (
    caller_run_id INTEGER NOT NULL REFERENCES runs (id),
    sequence INTEGER NOT NULL,
    call_id INTEGER NOT NULL,
    linked_run_id INTEGER NOT NULL REFERENCES runs (id),
    event_fields TEXT NOT NULL,
    PRIMARY KEY (caller_run_id, sequence)
) WITHOUT ROWID;
CREATE INDEX service_call_waiters_by_linked ON service_call_waiters (linked_run_id);
