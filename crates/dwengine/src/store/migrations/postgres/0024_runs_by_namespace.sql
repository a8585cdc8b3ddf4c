-- PostgreSQL twin of ../0024_runs_by_namespace.sql: a namespace's runs
-- newest first (`namespace = ? AND id < ? ORDER BY id DESC LIMIT n`). The
-- same columns as SQLite's index; SQLite's holds each row's id after the
-- namespace, PostgreSQL's does not, so the planner may walk the primary key
-- backwards instead.
CREATE INDEX runs_by_namespace ON runs (namespace);
