-- The label sets of dw_workflow_runs_total, in the order a scrape discovers
-- them: a scrape walks this index for one namespace, grouping and counting
-- without a temporary sort, and stops after limit + 1 (task_queue,
-- workflow_type) groups however many runs the namespace holds.
CREATE INDEX runs_by_series ON runs (namespace, task_queue, workflow_type);
