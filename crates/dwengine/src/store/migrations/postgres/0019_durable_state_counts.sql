-- PostgreSQL twin of ../0019_durable_state_counts.sql (the index is dropped
-- again by 0022).
CREATE INDEX workflow_streams_namespace ON workflow_streams (namespace, total_items);
