-- Query tasks moved to the cache (dwengine::query_tasks): they are ephemeral,
-- living only while their caller waits, and every key they make expires.
DROP INDEX IF EXISTS query_tasks_ready;
DROP TABLE IF EXISTS query_tasks;
