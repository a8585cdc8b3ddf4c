-- Service calls are kept SERVICE_CALL_RETENTION_MS after they were
-- recorded, then the maintenance sweep deletes them a declared scan limit at
-- a time, oldest first, through this index (a call whose started run is
-- still open is kept until the run closes).
CREATE INDEX service_calls_created ON service_calls (created_at_ms);
