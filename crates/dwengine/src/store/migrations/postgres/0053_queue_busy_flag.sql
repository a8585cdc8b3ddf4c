-- Every task that moves updates its queue's `task_queue_state` row, so on
-- a busy queue that one row is updated thousands of times a second. The
-- partial index `task_queue_state_active` named the counters in its
-- predicate, and PostgreSQL counts a column an index's predicate reads as
-- indexed: no update of a counter could be a heap-only (HOT) update, so
-- each one wrote a new entry into all three of the table's indexes and
-- left the old ones to vacuum. Under load the row's lookups walked those
-- dead entries (738 a lookup through `task_queue_state_recent` after 25 s
-- of SDK workflows, 8.9 million in all), with the row locked by the
-- transaction doing it. The predicate now reads a stored flag that
-- changes only when the queue turns busy or idle, so a counter's update
-- leaves every index alone while the queue stays busy.
ALTER TABLE task_queue_state ADD COLUMN busy BOOLEAN
    GENERATED ALWAYS AS (workflow_ready + workflow_leased + activity_ready + activity_leased > 0) STORED;
DROP INDEX task_queue_state_active;
CREATE INDEX task_queue_state_active ON task_queue_state (namespace, task_queue) WHERE busy;
