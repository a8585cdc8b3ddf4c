-- Updates waiting for a worker's validator (synchronous pre-accept
-- validation): neither accepted nor in history until a worker approves.
-- A row is the update and its validation task at once: leased to one
-- worker at a time (attempt, lease owner and expiry fence the verdict),
-- handed out again once its lease lapses, approved (the accepted update's
-- id; the updates row and UpdateAccepted event are written then) or
-- rejected (the worker's failure). The waiting caller deletes its row when
-- it answers; a row whose caller went away expires at expires_at_ms and is
-- deleted by the run's next validated admission. A run holds at most
-- pending_update_count validating rows (counted with its accepted updates).
CREATE TABLE update_validations (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL,
    namespace TEXT NOT NULL,
    task_queue TEXT NOT NULL,
    name TEXT NOT NULL,
    payload TEXT NOT NULL,
    payload_bytes INTEGER NOT NULL,
    request_id TEXT,
    status TEXT NOT NULL CHECK (status IN ('validating', 'approved', 'rejected')),
    attempt INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_expires_at_ms INTEGER,
    poll_request_id TEXT,
    created_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    update_id INTEGER,
    failure TEXT
);
CREATE INDEX update_validations_by_queue ON update_validations (namespace, task_queue, id)
    WHERE status = 'validating';
CREATE INDEX update_validations_by_run ON update_validations (run_id, status);
CREATE INDEX update_validations_by_request ON update_validations (run_id, request_id)
    WHERE request_id IS NOT NULL;
-- The update names each registered worker validates, per workflow type
-- (a JSON object; NULL: none), from its registration's
-- workflow_command_contracts when it asked for update_validation_tasks.
ALTER TABLE workers ADD COLUMN update_validators TEXT;
