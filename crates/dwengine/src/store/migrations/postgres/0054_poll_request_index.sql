-- Every poll asks whether a task is still leased to its request id (the
-- durable half of a repeated poll's replay, `Store::leased_by_poll_request`),
-- almost always to learn that none is. Without an index on the id that read
-- walked every leased task of the queue, and on PostgreSQL the entries
-- those tasks' earlier versions left in the indexes until a vacuum: 38-58
-- pages a poll after 25 s of SDK workflows. Only leased tasks are listed.
CREATE INDEX dispatch_poll_requests ON dispatch_tasks (poll_request_id) WHERE status = 'leased';
