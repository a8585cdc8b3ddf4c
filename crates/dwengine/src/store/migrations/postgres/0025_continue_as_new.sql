-- PostgreSQL twin of ../0025_continue_as_new.sql: a run closes as
-- continued_as_new and a new run of the same workflow id starts in the same
-- transaction; each names the other.
ALTER TABLE runs ADD COLUMN continued_from_run_id BIGINT REFERENCES runs (id);
ALTER TABLE runs ADD COLUMN continued_to_run_id BIGINT REFERENCES runs (id);

-- The new terminal status.
ALTER TABLE runs DROP CONSTRAINT runs_status_check,
    ADD CONSTRAINT runs_status_check
    CHECK (status IN ('running', 'completed', 'failed', 'cancelled', 'terminated', 'continued_as_new'));

-- dw_workflow_runs_total's series count runs closed as continued.
ALTER TABLE workflow_run_series ADD COLUMN continued_as_new BIGINT NOT NULL DEFAULT 0;

CREATE OR REPLACE FUNCTION workflow_run_series_close() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE workflow_run_series SET
        completed = completed + (NEW.status = 'completed')::int,
        failed = failed + (NEW.status = 'failed')::int,
        cancelled = cancelled + (NEW.status = 'cancelled')::int,
        terminated = terminated + (NEW.status = 'terminated')::int,
        continued_as_new = continued_as_new + (NEW.status = 'continued_as_new')::int,
        latency_count = latency_count + (NEW.closed_at_ms IS NOT NULL)::int,
        latency_sum_ms = latency_sum_ms + GREATEST(COALESCE(NEW.closed_at_ms - NEW.created_at_ms, 0), 0),
        le_0_1 = le_0_1 + COALESCE(((NEW.closed_at_ms - NEW.created_at_ms) <= 100)::int, 0),
        le_0_5 = le_0_5 + COALESCE(((NEW.closed_at_ms - NEW.created_at_ms) <= 500)::int, 0),
        le_1 = le_1 + COALESCE(((NEW.closed_at_ms - NEW.created_at_ms) <= 1000)::int, 0),
        le_2_5 = le_2_5 + COALESCE(((NEW.closed_at_ms - NEW.created_at_ms) <= 2500)::int, 0),
        le_5 = le_5 + COALESCE(((NEW.closed_at_ms - NEW.created_at_ms) <= 5000)::int, 0),
        le_10 = le_10 + COALESCE(((NEW.closed_at_ms - NEW.created_at_ms) <= 10000)::int, 0),
        le_30 = le_30 + COALESCE(((NEW.closed_at_ms - NEW.created_at_ms) <= 30000)::int, 0),
        le_60 = le_60 + COALESCE(((NEW.closed_at_ms - NEW.created_at_ms) <= 60000)::int, 0),
        le_300 = le_300 + COALESCE(((NEW.closed_at_ms - NEW.created_at_ms) <= 300000)::int, 0),
        le_900 = le_900 + COALESCE(((NEW.closed_at_ms - NEW.created_at_ms) <= 900000)::int, 0)
    WHERE namespace = NEW.namespace AND task_queue = NEW.task_queue
        AND workflow_type = NEW.workflow_type;
    RETURN NULL;
END;
$$;
-- SQLite drops and recreates the trigger (same event and WHEN); the
-- function above is what changed.
DROP TRIGGER workflow_run_series_close ON runs;
CREATE TRIGGER workflow_run_series_close AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (OLD.status = 'running' AND NEW.status <> 'running')
    EXECUTE FUNCTION workflow_run_series_close();
