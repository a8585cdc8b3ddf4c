-- See the SQLite twin: only a SQLite writer stages starts (PostgreSQL's
-- start batches count at commit, 0037), so nothing here writes this
-- table; it exists so that the two schemas keep the same tables (and the
-- store's statements that name it parse on both).
CREATE TABLE staged_start_flush (flushing BIGINT PRIMARY KEY);
