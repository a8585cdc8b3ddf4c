-- PostgreSQL twin of ../0029_message_streams.sql: input message streams,
-- one row per admitted message giving it its position in its run's stream
-- and making an append with the same message id idempotent.
CREATE TABLE message_stream_messages (
    run_id BIGINT NOT NULL REFERENCES runs (id),
    stream_name TEXT NOT NULL,
    position BIGINT NOT NULL,
    message_id TEXT NOT NULL,
    signal_id BIGINT NOT NULL REFERENCES signals (id),
    PRIMARY KEY (run_id, stream_name, position)
);
CREATE UNIQUE INDEX message_stream_message_ids
    ON message_stream_messages (run_id, stream_name, message_id);
