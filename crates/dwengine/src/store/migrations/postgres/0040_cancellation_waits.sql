-- PostgreSQL twin of ../0040_cancellation_waits.sql: an activity waited on
-- by a parked cancellation delivery, and its acknowledgement receipt.
ALTER TABLE activities ADD COLUMN cancel_requested_at_ms BIGINT;
ALTER TABLE activities ADD COLUMN cancellation_ack TEXT;
