-- PostgreSQL twin of ../0011_drop_query_tasks.sql: query tasks moved to the
-- cache (dwengine::query_tasks).
DROP INDEX IF EXISTS query_tasks_ready;
DROP TABLE IF EXISTS query_tasks;
