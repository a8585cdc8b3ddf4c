-- See the PostgreSQL twin: a poll's read of the task leased to its request
-- id finds it by that id, not by walking the queue's leased tasks.
CREATE INDEX dispatch_poll_requests ON dispatch_tasks (poll_request_id) WHERE status = 'leased';
