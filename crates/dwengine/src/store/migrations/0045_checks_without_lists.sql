-- Every CHECK constraint that lists three or more allowed values as
-- `column IN ('a', 'b', 'c')` is written as `column = 'a' OR column = 'b'
-- OR column = 'c'`. SQLite codes an IN list of more than two constants as
-- a temporary B-tree that it opens, fills and drops each time the check
-- runs, which is on every INSERT into the table and every UPDATE of the
-- column: a workflow start checked three of them (the run's status, its
-- first task's kind and status), a fifth of the SQL the store writer ran
-- per start (docs/performance.md, "CHECK constraints without IN lists,
-- the run id without RETURNING").
-- The two forms accept exactly the same values (NULL included, which the
-- NOT NULL constraints refuse first), so every existing row satisfies the
-- new text; SQLite cannot alter a CHECK constraint, so this rewrites the
-- stored schema text as 0025_continue_as_new and 0034_activity_cancelled
-- did. Lists of two values compile to two comparisons already and stay.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
SET sql = replace(sql,
    'CHECK (status IN (''running'', ''completed'', ''failed'', ''cancelled'', ''terminated'', ''continued_as_new''))',
    'CHECK (status = ''running'' OR status = ''completed'' OR status = ''failed'' OR status = ''cancelled'' OR status = ''terminated'' OR status = ''continued_as_new'')')
WHERE type = 'table' AND name = 'runs';
UPDATE sqlite_schema
SET sql = replace(replace(sql,
    'CHECK (kind IN (''workflow'', ''activity'', ''timer''))',
    'CHECK (kind = ''workflow'' OR kind = ''activity'' OR kind = ''timer'')'),
    'CHECK (status IN (''ready'', ''leased'', ''done''))',
    'CHECK (status = ''ready'' OR status = ''leased'' OR status = ''done'')')
WHERE type = 'table' AND name = 'dispatch_tasks';
UPDATE sqlite_schema
SET sql = replace(sql,
    'CHECK (status IN (''scheduled'', ''completed'', ''failed'', ''cancelled''))',
    'CHECK (status = ''scheduled'' OR status = ''completed'' OR status = ''failed'' OR status = ''cancelled'')')
WHERE type = 'table' AND name = 'activities';
UPDATE sqlite_schema
SET sql = replace(sql,
    'CHECK (status IN (''pending'', ''fired'', ''cancelled''))',
    'CHECK (status = ''pending'' OR status = ''fired'' OR status = ''cancelled'')')
WHERE type = 'table' AND name = 'timers';
UPDATE sqlite_schema
SET sql = replace(sql,
    'CHECK (status IN (''accepted'', ''completed'', ''rejected''))',
    'CHECK (status = ''accepted'' OR status = ''completed'' OR status = ''rejected'')')
WHERE type = 'table' AND name = 'updates';
UPDATE sqlite_schema
SET sql = replace(sql,
    'CHECK (kind IN (''activity'', ''timer'', ''child''))',
    'CHECK (kind = ''activity'' OR kind = ''timer'' OR kind = ''child'')')
WHERE type = 'table' AND name = 'run_waits';
UPDATE sqlite_schema
SET sql = replace(sql,
    'CHECK (status IN (''open'', ''closed'', ''errored''))',
    'CHECK (status = ''open'' OR status = ''closed'' OR status = ''errored'')')
WHERE type = 'table' AND name = 'workflow_streams';
UPDATE sqlite_schema
SET sql = replace(sql,
    'CHECK (level IN (''endpoint'', ''service'', ''operation''))',
    'CHECK (level = ''endpoint'' OR level = ''service'' OR level = ''operation'')')
WHERE type = 'table' AND name = 'service_catalog';
UPDATE sqlite_schema
SET sql = replace(sql,
    'CHECK (holder IN (''run'', ''stream'', ''schedule''))',
    'CHECK (holder = ''run'' OR holder = ''stream'' OR holder = ''schedule'')')
WHERE type = 'table' AND name = 'external_payload_refs';
UPDATE sqlite_schema
SET sql = replace(sql,
    'CHECK (status IN (''active'', ''closed'', ''failed''))',
    'CHECK (status = ''active'' OR status = ''closed'' OR status = ''failed'')')
WHERE type = 'table' AND name = 'worker_sessions';
UPDATE sqlite_schema
SET sql = replace(sql,
    'CHECK (status IN (''validating'', ''approved'', ''rejected''))',
    'CHECK (status = ''validating'' OR status = ''approved'' OR status = ''rejected'')')
WHERE type = 'table' AND name = 'update_validations';
PRAGMA writable_schema = OFF;
