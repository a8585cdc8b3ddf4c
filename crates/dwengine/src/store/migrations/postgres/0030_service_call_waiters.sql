-- PostgreSQL twin of ../0030_service_call_waiters.sql: one row per Nexus
-- service call a workflow awaits (caller run, command sequence, call, linked
-- run, the fields its events repeat), deleted when the linked run closes.
CREATE TABLE service_call_waiters (
    caller_run_id BIGINT NOT NULL REFERENCES runs (id),
    sequence BIGINT NOT NULL,
    call_id BIGINT NOT NULL,
    linked_run_id BIGINT NOT NULL REFERENCES runs (id),
    event_fields TEXT NOT NULL,
    PRIMARY KEY (caller_run_id, sequence)
);
CREATE INDEX service_call_waiters_by_linked ON service_call_waiters (linked_run_id);
