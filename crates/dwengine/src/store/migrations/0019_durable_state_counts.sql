-- The durable-state quota counts a namespace's workflow streams and their
-- items (the streams' total_items) in the write transaction of an append;
-- this covering index makes that a range read of the namespace's streams
-- instead of a scan of every stream.
CREATE INDEX workflow_streams_namespace ON workflow_streams (namespace, total_items);
