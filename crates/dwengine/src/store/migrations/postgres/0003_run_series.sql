-- PostgreSQL twin of ../0003_run_series.sql: the label sets of
-- dw_workflow_runs_total, in the order a scrape discovers them.
CREATE INDEX runs_by_series ON runs (namespace, task_queue, workflow_type);
