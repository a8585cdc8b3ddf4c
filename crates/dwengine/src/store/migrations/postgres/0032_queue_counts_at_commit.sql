-- Task claims run side by side on PostgreSQL (each locks the task it takes
-- with FOR UPDATE SKIP LOCKED and holds the store's write lock shared; see
-- store::db::Connection::begin_claim). The status move a claim makes would
-- update its queue's task_queue_state row at once, and that row lock, held
-- to the claim's commit, would make two claims of one queue wait for each
-- other. The move is counted at commit instead: a deferred constraint
-- trigger, so a queue's counter row is locked only while a transaction
-- commits. Nothing reads task_queue_state inside a write transaction (the
-- metrics and the console read committed snapshots), and every committed
-- state has its moves counted, so the counters still equal their rows.
-- SQLite runs one writer at a time and keeps its immediate trigger.
DROP TRIGGER task_queue_state_move ON dispatch_tasks;
CREATE CONSTRAINT TRIGGER task_queue_state_move AFTER UPDATE OF status ON dispatch_tasks
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.kind IN ('workflow', 'activity') AND OLD.status <> NEW.status)
    EXECUTE FUNCTION task_queue_state_move();
