-- PostgreSQL twin of ../0022_namespace_durable_counts.sql: the
-- durable-state quota's counts of a namespace's schedules, service-catalog
-- entries, workflow streams and their items, kept by triggers; a row whose
-- count returns to 0 is deleted.
CREATE TABLE namespace_durable_counts (
    namespace TEXT NOT NULL,
    resource TEXT NOT NULL,
    count BIGINT NOT NULL CHECK (count >= 0),
    PRIMARY KEY (namespace, resource)
);

INSERT INTO namespace_durable_counts (namespace, resource, count)
    SELECT namespace, 'schedules', COUNT(*) FROM schedules GROUP BY namespace;
INSERT INTO namespace_durable_counts (namespace, resource, count)
    SELECT namespace, 'service_catalog_entries', COUNT(*) FROM service_catalog GROUP BY namespace;
INSERT INTO namespace_durable_counts (namespace, resource, count)
    SELECT namespace, 'workflow_streams', COUNT(*) FROM workflow_streams GROUP BY namespace;
INSERT INTO namespace_durable_counts (namespace, resource, count)
    SELECT namespace, 'workflow_stream_items', SUM(total_items) FROM workflow_streams
    GROUP BY namespace HAVING SUM(total_items) > 0;

CREATE FUNCTION schedules_count_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO namespace_durable_counts AS c (namespace, resource, count)
        VALUES (NEW.namespace, 'schedules', 1)
        ON CONFLICT (namespace, resource) DO UPDATE SET count = c.count + 1;
    RETURN NULL;
END;
$$;
CREATE TRIGGER schedules_count_insert AFTER INSERT ON schedules
    FOR EACH ROW EXECUTE FUNCTION schedules_count_insert();

CREATE FUNCTION schedules_count_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE namespace_durable_counts SET count = count - 1
        WHERE namespace = OLD.namespace AND resource = 'schedules';
    DELETE FROM namespace_durable_counts
        WHERE namespace = OLD.namespace AND resource = 'schedules' AND count = 0;
    RETURN NULL;
END;
$$;
CREATE TRIGGER schedules_count_delete AFTER DELETE ON schedules
    FOR EACH ROW EXECUTE FUNCTION schedules_count_delete();

CREATE FUNCTION service_catalog_count_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO namespace_durable_counts AS c (namespace, resource, count)
        VALUES (NEW.namespace, 'service_catalog_entries', 1)
        ON CONFLICT (namespace, resource) DO UPDATE SET count = c.count + 1;
    RETURN NULL;
END;
$$;
CREATE TRIGGER service_catalog_count_insert AFTER INSERT ON service_catalog
    FOR EACH ROW EXECUTE FUNCTION service_catalog_count_insert();

CREATE FUNCTION service_catalog_count_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE namespace_durable_counts SET count = count - 1
        WHERE namespace = OLD.namespace AND resource = 'service_catalog_entries';
    DELETE FROM namespace_durable_counts
        WHERE namespace = OLD.namespace AND resource = 'service_catalog_entries' AND count = 0;
    RETURN NULL;
END;
$$;
CREATE TRIGGER service_catalog_count_delete AFTER DELETE ON service_catalog
    FOR EACH ROW EXECUTE FUNCTION service_catalog_count_delete();

CREATE FUNCTION workflow_streams_count_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO namespace_durable_counts AS c (namespace, resource, count)
        VALUES (NEW.namespace, 'workflow_streams', 1)
        ON CONFLICT (namespace, resource) DO UPDATE SET count = c.count + 1;
    IF NEW.total_items > 0 THEN
        INSERT INTO namespace_durable_counts AS c (namespace, resource, count)
            VALUES (NEW.namespace, 'workflow_stream_items', NEW.total_items)
            ON CONFLICT (namespace, resource) DO UPDATE SET count = c.count + excluded.count;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER workflow_streams_count_insert AFTER INSERT ON workflow_streams
    FOR EACH ROW EXECUTE FUNCTION workflow_streams_count_insert();

CREATE FUNCTION workflow_streams_count_items() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO namespace_durable_counts AS c (namespace, resource, count)
        VALUES (NEW.namespace, 'workflow_stream_items', GREATEST(NEW.total_items - OLD.total_items, 0))
        ON CONFLICT (namespace, resource) DO UPDATE
        SET count = c.count + NEW.total_items - OLD.total_items;
    DELETE FROM namespace_durable_counts
        WHERE namespace = NEW.namespace AND resource = 'workflow_stream_items' AND count = 0;
    RETURN NULL;
END;
$$;
CREATE TRIGGER workflow_streams_count_items AFTER UPDATE OF total_items ON workflow_streams
    FOR EACH ROW WHEN (NEW.total_items <> OLD.total_items)
    EXECUTE FUNCTION workflow_streams_count_items();

CREATE FUNCTION workflow_streams_count_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE namespace_durable_counts SET count = count - 1
        WHERE namespace = OLD.namespace AND resource = 'workflow_streams';
    UPDATE namespace_durable_counts SET count = count - OLD.total_items
        WHERE namespace = OLD.namespace AND resource = 'workflow_stream_items';
    DELETE FROM namespace_durable_counts
        WHERE namespace = OLD.namespace AND count = 0
        AND resource IN ('workflow_streams', 'workflow_stream_items');
    RETURN NULL;
END;
$$;
CREATE TRIGGER workflow_streams_count_delete AFTER DELETE ON workflow_streams
    FOR EACH ROW EXECUTE FUNCTION workflow_streams_count_delete();

DROP INDEX workflow_streams_namespace;
