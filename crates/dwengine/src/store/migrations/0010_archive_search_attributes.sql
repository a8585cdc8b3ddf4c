-- Archive for closed runs, and per-namespace custom search-attribute
-- registrations (capped by server.limits.max_search_attributes).
ALTER TABLE runs ADD COLUMN archived_at_ms INTEGER;
ALTER TABLE runs ADD COLUMN archive_reason TEXT;

CREATE TABLE search_attribute_definitions (
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    type TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (namespace, name)
) WITHOUT ROWID;
