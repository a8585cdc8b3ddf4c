-- PostgreSQL twin of ../0050_runs_by_workflow_with_id.sql: the newest run
-- of a workflow id is one backward step in `runs_by_workflow`, so no plan
-- (a generic one made while the table was empty included) walks every
-- run of the namespace to find it.
DROP INDEX runs_by_workflow;
CREATE INDEX runs_by_workflow ON runs (namespace, workflow_id, id);
