-- Workflow starts run side by side on PostgreSQL: a node's start batches
-- hold the store's write lock shared, as claims do (see
-- store::db::Connection::begin_starts). Every start adds to two counter
-- rows shared by all starts of its kind: its series' workflow_run_series
-- row and its queue's task_queue_state row. Counted at once, those row
-- locks would be held from a batch's first insert to its commit, so two
-- nodes' batches would still take turns for their whole length. They are
-- counted at commit instead, as the status moves already are (0032): the
-- counter triggers become deferred constraint triggers, fired in the order
-- their rows changed, so a counter row is locked only while a transaction
-- commits and every committed state has all its changes counted. The
-- closing and removing counts move with them, so a transaction's counts
-- still run in the order of its changes (a run started and closed in one
-- transaction is counted started, then closed). A write transaction that
-- reads these counters to decide (a namespace's quota of runs) fires its
-- pending counts first (Connection::settle_counters).
DROP TRIGGER workflow_run_series_start ON runs;
CREATE CONSTRAINT TRIGGER workflow_run_series_start AFTER INSERT ON runs
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION workflow_run_series_start();
DROP TRIGGER workflow_run_series_close ON runs;
CREATE CONSTRAINT TRIGGER workflow_run_series_close AFTER UPDATE OF status ON runs
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.status = 'running' AND NEW.status <> 'running')
    EXECUTE FUNCTION workflow_run_series_close();
DROP TRIGGER task_queue_state_add ON dispatch_tasks;
CREATE CONSTRAINT TRIGGER task_queue_state_add AFTER INSERT ON dispatch_tasks
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.kind IN ('workflow', 'activity'))
    EXECUTE FUNCTION task_queue_state_add();
DROP TRIGGER task_queue_state_remove ON dispatch_tasks;
CREATE CONSTRAINT TRIGGER task_queue_state_remove AFTER DELETE ON dispatch_tasks
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.kind IN ('workflow', 'activity') AND OLD.status IN ('ready', 'leased'))
    EXECUTE FUNCTION task_queue_state_remove();

