-- Cooperative cancellation delivered at an activity whose
-- cancellation_policy is wait_cancellation_completed parks the workflow
-- task's claim while the running attempt cleans up: the activity stays
-- open with cancel_requested_at_ms set (its heartbeat and status answer
-- cancel_requested) until the attempt reports, acknowledges the
-- cancellation or loses its lease. cancellation_ack holds the attempt's
-- acknowledge-cancellation receipt (its history event id), so a repeat
-- answers the first. Both columns live on the activity's own row, deleted
-- with its run.
ALTER TABLE activities ADD COLUMN cancel_requested_at_ms INTEGER;
ALTER TABLE activities ADD COLUMN cancellation_ack TEXT;
