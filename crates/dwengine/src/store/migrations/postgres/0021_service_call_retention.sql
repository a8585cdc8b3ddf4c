-- PostgreSQL twin of ../0021_service_call_retention.sql: service calls are
-- swept oldest first through this index.
CREATE INDEX service_calls_created ON service_calls (created_at_ms);
