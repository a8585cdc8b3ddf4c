-- PostgreSQL twin of ../0049_lease_index_partial.sql: `dispatch_leases`
-- holds the leased tasks only (every reader of it names `status =
-- 'leased'`), so a task's start and close write no entry to it.
DROP INDEX dispatch_leases;
CREATE INDEX dispatch_leases ON dispatch_tasks (kind, status, lease_expires_at_ms)
    WHERE status = 'leased';
