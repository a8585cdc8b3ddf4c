-- Functions the store's portable SQL calls by their SQLite names (see
-- crates/dwengine/src/store/pg_schema.rs), and the helpers the trigger
-- functions of the later migrations share. Applied before 0001, in its
-- transaction; it has no SQLite twin, as SQLite has these built in. Once a
-- release has shipped it, a changed or new function is a new numbered
-- migration (CREATE OR REPLACE FUNCTION): a database migrated before keeps
-- what this file said then.

-- The keys of a SQLite JSON path ('$', '$.a.b', '$."a b"', '$.a[0]') as a
-- PostgreSQL path array for #> and jsonb_set. A malformed path is an error,
-- as SQLite's "bad JSON path" is.
CREATE FUNCTION sqlite_json_path(path text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    keys text[] := '{}';
    rest text;
    m text[];
BEGIN
    IF left(path, 1) <> '$' THEN
        RAISE EXCEPTION 'bad JSON path: %', path;
    END IF;
    rest := substr(path, 2);
    WHILE rest <> '' LOOP
        m := NULL;
        IF left(rest, 2) = '."' THEN
            m := regexp_match(rest, '^\."([^"]*)"(.*)$');
        ELSIF left(rest, 1) = '.' THEN
            m := regexp_match(rest, '^\.([^.\[]+)(.*)$');
        ELSIF left(rest, 1) = '[' THEN
            m := regexp_match(rest, '^\[([0-9]+)\](.*)$');
        END IF;
        IF m IS NULL THEN
            RAISE EXCEPTION 'bad JSON path: %', path;
        END IF;
        keys := keys || m[1];
        rest := m[2];
    END LOOP;
    RETURN keys;
END;
$$;

-- SQLite's json_extract(json, path) with one path, as text: a string's
-- value unquoted, a number as written, true/false as 1/0 (SQLite's integers),
-- JSON null or a missing path as NULL, an object or array as its JSON text.
-- Malformed JSON is an error, as in SQLite.
CREATE FUNCTION json_extract(doc text, path text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    v json := doc::json #> sqlite_json_path(path);
BEGIN
    CASE json_typeof(v)
        WHEN 'string' THEN RETURN v #>> '{}';
        WHEN 'number' THEN RETURN v::text;
        WHEN 'boolean' THEN RETURN CASE WHEN v::text = 'true' THEN '1' ELSE '0' END;
        WHEN 'object', 'array' THEN RETURN v::text;
        ELSE RETURN NULL;
    END CASE;
END;
$$;

-- SQLite's json_set(json, path, value) for one text value (stored as a JSON
-- string; NULL as JSON null): replaces or adds the path's last member,
-- making the missing objects on the way as SQLite does; a path through a
-- number, string, true, false or null, or past an array's end, leaves the
-- document as it was.
CREATE FUNCTION json_set(doc text, path text, value text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    keys text[];
    j jsonb;
    v jsonb;
BEGIN
    IF doc IS NULL OR path IS NULL THEN
        RETURN NULL;
    END IF;
    keys := sqlite_json_path(path);
    j := doc::jsonb;
    v := COALESCE(to_jsonb(value), 'null'::jsonb);
    IF cardinality(keys) = 0 THEN
        RETURN v::text;
    END IF;
    FOR i IN 1 .. cardinality(keys) LOOP
        -- The container the i-th key is looked up in: an object gets a
        -- missing member, an array no element past its end.
        CASE jsonb_typeof(j #> keys[1:i - 1])
            WHEN 'object' THEN
                IF i < cardinality(keys) AND j #> keys[1:i] IS NULL THEN
                    j := jsonb_set(j, keys[1:i], '{}'::jsonb, true);
                END IF;
            WHEN 'array' THEN
                IF keys[i] !~ '^[0-9]+$'
                    OR keys[i]::bigint >= jsonb_array_length(j #> keys[1:i - 1]) THEN
                    RETURN j::text;
                END IF;
            ELSE
                RETURN j::text;
        END CASE;
    END LOOP;
    RETURN jsonb_set(j, keys, v, true)::text;
END;
$$;

-- SQLite's randomblob(n): n bytes from the server's strong random source
-- (gen_random_uuid; the 6 leading bytes of a version 4 UUID are random).
CREATE FUNCTION randomblob(n bigint) RETURNS bytea
LANGUAGE sql VOLATILE AS $$
    SELECT substring(COALESCE(string_agg(substring(uuid_send(gen_random_uuid()) FROM 1 FOR 6), ''::bytea), ''::bytea)
        FROM 1 FOR GREATEST(n, 1)::int)
    FROM generate_series(1, (GREATEST(n, 1) + 5) / 6)
$$;

-- SQLite's zeroblob(n): n zero bytes.
CREATE FUNCTION zeroblob(n bigint) RETURNS bytea
LANGUAGE sql IMMUTABLE AS $$
    SELECT decode(repeat('00', GREATEST(n, 0)::int), 'hex')
$$;

-- The current time in whole Unix milliseconds, as the metric-series
-- triggers of 0008 read SQLite's clock: CAST((julianday('now') - 2440587.5)
-- * 86400000 AS INTEGER), truncated, and fixed for the whole statement (in
-- SQLite 'now' is the time of the statement's step; here the time the
-- client's statement started), so every row a statement touches gets one
-- time. strftime('%s', 'now') / 60, the minute bucket, is this / 60000.
CREATE FUNCTION unix_now_ms() RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint
$$;

-- The payload references a JSON document names, as the triggers of
-- 0020_external_payload_lifecycle find them with SQLite's json_tree: every
-- string under a key reference_id that starts with ep_, and every string
-- under a key uri that starts with dw-runtime://external-payloads/v1/ep_
-- (its reference id from the 35th character on), at any depth. A document
-- without the envelope's marker, or one that is not JSON, names none.
CREATE FUNCTION payload_reference_ids(doc text) RETURNS SETOF text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    j json;
BEGIN
    IF doc IS NULL OR strpos(doc, 'external-payload-reference.v1') = 0 THEN
        RETURN;
    END IF;
    BEGIN
        j := doc::json;
    EXCEPTION WHEN others THEN
        RETURN;
    END;
    RETURN QUERY
    WITH RECURSIVE t(key, value) AS (
        SELECT NULL::text, j
        UNION ALL
        SELECT c.key, c.value FROM t CROSS JOIN LATERAL (
            SELECT e.key, e.value FROM json_each(
                CASE WHEN json_typeof(t.value) = 'object' THEN t.value ELSE '{}'::json END) e
            UNION ALL
            SELECT NULL::text, a.value FROM json_array_elements(
                CASE WHEN json_typeof(t.value) = 'array' THEN t.value ELSE '[]'::json END) a
        ) c
    )
    SELECT CASE WHEN t.key = 'uri' THEN substr(t.value #>> '{}', 35) ELSE t.value #>> '{}' END
    FROM t
    WHERE json_typeof(t.value) = 'string'
      AND ((t.key = 'reference_id' AND left(t.value #>> '{}', 3) = 'ep_')
        OR (t.key = 'uri' AND left(t.value #>> '{}', 37) = 'dw-runtime://external-payloads/v1/ep_'));
END;
$$;
