-- See the PostgreSQL twin: the busy queues' partial index reads a flag
-- computed from the counters, so that the metrics' read of the busy
-- queues is one statement on both backends. SQLite computes the flag
-- when it writes the index (a virtual column, nothing stored in the row;
-- 0 or 1, as any comparison).
ALTER TABLE task_queue_state ADD COLUMN busy BOOLEAN
    GENERATED ALWAYS AS (workflow_ready + workflow_leased + activity_ready + activity_leased > 0) VIRTUAL;
DROP INDEX task_queue_state_active;
CREATE INDEX task_queue_state_active ON task_queue_state (namespace, task_queue) WHERE busy;
