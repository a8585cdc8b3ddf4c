-- The service catalog: endpoints, their services and the services'
-- operations, one table with a level and a parent (0 for endpoints), each
-- name unique under its parent within a namespace. An entry's document
-- (description, metadata, and for operations the mode, handler binding and
-- policies) is JSON the server validated.
CREATE TABLE service_catalog (
    id INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL,
    level TEXT NOT NULL CHECK (level IN ('endpoint', 'service', 'operation')),
    parent_id INTEGER NOT NULL,
    name TEXT NOT NULL,
    document TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    UNIQUE (namespace, level, parent_id, name)
);
CREATE INDEX service_catalog_children ON service_catalog (parent_id, level);

-- Service calls: one row per accepted call of an operation. A caller's
-- idempotency key names one call per (operation, caller namespace); the
-- linked run is the workflow the call started in the catalog's namespace.
CREATE TABLE service_calls (
    id INTEGER PRIMARY KEY,
    operation_id INTEGER NOT NULL,
    namespace TEXT NOT NULL,
    caller_namespace TEXT NOT NULL,
    idempotency_key TEXT,
    request TEXT NOT NULL,
    linked_workflow_id TEXT,
    linked_run_id INTEGER,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    UNIQUE (operation_id, caller_namespace, idempotency_key)
);
