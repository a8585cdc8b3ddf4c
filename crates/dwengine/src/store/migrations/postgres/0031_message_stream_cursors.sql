-- PostgreSQL twin of ../0031_message_stream_cursors.sql: how far a run
-- consumed each input message stream (carried across continue-as-new).
CREATE TABLE message_stream_cursors (
    run_id BIGINT NOT NULL REFERENCES runs (id),
    stream_name TEXT NOT NULL,
    through_position BIGINT NOT NULL,
    PRIMARY KEY (run_id, stream_name)
);
