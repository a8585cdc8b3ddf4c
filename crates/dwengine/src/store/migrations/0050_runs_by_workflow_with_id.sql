-- `runs_by_workflow` carries the run's id after its workflow id, so "the
-- newest (running) run of this workflow id" (`ORDER BY id DESC LIMIT 1`,
-- asked by every start, describe and signal by workflow id) is one
-- backward step in it whatever the planner knows of the table. SQLite's
-- index already ordered a workflow id's runs by id (the rowid rides in
-- every entry); PostgreSQL's did not, and a node's prepared statement,
-- planned while the table was still empty, walked `runs_by_namespace`
-- instead: every start on PostgreSQL read every run of its namespace
-- (docs/performance.md, session 19). Both backends keep one index shape.
DROP INDEX runs_by_workflow;
CREATE INDEX runs_by_workflow ON runs (namespace, workflow_id, id);
