-- PostgreSQL twin of ../0010_archive_search_attributes.sql: archive for
-- closed runs, and per-namespace custom search-attribute registrations.
ALTER TABLE runs ADD COLUMN archived_at_ms BIGINT;
ALTER TABLE runs ADD COLUMN archive_reason TEXT;

CREATE TABLE search_attribute_definitions (
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    type TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (namespace, name)
);
