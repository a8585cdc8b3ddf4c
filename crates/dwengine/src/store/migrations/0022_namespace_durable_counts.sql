-- The durable-state quota's counts of a namespace's schedules,
-- service-catalog entries, workflow streams and their items, kept by
-- triggers in the transaction of each insert, delete or append, so a quota
-- check (run before and after a mutation) reads one row per resource
-- instead of counting the namespace's rows. A row whose count returns to 0
-- is deleted, so namespace churn leaves nothing behind. Items are the
-- streams' total_items: an expired stream counts whole until the reclaim
-- deletes its row. The covering index of 0019 is no longer read.
CREATE TABLE namespace_durable_counts (
    namespace TEXT NOT NULL,
    resource TEXT NOT NULL,
    count INTEGER NOT NULL CHECK (count >= 0),
    PRIMARY KEY (namespace, resource)
) WITHOUT ROWID;

INSERT INTO namespace_durable_counts (namespace, resource, count)
    SELECT namespace, 'schedules', COUNT(*) FROM schedules GROUP BY namespace;
INSERT INTO namespace_durable_counts (namespace, resource, count)
    SELECT namespace, 'service_catalog_entries', COUNT(*) FROM service_catalog GROUP BY namespace;
INSERT INTO namespace_durable_counts (namespace, resource, count)
    SELECT namespace, 'workflow_streams', COUNT(*) FROM workflow_streams GROUP BY namespace;
INSERT INTO namespace_durable_counts (namespace, resource, count)
    SELECT namespace, 'workflow_stream_items', SUM(total_items) FROM workflow_streams
    GROUP BY namespace HAVING SUM(total_items) > 0;

CREATE TRIGGER schedules_count_insert AFTER INSERT ON schedules BEGIN
    INSERT INTO namespace_durable_counts (namespace, resource, count)
        VALUES (NEW.namespace, 'schedules', 1)
        ON CONFLICT (namespace, resource) DO UPDATE SET count = count + 1;
END;
CREATE TRIGGER schedules_count_delete AFTER DELETE ON schedules BEGIN
    UPDATE namespace_durable_counts SET count = count - 1
        WHERE namespace = OLD.namespace AND resource = 'schedules';
    DELETE FROM namespace_durable_counts
        WHERE namespace = OLD.namespace AND resource = 'schedules' AND count = 0;
END;

CREATE TRIGGER service_catalog_count_insert AFTER INSERT ON service_catalog BEGIN
    INSERT INTO namespace_durable_counts (namespace, resource, count)
        VALUES (NEW.namespace, 'service_catalog_entries', 1)
        ON CONFLICT (namespace, resource) DO UPDATE SET count = count + 1;
END;
CREATE TRIGGER service_catalog_count_delete AFTER DELETE ON service_catalog BEGIN
    UPDATE namespace_durable_counts SET count = count - 1
        WHERE namespace = OLD.namespace AND resource = 'service_catalog_entries';
    DELETE FROM namespace_durable_counts
        WHERE namespace = OLD.namespace AND resource = 'service_catalog_entries' AND count = 0;
END;

CREATE TRIGGER workflow_streams_count_insert AFTER INSERT ON workflow_streams BEGIN
    INSERT INTO namespace_durable_counts (namespace, resource, count)
        VALUES (NEW.namespace, 'workflow_streams', 1)
        ON CONFLICT (namespace, resource) DO UPDATE SET count = count + 1;
    INSERT INTO namespace_durable_counts (namespace, resource, count)
        SELECT NEW.namespace, 'workflow_stream_items', NEW.total_items WHERE NEW.total_items > 0
        ON CONFLICT (namespace, resource) DO UPDATE SET count = count + excluded.count;
END;
CREATE TRIGGER workflow_streams_count_items AFTER UPDATE OF total_items ON workflow_streams
    WHEN NEW.total_items != OLD.total_items BEGIN
    INSERT INTO namespace_durable_counts (namespace, resource, count)
        VALUES (NEW.namespace, 'workflow_stream_items', MAX(NEW.total_items - OLD.total_items, 0))
        ON CONFLICT (namespace, resource) DO UPDATE
        SET count = count + NEW.total_items - OLD.total_items;
    DELETE FROM namespace_durable_counts
        WHERE namespace = NEW.namespace AND resource = 'workflow_stream_items' AND count = 0;
END;
CREATE TRIGGER workflow_streams_count_delete AFTER DELETE ON workflow_streams BEGIN
    UPDATE namespace_durable_counts SET count = count - 1
        WHERE namespace = OLD.namespace AND resource = 'workflow_streams';
    UPDATE namespace_durable_counts SET count = count - OLD.total_items
        WHERE namespace = OLD.namespace AND resource = 'workflow_stream_items';
    DELETE FROM namespace_durable_counts
        WHERE namespace = OLD.namespace AND count = 0
        AND resource IN ('workflow_streams', 'workflow_stream_items');
END;

DROP INDEX workflow_streams_namespace;
