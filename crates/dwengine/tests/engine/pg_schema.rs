//! The PostgreSQL schema (`dwengine::store::pg_schema`) against the SQLite
//! one, on a real PostgreSQL server named by `DW_TEST_POSTGRES_URL` (`.ci/run`
//! starts one and sets it), each test on a database of its own:
//!
//! - parity: after both migrations, the same tables with the same columns
//!   in the same order (types mapped INTEGER → bigint, TEXT → text, BLOB →
//!   bytea, REAL → double precision; the same NOT NULL and defaults), the same primary
//!   keys, unique constraints and foreign keys, the same indexes (name,
//!   table, columns, unique, partial), the same views, and the same
//!   triggers (name, table, BEFORE/AFTER, event, `UPDATE OF` columns);
//! - trigger semantics: one script of row operations (runs started and
//!   closed, tasks queued, leased, finished and deleted, activities, timers,
//!   children, signals and updates naming stored payloads, schedules,
//!   streams, catalog entries, retention's marker) run on both leaves the
//!   same rows in every table the triggers write, fires every trigger the
//!   PostgreSQL schema has, and both refuse the same writes to history;
//! - the SQLite functions `0000_functions.sql` defines (`json_extract`,
//!   `json_set`, `randomblob`, `zeroblob`) answer as SQLite's do;
//! - a database whose schema is newer than the binary is refused, and a
//!   re-run applies nothing;
//! - nodes migrating one database at once each succeed and apply every
//!   migration exactly once between them;
//! - nodes writing one series at once leave the counters equal to the
//!   rows they count.
//!
//! The PostgreSQL tests are compiled as ignored ("needs PostgreSQL") when
//! `DW_TEST_POSTGRES_URL` was not set at build time (dwengine's build
//! script turns on `dw_test_postgres`), so `cargo test` lists them as
//! ignored rather than passed; the SQLite halves still run
//! (`the_sqlite_halves_run_without_postgres`), and a CI build without the
//! variable fails (`ci_runs_the_postgres_tests`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Barrier};

use dwengine::store::pg_schema::{self, MigrateError};
use dwengine::store::{db, describe, leases};
use dwengine::store::{Store, StoreConfig};
use postgres::{Client, NoTls};

/// What a PostgreSQL test prints when it is run (`--ignored`) without a
/// server to run against.
const POSTGRES_SKIPPED: &str = "NOTICE: DW_TEST_POSTGRES_URL is not set: the PostgreSQL halves of the engine's pg_schema tests were SKIPPED (only SQLite ran); `.ci/run` starts a PostgreSQL cluster and sets it";

/// The server's URL for a test's PostgreSQL half, or `None` when it does
/// not run: `with_postgres` false (the SQLite halves alone, see
/// [`the_sqlite_halves_run_without_postgres`]), or the variable unset in a
/// binary built without it (a test run with `--ignored`; one NOTICE). A
/// binary built with the variable (`dw_test_postgres`, dwengine's build
/// script) needs it at run time too, and CI needs it always.
fn postgres_url(with_postgres: bool) -> Option<String> {
    if !with_postgres {
        return None;
    }
    match std::env::var("DW_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            if cfg!(dw_test_postgres) {
                panic!(
                    "the PostgreSQL tests were built to run (DW_TEST_POSTGRES_URL was set when this \
                     test binary was compiled) but DW_TEST_POSTGRES_URL is not set now"
                );
            }
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set but DW_TEST_POSTGRES_URL is not: the PostgreSQL schema tests must run in CI \
                 (.ci/run starts a cluster and exports it)"
            );
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| {
                use std::io::Write;
                let _ = writeln!(std::io::stderr().lock(), "\n{POSTGRES_SKIPPED}\n");
            });
            None
        }
    }
}

/// A database made for one test, dropped (with its connections) when the
/// test ends, pass or fail.
struct FreshDatabase {
    admin: postgres::Config,
    config: postgres::Config,
    name: String,
}

impl FreshDatabase {
    fn create(url: &str) -> FreshDatabase {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let admin: postgres::Config = url
            .parse()
            .unwrap_or_else(|e| panic!("DW_TEST_POSTGRES_URL={url} is not a PostgreSQL URL: {e}"));
        let name = format!(
            "dw_pg_schema_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut client = admin
            .connect(NoTls)
            .unwrap_or_else(|e| panic!("DW_TEST_POSTGRES_URL is set but {url} is unusable: {e}"));
        // One statement each: neither may run in a transaction block,
        // which a multi-statement query is.
        client
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .expect("drop a leftover test database");
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create the test database");
        let mut config = admin.clone();
        config.dbname(&name);
        FreshDatabase {
            admin,
            config,
            name,
        }
    }

    fn connect(&self) -> Client {
        self.config
            .connect(NoTls)
            .expect("connect to the test database")
    }
}

impl Drop for FreshDatabase {
    fn drop(&mut self) {
        if let Ok(mut client) = self.admin.connect(NoTls) {
            let _ = client.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// A fresh database migrated to the newest schema and a session on it;
/// `None` when PostgreSQL is not tested (`with_postgres`: as
/// [`postgres_url`] takes it).
fn migrated_database(with_postgres: bool) -> Option<(FreshDatabase, Client)> {
    let url = postgres_url(with_postgres)?;
    let db = FreshDatabase::create(&url);
    let mut client = db.connect();
    pg_schema::migrate(&mut client).expect("migrate PostgreSQL");
    Some((db, client))
}

/// A file store migrated by the store's own migration (as `Store::open`
/// does), opened again as a plain connection to read what it holds.
fn sqlite_database() -> (tempfile::TempDir, rusqlite::Connection) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store.db");
    drop(Store::open(&path, StoreConfig::default()).expect("open and migrate the SQLite store"));
    let conn = rusqlite::Connection::open(&path).expect("reopen the store file");
    conn.pragma_update(None, "foreign_keys", true)
        .expect("foreign keys on, as the store has them");
    (dir, conn)
}

/// One table: its columns in order (name, type as PostgreSQL names it, not
/// null, default as written), its primary key, its unique constraints and its foreign keys
/// (columns, referenced table, referenced columns).
#[derive(Debug, PartialEq, Eq)]
struct Table {
    columns: Vec<(String, String, bool, Option<String>)>,
    primary_key: Vec<String>,
    unique: BTreeSet<Vec<String>>,
    foreign_keys: BTreeSet<(Vec<String>, String, Vec<String>)>,
    /// Each CHECK constraint as the columns it names and the string
    /// literals it holds (the allowed statuses), both sorted.
    checks: BTreeSet<(Vec<String>, Vec<String>)>,
}

/// What a schema holds, in the terms both databases share.
#[derive(Debug, PartialEq, Eq)]
struct Schema {
    tables: BTreeMap<String, Table>,
    /// name → (table, unique, columns, partial)
    indexes: BTreeMap<String, (String, bool, Vec<String>, bool)>,
    views: BTreeSet<String>,
    /// name → (table, timing, event, UPDATE OF columns)
    triggers: BTreeMap<String, (String, String, String, Vec<String>)>,
}

/// The string literals of an SQL expression, sorted ('it''s' as it's).
fn quoted_literals(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\'' {
            continue;
        }
        let mut literal = String::new();
        while let Some(c) = chars.next() {
            if c == '\'' {
                if chars.peek() == Some(&'\'') {
                    chars.next();
                    literal.push('\'');
                    continue;
                }
                break;
            }
            literal.push(c);
        }
        out.push(literal);
    }
    out.sort();
    out
}

/// The CHECK constraints of a SQLite table's stored definition: for each,
/// the table's columns it names (whole words) and its string literals.
fn sqlite_checks(
    table_sql: &str,
    columns: &[(String, String, bool, i64)],
) -> BTreeSet<(Vec<String>, Vec<String>)> {
    let mut checks = BTreeSet::new();
    let upper = table_sql.to_ascii_uppercase();
    let mut from = 0;
    while let Some(at) = upper[from..].find("CHECK") {
        // The keyword, not a name that starts with it (`checkpoint_id`).
        let word = |i: Option<u8>| i.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_');
        let start = from + at;
        let before = start.checked_sub(1).map(|i| upper.as_bytes()[i]);
        let after = upper.as_bytes().get(start + "CHECK".len()).copied();
        if word(before) || word(after) {
            from = start + "CHECK".len();
            continue;
        }
        let open = start + upper[start..].find('(').expect("CHECK (");
        let mut depth = 0;
        let mut close = open;
        for (i, c) in table_sql[open..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        close = open + i;
                        break;
                    }
                }
                _ => {}
            }
        }
        let expression = &table_sql[open + 1..close];
        let literals = quoted_literals(expression);
        let words: BTreeSet<&str> = expression
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .collect();
        let mut named: Vec<String> = columns
            .iter()
            .map(|(name, ..)| name.clone())
            .filter(|name| words.contains(name.as_str()))
            .collect();
        named.sort();
        checks.insert((named, literals));
        from = close;
    }
    checks
}

/// The PostgreSQL name of a SQLite declared type, as the migrations map them.
fn mapped_type(sqlite: &str) -> String {
    match sqlite.to_ascii_uppercase().as_str() {
        "INTEGER" => "bigint",
        "TEXT" => "text",
        "BLOB" => "bytea",
        "REAL" => "double precision",
        "BOOLEAN" => "boolean",
        other => panic!(
            "the SQLite schema declares a type the PostgreSQL twin has no mapping for: {other}"
        ),
    }
    .to_owned()
}

fn sqlite_schema(conn: &rusqlite::Connection) -> Schema {
    let names = |sql: &str| -> Vec<(String, String, Option<String>)> {
        let mut stmt = conn.prepare(sql).unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let mut tables = BTreeMap::new();
    for (table, _, table_sql) in names(
        "SELECT name, tbl_name, sql FROM sqlite_schema WHERE type = 'table' \
         AND name NOT LIKE 'sqlite_%' ORDER BY name",
    ) {
        let mut stmt = conn
            .prepare(
                "SELECT name, type, \"notnull\", pk FROM pragma_table_xinfo(?1) \
                 WHERE hidden != 1 ORDER BY cid",
            )
            .unwrap();
        let rows: Vec<(String, String, bool, i64)> = stmt
            .query_map([&table], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let mut pk: Vec<(i64, String)> = rows
            .iter()
            .filter(|row| row.3 > 0)
            .map(|row| (row.3, row.0.clone()))
            .collect();
        pk.sort();
        let mut stmt = conn
            .prepare("SELECT dflt_value FROM pragma_table_xinfo(?1) WHERE hidden != 1 ORDER BY cid")
            .unwrap();
        let defaults: Vec<Option<String>> = stmt
            .query_map([&table], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let columns = rows
            .iter()
            .zip(defaults)
            // A primary key column is never NULL on PostgreSQL; on SQLite
            // an INTEGER PRIMARY KEY is the rowid (never NULL either).
            .map(|((name, ty, not_null, pk), default)| {
                (name.clone(), mapped_type(ty), *not_null || *pk > 0, default)
            })
            .collect();
        let mut unique = BTreeSet::new();
        let mut stmt = conn
            .prepare("SELECT name FROM pragma_index_list(?1) WHERE origin = 'u'")
            .unwrap();
        let constraint_indexes: Vec<String> = stmt
            .query_map([&table], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        for index in constraint_indexes {
            unique.insert(sqlite_index_columns(conn, &index));
        }
        let mut stmt = conn
            .prepare("SELECT id, \"from\", \"table\", \"to\" FROM pragma_foreign_key_list(?1) ORDER BY id, seq")
            .unwrap();
        let mut keys: BTreeMap<i64, (Vec<String>, String, Vec<String>)> = BTreeMap::new();
        for row in stmt
            .query_map([&table], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })
            .unwrap()
        {
            let (id, from, to_table, to) = row.unwrap();
            let key = keys
                .entry(id)
                .or_insert_with(|| (Vec::new(), to_table, Vec::new()));
            key.0.push(from);
            key.2.push(to);
        }
        tables.insert(
            table,
            Table {
                columns,
                primary_key: pk.into_iter().map(|(_, name)| name).collect(),
                unique,
                foreign_keys: keys.into_values().collect(),
                checks: sqlite_checks(&table_sql.unwrap_or_default(), &rows),
            },
        );
    }
    let mut indexes = BTreeMap::new();
    for (name, table, sql) in names(
        "SELECT name, tbl_name, sql FROM sqlite_schema WHERE type = 'index' AND sql IS NOT NULL",
    ) {
        let sql = sql.unwrap_or_default();
        let unique = sql.to_ascii_uppercase().starts_with("CREATE UNIQUE");
        let partial = sql.to_ascii_uppercase().contains(" WHERE ");
        let columns = sqlite_index_columns(conn, &name);
        indexes.insert(name, (table, unique, columns, partial));
    }
    let views = names("SELECT name, tbl_name, sql FROM sqlite_schema WHERE type = 'view'")
        .into_iter()
        .map(|(name, _, _)| name)
        .collect();
    let mut triggers = BTreeMap::new();
    for (name, table, sql) in
        names("SELECT name, tbl_name, sql FROM sqlite_schema WHERE type = 'trigger'")
    {
        let sql = sql.unwrap_or_default().replace(['\n', '\t'], " ");
        let upper = sql.to_ascii_uppercase();
        let head = &upper[..upper.find(" ON ").expect("a trigger names its table")];
        let timing = if head.contains(" BEFORE ") {
            "BEFORE"
        } else {
            "AFTER"
        };
        let event = ["INSERT", "UPDATE", "DELETE"]
            .into_iter()
            .find(|event| head.contains(&format!(" {event}")))
            .expect("a trigger names its event");
        let of = head
            .split_once(" UPDATE OF ")
            .map(|(_, columns)| {
                let mut columns: Vec<String> = columns
                    .split(',')
                    .map(|c| c.trim().to_ascii_lowercase())
                    .collect();
                columns.sort();
                columns
            })
            .unwrap_or_default();
        triggers.insert(name, (table, timing.to_owned(), event.to_owned(), of));
    }
    Schema {
        tables,
        indexes,
        views,
        triggers,
    }
}

fn sqlite_index_columns(conn: &rusqlite::Connection, index: &str) -> Vec<String> {
    let mut stmt = conn
        .prepare("SELECT name FROM pragma_index_info(?1) ORDER BY seqno")
        .unwrap();
    stmt.query_map([index], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn postgres_schema(client: &mut Client) -> Schema {
    let mut tables = BTreeMap::new();
    let table_names: Vec<String> = client
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' \
             AND table_name <> 'schema_migrations' ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    for table in table_names {
        let columns = client
            .query(
                "SELECT column_name::text, data_type::text, is_nullable = 'NO', column_default::text \
                 FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
                &[&table],
            )
            .unwrap()
            .iter()
            .map(|row| {
                // '[]'::text as SQLite writes it, '[]' (the type is the column's).
                let default: Option<String> = row.get(3);
                let default = default.map(|d| {
                    d.trim_end_matches("::text")
                        .trim_end_matches("::bigint")
                        .to_owned()
                });
                (row.get(0), row.get(1), row.get(2), default)
            })
            .collect();
        let constraint = |kind: &str, client: &mut Client| -> Vec<Vec<String>> {
            client
                .query(
                    "SELECT ARRAY(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY k(n, i) \
                         JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.i) \
                     FROM pg_constraint c \
                     WHERE c.conrelid = (quote_ident(current_schema()) || '.' || quote_ident($1))::regclass \
                       AND c.contype = $2::text::\"char\"",
                    &[&table, &kind],
                )
                .unwrap()
                .iter()
                .map(|row| row.get(0))
                .collect()
        };
        let checks = client
            .query(
                "SELECT ARRAY(SELECT a.attname::text FROM unnest(c.conkey) k(n) \
                     JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY 1), \
                   pg_get_constraintdef(c.oid) \
                 FROM pg_constraint c \
                 WHERE c.conrelid = (quote_ident(current_schema()) || '.' || quote_ident($1))::regclass \
                   AND c.contype = 'c'",
                &[&table],
            )
            .unwrap()
            .iter()
            .map(|row| (row.get(0), quoted_literals(row.get(1))))
            .collect();
        let primary_key = constraint("p", client).pop().unwrap_or_default();
        let unique = constraint("u", client).into_iter().collect();
        let foreign_keys = client
            .query(
                "SELECT ARRAY(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY k(n, i) \
                     JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.i), \
                   r.relname::text, \
                   ARRAY(SELECT a.attname::text FROM unnest(c.confkey) WITH ORDINALITY k(n, i) \
                     JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n ORDER BY k.i) \
                 FROM pg_constraint c JOIN pg_class r ON r.oid = c.confrelid \
                 WHERE c.conrelid = (quote_ident(current_schema()) || '.' || quote_ident($1))::regclass \
                   AND c.contype = 'f'",
                &[&table],
            )
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect();
        tables.insert(
            table,
            Table {
                columns,
                primary_key,
                unique,
                foreign_keys,
                checks,
            },
        );
    }
    // Indexes of their own (not those behind a primary key or UNIQUE constraint).
    let indexes = client
        .query(
            "SELECT i.relname::text, t.relname::text, x.indisunique, \
                ARRAY(SELECT a.attname::text FROM unnest(x.indkey::int2[]) WITH ORDINALITY k(n, o) \
                    JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.n ORDER BY k.o), \
                x.indpred IS NOT NULL \
             FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid \
             WHERE t.relnamespace = to_regnamespace(current_schema()) \
               AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid) \
               AND t.relname <> 'schema_migrations'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| {
            (
                row.get::<_, String>(0),
                (row.get(1), row.get(2), row.get(3), row.get(4)),
            )
        })
        .collect();
    let views = client
        .query(
            "SELECT table_name::text FROM information_schema.views WHERE table_schema = current_schema()",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let triggers = client
        .query(
            "SELECT t.tgname::text, c.relname::text, \
                CASE WHEN t.tgtype & 2 <> 0 THEN 'BEFORE' ELSE 'AFTER' END, \
                CASE WHEN t.tgtype & 4 <> 0 THEN 'INSERT' WHEN t.tgtype & 8 <> 0 THEN 'DELETE' ELSE 'UPDATE' END, \
                ARRAY(SELECT a.attname::text FROM unnest(t.tgattr::int2[]) k(n) \
                    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.n ORDER BY 1), \
                t.tgtype & 1 <> 0 \
             FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid \
             WHERE NOT t.tgisinternal AND c.relnamespace = to_regnamespace(current_schema())",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| {
            let name: String = row.get(0);
            // SQLite has row triggers only.
            assert!(row.get::<_, bool>(5), "trigger {name} is not FOR EACH ROW");
            (name, (row.get(1), row.get(2), row.get(3), row.get(4)))
        })
        .collect();
    Schema {
        tables,
        indexes,
        views,
        triggers,
    }
}

/// Indexes partial on SQLite and whole on PostgreSQL, each for its planner.
const SQLITE_ONLY_PARTIAL: &[&str] = &["dispatch_ready"];

/// Indexes PostgreSQL ends with the table's `id`, which every SQLite index
/// of a rowid table ends with unnamed (migration 0055: the claim's order).
const POSTGRES_NAMES_THE_ROWID: &[&str] = &["dispatch_ready"];

/// Names each difference between two maps, so a failure says what to fix.
fn differences<K: Ord + std::fmt::Debug, V: PartialEq + std::fmt::Debug>(
    what: &str,
    sqlite: &BTreeMap<K, V>,
    postgres: &BTreeMap<K, V>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (key, value) in sqlite {
        match postgres.get(key) {
            None => out.push(format!("{what} {key:?} is missing on PostgreSQL")),
            Some(other) if other != value => out.push(format!(
                "{what} {key:?} differs:\n  SQLite:     {value:?}\n  PostgreSQL: {other:?}"
            )),
            Some(_) => {}
        }
    }
    for key in postgres.keys().filter(|key| !sqlite.contains_key(key)) {
        out.push(format!("{what} {key:?} is on PostgreSQL only"));
    }
    out
}

#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn postgres_schema_has_the_sqlite_schemas_tables_columns_indexes_and_triggers() {
    postgres_schema_has_the_sqlite_schemas_tables_columns_indexes_and_triggers_on(true);
}

fn postgres_schema_has_the_sqlite_schemas_tables_columns_indexes_and_triggers_on(
    with_postgres: bool,
) {
    let (_dir, conn) = sqlite_database();
    let sqlite = sqlite_schema(&conn);
    // The SQLite half holds what the comparison needs, whatever the server.
    assert!(
        sqlite.tables.contains_key("runs"),
        "{:?}",
        sqlite.tables.keys()
    );
    assert!(sqlite.triggers.len() >= 40, "{:?}", sqlite.triggers.keys());
    let run_checks = &sqlite.tables["runs"].checks;
    assert!(
        run_checks
            .iter()
            .any(|(columns, literals)| columns == &["status"]
                && literals.iter().any(|l| l == "continued_as_new")),
        "{run_checks:?}"
    );
    let Some(url) = postgres_url(with_postgres) else {
        return;
    };
    let db = FreshDatabase::create(&url);
    let mut client = db.connect();
    let applied = pg_schema::migrate(&mut client).expect("migrate PostgreSQL");
    assert_eq!(applied, pg_schema::SCHEMA_VERSION as usize);
    let mut postgres = postgres_schema(&mut client);
    // The one index partial on SQLite only (migrations 0051 and 0052):
    // PostgreSQL's planner walked the partial `dispatch_ready` for one
    // run's tasks, so PostgreSQL keeps it whole. Same table and columns.
    for name in SQLITE_ONLY_PARTIAL {
        let index = postgres.indexes.get_mut(*name).expect("the index exists");
        assert!(
            !index.3,
            "{name} is partial on PostgreSQL again: drop it from the list"
        );
        index.3 = true;
    }
    for name in POSTGRES_NAMES_THE_ROWID {
        let index = postgres.indexes.get_mut(*name).expect("the index exists");
        assert_eq!(
            index.2.pop().as_deref(),
            Some("id"),
            "{name} no longer ends with id on PostgreSQL: drop it from the list"
        );
    }

    let mut problems = differences("table", &sqlite.tables, &postgres.tables);
    problems.extend(differences("index", &sqlite.indexes, &postgres.indexes));
    problems.extend(differences("trigger", &sqlite.triggers, &postgres.triggers));
    if sqlite.views != postgres.views {
        problems.push(format!(
            "views differ: SQLite {:?}, PostgreSQL {:?}",
            sqlite.views, postgres.views
        ));
    }
    assert!(
        problems.is_empty(),
        "the PostgreSQL migrations (crates/dwengine/src/store/migrations/postgres) do not build \
         the SQLite schema:\n{}",
        problems.join("\n")
    );
}

/// Row operations that fire every kind of trigger the schema has, in a
/// form both databases run as written (ids are assigned 1, 2, … on both).
const SCRIPT: &[&str] = &[
    "INSERT INTO namespaces (name, created_at_ms) VALUES ('other', 5)",
    "INSERT INTO external_payloads (reference_id, namespace, codec, size_bytes, sha256, data, created_at_ms, last_uploaded_at_ms) \
     VALUES ('ep_one', 'default', 'json', 3, 'aa', zeroblob(3), 10, 10)",
    "INSERT INTO external_payloads (reference_id, namespace, codec, size_bytes, sha256, data, created_at_ms, last_uploaded_at_ms) \
     VALUES ('ep_two', 'default', 'json', 5, 'bb', zeroblob(5), 11, 11)",
    "INSERT INTO external_payloads (reference_id, namespace, codec, size_bytes, sha256, data, created_at_ms, last_uploaded_at_ms) \
     VALUES ('ep_elsewhere', 'other', 'json', 7, 'cc', zeroblob(7), 12, 12)",
    // Runs: 1 and 2 in one series, 2 a child of 1, 3 in another namespace.
    "INSERT INTO runs (workflow_id, workflow_type, namespace, task_queue, status, origin, memo, search_attributes, created_at_ms, build_id) \
     VALUES ('order-1', 'Order', 'default', 'orders', 'running', 'v2', '{}', '{}', 1000, 'build-a')",
    "INSERT INTO runs (workflow_id, workflow_type, namespace, task_queue, status, origin, memo, search_attributes, created_at_ms, parent_run_id) \
     VALUES ('order-2', 'Order', 'default', 'orders', 'running', 'v2', '{}', '{}', 2000, 1)",
    "INSERT INTO runs (workflow_id, workflow_type, namespace, task_queue, status, origin, memo, search_attributes, created_at_ms) \
     VALUES ('ship-1', 'Ship', 'other', 'ships', 'running', 'v2', '{}', '{}', 3000)",
    "INSERT INTO children (parent_run_id, child_run_id, status) VALUES (1, 2, 'open')",
    // History naming payloads in both envelope forms, one of another namespace.
    "INSERT INTO history_events (run_id, sequence, event_type, payload, recorded_at_ms) \
     VALUES (1, 1, 'WorkflowStarted', '{\"input\":{\"codec\":\"durable-workflow.v2.runtime-external-payload-reference.v1\",\"reference_id\":\"ep_one\"}}', 1000)",
    "INSERT INTO history_events (run_id, sequence, event_type, payload, recorded_at_ms) \
     VALUES (1, 2, 'ActivityScheduled', '[{\"kind\":\"durable-workflow.v2.external-payload-reference.v1\",\"uri\":\"dw-runtime://external-payloads/v1/ep_two\"},{\"reference_id\":\"ep_elsewhere\"}]', 1001)",
    "INSERT INTO history_events (run_id, sequence, event_type, payload) VALUES (2, 1, 'WorkflowStarted', 'not json external-payload-reference.v1')",
    "INSERT INTO history_events (run_id, sequence, event_type, payload) VALUES (3, 1, 'WorkflowStarted', '{\"reference_id\":\"ep_elsewhere\",\"m\":\"external-payload-reference.v1\"}')",
    // Activities and their tasks; the tasks' created_at_ms is in the
    // future, so each closing latency is 0 (every bucket) on both clocks.
    "INSERT INTO activities (run_id, activity_type, arguments, status) VALUES (1, 'Charge', '{\"reference_id\":\"ep_two\",\"m\":\"external-payload-reference.v1\"}', 'scheduled')",
    "INSERT INTO activities (run_id, activity_type, arguments, status) VALUES (1, 'Email', '[]', 'scheduled')",
    "INSERT INTO activities (run_id, activity_type, arguments, status) VALUES (3, 'Load', '[]', 'scheduled')",
    "INSERT INTO dispatch_tasks (kind, run_id, item_id, namespace, task_queue, status, due_at_ms, created_at_ms) \
     VALUES ('workflow', 1, NULL, 'default', 'orders', 'ready', 0, 1000)",
    "INSERT INTO dispatch_tasks (kind, run_id, item_id, namespace, task_queue, status, due_at_ms, created_at_ms) \
     VALUES ('activity', 1, 1, 'default', 'charges', 'ready', 0, 99999999999999)",
    "INSERT INTO dispatch_tasks (kind, run_id, item_id, namespace, task_queue, status, due_at_ms, created_at_ms) \
     VALUES ('activity', 1, 2, 'default', 'orders', 'ready', 0, 99999999999999)",
    "INSERT INTO dispatch_tasks (kind, run_id, item_id, namespace, task_queue, status, due_at_ms, created_at_ms) \
     VALUES ('activity', 3, 3, 'other', 'ships', 'ready', 0, 99999999999999)",
    "INSERT INTO timers (run_id, delay_ms, status) VALUES (1, 500, 'pending')",
    "INSERT INTO timers (run_id, delay_ms, status) VALUES (2, 700, 'pending')",
    "INSERT INTO dispatch_tasks (kind, run_id, item_id, namespace, task_queue, status, due_at_ms, created_at_ms) \
     VALUES ('timer', 1, 1, 'default', 'orders', 'ready', 1500, 1000)",
    // Leases, completions, a failure, a requeue, a task deleted while ready.
    "UPDATE dispatch_tasks SET status = 'leased', lease_owner = 'w1' WHERE id = 1",
    "UPDATE dispatch_tasks SET status = 'done' WHERE id = 1",
    "UPDATE dispatch_tasks SET status = 'leased' WHERE id IN (2, 3, 4)",
    "UPDATE dispatch_tasks SET status = 'ready' WHERE id = 4",
    "UPDATE activities SET status = 'completed', result = '{\"reference_id\":\"ep_one\",\"m\":\"external-payload-reference.v1\"}' WHERE id = 1",
    "UPDATE dispatch_tasks SET status = 'done' WHERE id = 2",
    "UPDATE activities SET status = 'failed' WHERE id = 2",
    "UPDATE dispatch_tasks SET status = 'done' WHERE id = 3",
    "DELETE FROM dispatch_tasks WHERE id = 4",
    "UPDATE timers SET status = 'fired' WHERE id = 1",
    "UPDATE dispatch_tasks SET status = 'done' WHERE id = 5",
    "UPDATE timers SET status = 'cancelled' WHERE id = 2",
    // Signals and updates naming payloads.
    "INSERT INTO signals (run_id, name, payload, status) VALUES (1, 'go', '{\"reference_id\":\"ep_two\",\"m\":\"external-payload-reference.v1\"}', 'received')",
    "INSERT INTO updates (run_id, name, payload, status) VALUES (2, 'set', '{\"reference_id\":\"ep_one\",\"m\":\"external-payload-reference.v1\"}', 'accepted')",
    "UPDATE updates SET status = 'completed', result = '{\"uri\":\"dw-runtime://external-payloads/v1/ep_two\",\"m\":\"external-payload-reference.v1\"}' WHERE id = 1",
    // Runs close: completed after 1.5 s, failed after 50 ms, continued
    // without a closing time, and one never closing.
    "UPDATE children SET status = 'closed', closed_status = 'failed' WHERE id = 1",
    "UPDATE runs SET status = 'failed', closed_at_ms = 2050 WHERE id = 2",
    "UPDATE runs SET status = 'completed', closed_at_ms = 2500, history_length = 2 WHERE id = 1",
    "UPDATE runs SET status = 'continued_as_new' WHERE id = 3",
    "UPDATE runs SET status = 'completed' WHERE id = 3",
    "INSERT INTO runs (workflow_id, workflow_type, namespace, task_queue, status, origin, memo, search_attributes, created_at_ms, continued_from_run_id) \
     VALUES ('ship-1', 'Ship', 'other', 'ships', 'running', 'v2', '{}', '{}', 4000, 3)",
    // Schedules, catalog entries and streams: the durable counts and the
    // references a definition or a stream item holds.
    "INSERT INTO schedules (namespace, schedule_id, definition, status, created_at_ms, updated_at_ms) \
     VALUES ('default', 's1', '{\"input\":{\"reference_id\":\"ep_one\"},\"m\":\"external-payload-reference.v1\"}', 'active', 1, 1)",
    "INSERT INTO schedules (namespace, schedule_id, definition, status, created_at_ms, updated_at_ms) \
     VALUES ('default', 's2', '{}', 'paused', 1, 1)",
    "UPDATE schedules SET definition = '{\"input\":{\"reference_id\":\"ep_two\"},\"m\":\"external-payload-reference.v1\"}' WHERE id = 1",
    "UPDATE schedules SET definition = '{}' WHERE id = 2",
    "DELETE FROM schedules WHERE id = 2",
    "INSERT INTO service_catalog (namespace, level, parent_id, name, document, created_at_ms, updated_at_ms) \
     VALUES ('default', 'endpoint', 0, 'billing', '{}', 1, 1)",
    "INSERT INTO service_catalog (namespace, level, parent_id, name, document, created_at_ms, updated_at_ms) \
     VALUES ('other', 'endpoint', 0, 'shipping', '{}', 1, 1)",
    "DELETE FROM service_catalog WHERE id = 2",
    "INSERT INTO workflow_streams (run_id, namespace, workflow_id, name, status, retention_seconds, opened_at_ms) \
     VALUES (1, 'default', 'order-1', 'progress', 'open', 60, 1)",
    "INSERT INTO workflow_streams (run_id, namespace, workflow_id, name, status, retention_seconds, opened_at_ms, total_items) \
     VALUES (2, 'default', 'order-2', 'progress', 'open', 60, 1, 4)",
    "INSERT INTO workflow_stream_items (stream_id, item_offset, payload, origin, emitted_at_ms) \
     VALUES (1, 0, '{\"reference_id\":\"ep_one\",\"m\":\"external-payload-reference.v1\"}', 'workflow', 1)",
    "UPDATE workflow_streams SET total_items = 1 WHERE id = 1",
    "UPDATE workflow_streams SET total_items = 3, status = 'closed' WHERE id = 1",
    "UPDATE workflow_streams SET total_items = 3 WHERE id = 1",
    "DELETE FROM workflow_streams WHERE id = 2",
    // SQLite hands a new row the largest id plus one (2 here, the id just
    // deleted), PostgreSQL's identity the next never used (3): rows made
    // after a delete are named by their keys, not their ids.
    "INSERT INTO workflow_streams (run_id, namespace, workflow_id, name, status, retention_seconds, opened_at_ms) \
     VALUES (3, 'other', 'ship-1', 'progress', 'open', 60, 1)",
    "DELETE FROM workflow_streams WHERE run_id = 3 AND name = 'progress'",
    // An upload nothing names is deleted (usage falls), a reference released.
    "INSERT INTO external_payloads (reference_id, namespace, codec, size_bytes, sha256, data, created_at_ms, last_uploaded_at_ms) \
     VALUES ('ep_orphan', 'default', 'json', 11, 'dd', zeroblob(11), 13, 13)",
    "DELETE FROM external_payloads WHERE reference_id = 'ep_orphan'",
    "DELETE FROM workflow_stream_items WHERE stream_id = 1",
    "DELETE FROM workflow_streams WHERE id = 1",
    // Retention marks run 2; its history may then go, and no projection
    // of it is written again.
    "UPDATE runs SET details_pruned_at = 9000 WHERE id = 2",
    "DELETE FROM history_events WHERE run_id = 2",
    "INSERT INTO timers (run_id, delay_ms, status) VALUES (2, 900, 'pending')",
    "INSERT INTO history_events (run_id, sequence, event_type, payload) VALUES (2, 2, 'TimerStarted', '{}')",
    "UPDATE runs SET history_length = 5 WHERE id = 2",
];

/// Writes history refuses on both (the append-only guard): run 1 is never
/// marked by retention.
const REFUSED: &[&str] = &[
    "UPDATE history_events SET event_type = 'Changed' WHERE run_id = 1 AND sequence = 1",
    "DELETE FROM history_events WHERE run_id = 1",
];

/// Every table a trigger writes (or guards), ordered by its key; blobs left
/// out (external_payloads is compared without its data).
const COMPARED: &[(&str, &str, &str)] = &[
    ("workflow_run_series", "*", "namespace, task_queue, workflow_type"),
    ("activity_execution_series", "*", "namespace, task_queue, workflow_type, activity_type"),
    // The minute buckets follow the wall clock, which a minute boundary
    // between the two runs could move: compared below for sameness of form.
    (
        "task_queue_state",
        "namespace, task_queue, workflow_ready, workflow_leased, activity_ready, activity_leased, added_recent + added_before, dispatched_recent + dispatched_before",
        "namespace, task_queue",
    ),
    ("run_summaries", "*", "run_id"),
    ("run_timeline_entries", "*", "run_id, sequence"),
    ("run_timer_entries", "*", "timer_id"),
    ("run_waits", "*", "run_id, kind, item_id"),
    ("run_lineage_entries", "*", "run_id"),
    ("history_events", "*", "run_id, sequence"),
    ("dispatch_tasks", "id, kind, status, build_id", "id"),
    ("external_payload_usage", "*", "namespace"),
    ("external_payloads", "reference_id, namespace, size_bytes, ref_count, last_uploaded_at_ms", "reference_id"),
    ("external_payload_refs", "*", "holder, holder_id, reference_id"),
    ("namespace_durable_counts", "*", "namespace, resource"),
    ("runs", "id, status, closed_at_ms, continued_from_run_id, details_pruned_at", "id"),
];

/// `SELECT` of `columns` (or every column) of `table`, each cast to text,
/// ordered by `order`: the same statement on both databases.
fn text_select(columns: &[String], table: &str, order: &str) -> String {
    let list: Vec<String> = columns
        .iter()
        .map(|c| format!("CAST({c} AS TEXT)"))
        .collect();
    format!("SELECT {} FROM {table} ORDER BY {order}", list.join(", "))
}

fn sqlite_columns(conn: &rusqlite::Connection, table: &str) -> Vec<String> {
    let mut stmt = conn
        .prepare("SELECT name FROM pragma_table_info(?1) ORDER BY cid")
        .unwrap();
    stmt.query_map([table], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn columns_of(conn: &rusqlite::Connection, table: &str, columns: &str) -> Vec<String> {
    if columns == "*" {
        sqlite_columns(conn, table)
    } else {
        columns.split(", ").map(str::to_owned).collect()
    }
}

type Rows = Vec<Vec<Option<String>>>;

fn sqlite_rows(conn: &rusqlite::Connection, sql: &str) -> Rows {
    let mut stmt = conn.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let n = stmt.column_count();
    stmt.query_map([], |row| (0..n).map(|i| row.get(i)).collect())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn postgres_rows(client: &mut Client, sql: &str) -> Rows {
    client
        .query(sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|row| (0..row.len()).map(|i| row.get(i)).collect())
        .collect()
}

#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn the_same_row_operations_leave_the_same_counters_and_projections_on_both() {
    the_same_row_operations_leave_the_same_counters_and_projections_on_both_on(true);
}

fn the_same_row_operations_leave_the_same_counters_and_projections_on_both_on(with_postgres: bool) {
    let (_dir, conn) = sqlite_database();
    for sql in SCRIPT {
        conn.execute_batch(sql)
            .unwrap_or_else(|e| panic!("SQLite refused {sql}: {e}"));
    }
    for refused in REFUSED {
        let error = conn.execute_batch(refused).expect_err(refused);
        assert!(
            error.to_string().contains("history is append-only"),
            "{error}"
        );
    }
    let sqlite: Vec<Rows> = COMPARED
        .iter()
        .map(|(table, columns, order)| {
            sqlite_rows(
                &conn,
                &text_select(&columns_of(&conn, table, columns), table, order),
            )
        })
        .collect();
    // The script reaches what it is for on SQLite already: a series closed
    // three ways, references held and counted, durable counts kept.
    let series = &sqlite[0];
    assert_eq!(series.len(), 2, "{series:?}");
    let tables: Vec<&str> = COMPARED.iter().map(|(table, _, _)| *table).collect();
    let refs = &sqlite[tables
        .iter()
        .position(|t| *t == "external_payload_refs")
        .unwrap()];
    assert!(refs.len() >= 3, "{refs:?}");
    let Some((_db, mut client)) = migrated_database(with_postgres) else {
        return;
    };
    // The script in one transaction, so that PostgreSQL's count of the
    // trigger functions it called (pg_stat_xact_user_functions, kept when
    // track_functions is on: a superuser's setting, which CI's cluster
    // grants) shows every trigger fired: a trigger added to the schema
    // without a statement here that fires it fails this test.
    client.batch_execute("SET track_functions = 'pl'").expect(
        "SET track_functions (the test database's user must be a superuser, as in .ci/run)",
    );
    let mut tx = client.transaction().unwrap();
    for sql in SCRIPT {
        tx.batch_execute(sql)
            .unwrap_or_else(|e| panic!("PostgreSQL refused {sql}: {e}"));
    }
    // Deferred triggers (a queue's counter row is updated at commit, see
    // migration 0032) fire now, inside the transaction, to be counted.
    tx.batch_execute("SET CONSTRAINTS ALL IMMEDIATE").unwrap();
    let unfired: Vec<String> = tx
        .query(
            "SELECT DISTINCT t.tgname::text FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid \
             WHERE NOT t.tgisinternal AND c.relnamespace = to_regnamespace(current_schema()) \
               AND NOT EXISTS (SELECT 1 FROM pg_stat_xact_user_functions f \
                               WHERE f.funcid = t.tgfoid AND f.calls > 0) \
             ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    // The guard on history updates fires only on the refused writes below.
    let expected_unfired = ["history_events_append_only_update"];
    assert_eq!(
        unfired, expected_unfired,
        "triggers the script never fires: add row operations to SCRIPT that do"
    );
    tx.commit().unwrap();
    for refused in REFUSED {
        let error = client.batch_execute(refused).expect_err(refused);
        let message = error
            .as_db_error()
            .map(|e| e.message().to_owned())
            .unwrap_or_else(|| error.to_string());
        assert!(message.contains("history is append-only"), "{message}");
    }
    let mut problems = Vec::new();
    for ((table, columns, order), sqlite) in COMPARED.iter().zip(&sqlite) {
        let postgres = postgres_rows(
            &mut client,
            &text_select(&columns_of(&conn, table, columns), table, order),
        );
        if postgres != *sqlite {
            problems.push(format!(
                "{table}:\n  SQLite:     {sqlite:?}\n  PostgreSQL: {postgres:?}"
            ));
        }
    }
    // The minute buckets: each queue's newest bucket is the current minute
    // on both (the two runs are seconds apart, a boundary at most between).
    let minute = "SELECT namespace, task_queue, recent_minute FROM task_queue_state ORDER BY 1, 2";
    let now_minute = |rows: &Rows| -> Vec<i64> {
        rows.iter()
            .map(|row| row[2].as_deref().unwrap().parse().unwrap())
            .collect()
    };
    let sqlite_minutes = now_minute(&sqlite_rows(
        &conn,
        "SELECT namespace, task_queue, CAST(recent_minute AS TEXT) FROM task_queue_state ORDER BY 1, 2",
    ));
    let postgres_minutes = now_minute(&postgres_rows(
        &mut client,
        &minute.replace("recent_minute", "CAST(recent_minute AS TEXT)"),
    ));
    for (s, p) in sqlite_minutes.iter().zip(&postgres_minutes) {
        assert!(
            (p - s).abs() <= 1,
            "minute buckets {s} (SQLite) and {p} (PostgreSQL)"
        );
    }
    assert!(
        problems.is_empty(),
        "the PostgreSQL triggers left other rows than SQLite's:\n{}",
        problems.join("\n")
    );
}

#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_database_migrated_by_a_newer_binary_is_refused_and_a_rerun_applies_nothing() {
    let Some(url) = postgres_url(true) else {
        return;
    };
    let db = FreshDatabase::create(&url);
    let mut client = db.connect();
    assert_eq!(
        pg_schema::migrate(&mut client).expect("first migration"),
        pg_schema::SCHEMA_VERSION as usize
    );
    assert_eq!(pg_schema::migrate(&mut client).expect("a re-run"), 0);
    let versions: i64 = client
        .query_one("SELECT COUNT(*) FROM schema_migrations", &[])
        .unwrap()
        .get(0);
    assert_eq!(versions, pg_schema::SCHEMA_VERSION);

    let newer = pg_schema::SCHEMA_VERSION + 1;
    client
        .execute(
            "INSERT INTO schema_migrations (version, name, applied_at_ms) VALUES ($1, 'from_the_future', 0)",
            &[&newer],
        )
        .unwrap();
    let error = pg_schema::migrate(&mut client).expect_err("a newer schema is refused");
    assert!(
        matches!(error, MigrateError::TooNew { found, supported }
            if found == newer && supported == pg_schema::SCHEMA_VERSION),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains(&format!(
            "version {newer}, newer than this dwserver knows ({})",
            pg_schema::SCHEMA_VERSION
        )),
        "{message}"
    );
    // Refused without a trace: the connection is usable and nothing moved.
    let count: i64 = client
        .query_one("SELECT COUNT(*) FROM schema_migrations", &[])
        .unwrap()
        .get(0);
    assert_eq!(count, pg_schema::SCHEMA_VERSION + 1);
}

#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn nodes_migrating_one_database_at_once_apply_each_migration_once() {
    let Some(url) = postgres_url(true) else {
        return;
    };
    let db = FreshDatabase::create(&url);
    const NODES: usize = 4;
    let barrier = Arc::new(Barrier::new(NODES));
    let handles: Vec<_> = (0..NODES)
        .map(|_| {
            let mut client = db.connect();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                pg_schema::migrate(&mut client)
            })
        })
        .collect();
    let applied: Vec<usize> = handles
        .into_iter()
        .map(|h| {
            h.join()
                .expect("a migrating node panicked")
                .expect("a node's migration failed")
        })
        .collect();
    assert_eq!(
        applied.iter().sum::<usize>(),
        pg_schema::SCHEMA_VERSION as usize,
        "{applied:?}"
    );
    let mut client = db.connect();
    let rows = client
        .query(
            "SELECT version FROM schema_migrations ORDER BY version",
            &[],
        )
        .unwrap();
    let versions: Vec<i64> = rows.iter().map(|row| row.get(0)).collect();
    assert_eq!(
        versions,
        (1..=pg_schema::SCHEMA_VERSION).collect::<Vec<_>>()
    );
    // The schema is whole: the default namespace once, the triggers there.
    let defaults: i64 = client
        .query_one(
            "SELECT COUNT(*) FROM namespaces WHERE name = 'default'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(defaults, 1);
}

/// A rolling upgrade: nodes of the new release open one store at once
/// while it is several migrations behind and a node of the old release is
/// inside a write. One node migrates, after that write ends (a migration
/// takes the store's write lock), the others wait and then find the schema
/// current; every migration is recorded once.
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn nodes_opening_one_older_schema_at_once_migrate_it_once() {
    let Some(_) = postgres_url(true) else {
        return;
    };
    const NODES: usize = 4;
    const BEHIND: i64 = 3;
    let url = crate::common::postgres_schema_url();
    let mut old_node = Client::connect(&url, NoTls).expect("connect");
    let older = pg_schema::SCHEMA_VERSION - BEHIND;
    assert_eq!(
        pg_schema::migrate_to(&mut old_node, older).expect("the older release's schema"),
        older as usize
    );
    // The old release's node is inside a write: it holds the write lock.
    let mut write = old_node.transaction().unwrap();
    write
        .execute(
            "SELECT pg_advisory_xact_lock($1, hashtext(current_schema()))",
            &[&dwengine::store::db::WRITE_LOCK],
        )
        .unwrap();
    let barrier = Arc::new(Barrier::new(NODES));
    let opens: Vec<_> = (0..NODES)
        .map(|_| {
            let (url, barrier) = (url.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                dwengine::store::Store::open_postgres(&url, dwengine::store::StoreConfig::default())
                    .map(|_| ())
            })
        })
        .collect();
    // One node waits for the write lock (the others for the migration
    // lock); nothing is applied until the write ends.
    let mut watcher = Client::connect(&url, NoTls).expect("connect");
    let waiting_for_the_write_lock =
        crate::support::eventually(std::time::Duration::from_secs(60), || {
            let waiting: i64 = watcher
                .query_one(
                    "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                 AND classid::bigint = $1::bigint",
                    &[&i64::from(dwengine::store::db::WRITE_LOCK)],
                )
                .unwrap()
                .get(0);
            waiting == 1
        });
    assert!(
        waiting_for_the_write_lock,
        "no node's migration waited for the write in progress"
    );
    let version: i64 = watcher
        .query_one("SELECT MAX(version) FROM schema_migrations", &[])
        .unwrap()
        .get(0);
    assert_eq!(version, older, "a migration ran beside a write");
    write.commit().unwrap();
    for open in opens {
        open.join()
            .expect("a node panicked")
            .expect("a node could not open the store");
    }
    let versions: Vec<i64> = watcher
        .query(
            "SELECT version FROM schema_migrations ORDER BY version",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(
        versions,
        (1..=pg_schema::SCHEMA_VERSION).collect::<Vec<_>>()
    );
}

/// The functions `0000_functions.sql` defines answer as SQLite's built-ins
/// do, for the documents and paths the store uses and the edges around them.
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn the_sqlite_functions_postgres_defines_answer_as_sqlite_does() {
    the_sqlite_functions_postgres_defines_answer_as_sqlite_does_on(true);
}

fn the_sqlite_functions_postgres_defines_answer_as_sqlite_does_on(with_postgres: bool) {
    let (_dir, conn) = sqlite_database();
    let doc = r#"{"condition_wait_id":"w-1","action":{"workflow_type":"Order","n":3,"x":1.5},"t":true,"f":false,"z":null,"a":[10,{"b":"c"}],"sp ace":"y","\u00e9":"accent","q":"say \"hi\""}"#;
    let paths = [
        "$.condition_wait_id",
        "$.action.workflow_type",
        "$.action.n",
        "$.action.x",
        "$.t",
        "$.f",
        "$.z",
        "$.missing",
        "$.action.missing.deeper",
        "$.a[0]",
        "$.a[1].b",
        "$.a[5]",
        "$.\"sp ace\"",
        "$.\"é\"",
        "$.q",
    ];
    let extract = |path: &str| {
        format!(
            "SELECT CAST(json_extract('{}', '{}') AS TEXT)",
            doc.replace('\'', "''"),
            path
        )
    };
    let sets = [
        ("{\"a\":1}", "$.note", Some("hello")),
        (
            "{\"a\":1,\"note\":\"old\"}",
            "$.note",
            Some("new \"quoted\""),
        ),
        ("{\"a\":1}", "$.x.y", Some("nowhere")),
        ("{\"a\":1}", "$.note", None),
        ("{\"a\":1}", "$.a.b", Some("through a number")),
        ("{\"a\":[1]}", "$.a[0]", Some("replaced")),
        ("{\"a\":[1]}", "$.a[3]", Some("past the end")),
        ("{\"a\":[{}]}", "$.a[0].k.j", Some("deep")),
    ];
    let set = |(doc, path, value): &(&str, &str, Option<&str>)| {
        let value = value.map_or("NULL".to_owned(), |v| {
            format!("'{}'", v.replace('\'', "''"))
        });
        // Compared as parsed JSON (PostgreSQL's jsonb spaces its text).
        format!("SELECT json_extract(json_set('{doc}', '{path}', {value}), '$')")
    };
    let mut statements: Vec<String> = paths.iter().map(|p| extract(p)).collect();
    statements.extend(sets.iter().map(set));
    statements.push("SELECT CAST(length(randomblob(10)) AS TEXT)".to_owned());
    statements.push("SELECT CAST(length(zeroblob(4)) AS TEXT)".to_owned());
    let sqlite: Vec<Option<String>> = statements
        .iter()
        .map(|sql| {
            conn.query_row(sql, [], |r| r.get(0))
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
        })
        .collect();
    // SQLite's own answers, so a change of SQLite's is seen here first.
    assert_eq!(sqlite[0].as_deref(), Some("w-1"));
    assert_eq!(sqlite[4].as_deref(), Some("1"));
    let Some((_db, mut client)) = migrated_database(with_postgres) else {
        return;
    };
    let mut problems = Vec::new();
    for (sql, sqlite) in statements.iter().zip(&sqlite) {
        let postgres: Option<String> = client
            .query_one(sql.as_str(), &[])
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .get(0);
        let same = match (sqlite, &postgres) {
            // Objects and arrays: the same JSON, however it is spaced.
            (Some(s), Some(p)) if s.starts_with('{') || s.starts_with('[') => {
                serde_json::from_str::<serde_json::Value>(s).ok()
                    == serde_json::from_str::<serde_json::Value>(p).ok()
            }
            _ => *sqlite == postgres,
        };
        if !same {
            problems.push(format!(
                "{sql}\n  SQLite:     {sqlite:?}\n  PostgreSQL: {postgres:?}"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Runs `work` in a transaction of its own until it commits, again after a
/// deadlock or a serialization failure (PostgreSQL's 40P01 and 40001, which
/// a client must retry: the store's PostgreSQL writer has to as well);
/// counts the retries. Any other error fails the test.
fn committed<T>(
    client: &mut Client,
    retries: &mut u32,
    mut work: impl FnMut(&mut postgres::Transaction<'_>) -> Result<T, postgres::Error>,
) -> T {
    use postgres::error::SqlState;
    for _ in 0..1000 {
        let mut tx = client.transaction().expect("begin");
        let result = work(&mut tx);
        match result.and_then(move |value| tx.commit().map(|()| value)) {
            Ok(value) => return value,
            Err(e)
                if e.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED)
                    || e.code() == Some(&SqlState::T_R_SERIALIZATION_FAILURE) =>
            {
                *retries += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    panic!("a transaction was retried 1000 times");
}

/// Several nodes writing one series at once (PostgreSQL's default READ
/// COMMITTED, one transaction per start, lease and close, as the store
/// writes them): the trigger-kept counters end equal to the rows they
/// count, none lost to a race between two first inserts of a series or
/// two increments of one row.
///
/// The aggregate rows are locked in the order a transaction's statements
/// reach them: a start touches the run series and then the queue's state,
/// a close the queue's state (its task done) and then the series, so two
/// nodes can deadlock, and PostgreSQL aborts one of them (SQLite has one
/// writer and never does). The writers here retry as a PostgreSQL client
/// must; the count of retries is printed.
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn counters_stay_equal_to_their_rows_under_concurrent_writers() {
    let Some(url) = postgres_url(true) else {
        return;
    };
    let db = FreshDatabase::create(&url);
    pg_schema::migrate(&mut db.connect()).expect("migrate PostgreSQL");
    const NODES: usize = 4;
    const RUNS: usize = 25;
    let barrier = Arc::new(Barrier::new(NODES));
    let handles: Vec<_> = (0..NODES)
        .map(|node| {
            let mut client = db.connect();
            // Deadlocks are found after deadlock_timeout (1 s by default).
            client
                .batch_execute("SET deadlock_timeout = '50ms'")
                .expect("SET deadlock_timeout (a superuser's setting, as in .ci/run)");
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let mut retries = 0;
                barrier.wait();
                for i in 0..RUNS {
                    let workflow_id = format!("order-{node}-{i}");
                    let (run, task): (i64, i64) = committed(&mut client, &mut retries, |tx| {
                        let run: i64 = tx
                            .query_one(
                                "INSERT INTO runs (workflow_id, workflow_type, namespace, task_queue, \
                                 status, origin, memo, search_attributes, created_at_ms) \
                                 VALUES ($1, 'Order', 'default', 'orders', 'running', 'v2', '{}', '{}', 1000) \
                                 RETURNING id",
                                &[&workflow_id],
                            )?
                            .get(0);
                        let task: i64 = tx
                            .query_one(
                                "INSERT INTO dispatch_tasks (kind, run_id, namespace, task_queue, status, \
                                 due_at_ms, created_at_ms) \
                                 VALUES ('workflow', $1, 'default', 'orders', 'ready', 0, 1000) RETURNING id",
                                &[&run],
                            )?
                            .get(0);
                        Ok((run, task))
                    });
                    committed(&mut client, &mut retries, |tx| {
                        tx.execute("UPDATE dispatch_tasks SET status = 'leased' WHERE id = $1", &[&task])
                    });
                    // Every other run closes, its task done; the rest stay
                    // running with their task leased.
                    if i % 2 == 0 {
                        committed(&mut client, &mut retries, |tx| {
                            tx.execute("UPDATE dispatch_tasks SET status = 'done' WHERE id = $1", &[&task])?;
                            tx.execute(
                                "UPDATE runs SET status = 'completed', closed_at_ms = 1200 WHERE id = $1",
                                &[&run],
                            )
                        });
                    }
                }
                retries
            })
        })
        .collect();
    let retries: u32 = handles
        .into_iter()
        .map(|handle| handle.join().expect("a writing node panicked"))
        .sum();
    eprintln!(
        "{} transactions of {NODES} concurrent writers: {retries} retried after a deadlock or serialization failure",
        NODES * RUNS * 5 / 2
    );
    let mut client = db.connect();
    let series = client
        .query_one(
            "SELECT started, completed, latency_count, le_0_5 FROM workflow_run_series \
             WHERE namespace = 'default' AND task_queue = 'orders' AND workflow_type = 'Order'",
            &[],
        )
        .unwrap();
    let rows = client
        .query_one(
            "SELECT COUNT(*), COUNT(*) FILTER (WHERE status = 'completed') FROM runs",
            &[],
        )
        .unwrap();
    let (runs, completed): (i64, i64) = (rows.get(0), rows.get(1));
    assert_eq!(runs, (NODES * RUNS) as i64);
    assert_eq!(series.get::<_, i64>(0), runs, "started");
    assert_eq!(series.get::<_, i64>(1), completed, "completed");
    assert_eq!(series.get::<_, i64>(2), completed, "latency_count");
    assert_eq!(series.get::<_, i64>(3), completed, "le_0_5 (200 ms each)");
    let queue = client
        .query_one(
            "SELECT workflow_ready, workflow_leased FROM task_queue_state \
             WHERE namespace = 'default' AND task_queue = 'orders'",
            &[],
        )
        .unwrap();
    let tasks = client
        .query_one(
            "SELECT COUNT(*) FILTER (WHERE status = 'ready'), COUNT(*) FILTER (WHERE status = 'leased') \
             FROM dispatch_tasks",
            &[],
        )
        .unwrap();
    assert_eq!(
        queue.get::<_, i64>(0),
        tasks.get::<_, i64>(0),
        "workflow_ready"
    );
    assert_eq!(
        queue.get::<_, i64>(1),
        tasks.get::<_, i64>(1),
        "workflow_leased"
    );
    assert_eq!(tasks.get::<_, i64>(1), runs - completed);
    let summaries: i64 = client
        .query_one(
            "SELECT COUNT(*) FROM run_summaries s JOIN runs r ON r.id = s.run_id AND r.status = s.status",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(summaries, runs, "run_summaries follow every run");
}

/// The SQL statements the store's sources hold as string literals (those
/// starting with SELECT, INSERT, UPDATE, DELETE or WITH; statements built
/// with `format!` and the SQLite-only half of the seam, `store/db/sqlite.rs`,
/// are left out), each with its file and line, from the code before any
/// `#[cfg(test)]` module.
fn store_statements() -> Vec<(String, usize, String)> {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read the store's sources") {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("db/sqlite.rs")
            {
                out.push(path);
            }
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
    let mut files = Vec::new();
    walk(&root, &mut files);
    files.sort();
    let mut statements = Vec::new();
    for file in files {
        let source = std::fs::read_to_string(&file).unwrap();
        let code = source.split("#[cfg(test)]").next().unwrap_or_default();
        let name = file.strip_prefix(&root).unwrap().display().to_string();
        let bytes = code.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'/' if bytes.get(i + 1) == Some(&b'/') => {
                    while i < bytes.len() && bytes[i] != b'\n' {
                        i += 1;
                    }
                }
                // A char literal ('"', '\\'), or a lifetime's quote.
                b'\'' => {
                    if bytes.get(i + 1) == Some(&b'\\') {
                        i += 4;
                    } else if bytes.get(i + 2) == Some(&b'\'') {
                        i += 3;
                    } else {
                        i += 1;
                    }
                }
                b'"' => {
                    let start = i + 1;
                    let mut text = String::new();
                    i += 1;
                    while i < bytes.len() && bytes[i] != b'"' {
                        if bytes[i] == b'\\' {
                            match bytes.get(i + 1) {
                                // A line continuation drops the newline and
                                // the next line's leading whitespace.
                                Some(b'\n') => {
                                    i += 2;
                                    while i < bytes.len() && bytes[i].is_ascii_whitespace() {
                                        i += 1;
                                    }
                                    continue;
                                }
                                Some(b'n') => text.push('\n'),
                                Some(&c) => text.push(c as char),
                                None => {}
                            }
                            i += 2;
                            continue;
                        }
                        let ch = code[i..].chars().next().unwrap();
                        text.push(ch);
                        i += ch.len_utf8();
                    }
                    i += 1;
                    let head = text.trim_start().to_ascii_uppercase();
                    let is_sql = ["SELECT ", "INSERT ", "UPDATE ", "DELETE ", "WITH "]
                        .iter()
                        .any(|verb| head.starts_with(verb));
                    if is_sql && !text.contains('{') {
                        let line = code[..start].lines().count();
                        statements.push((name.clone(), line, text));
                    }
                }
                _ => i += 1,
            }
        }
    }
    statements
}

/// Store statements that do not yet parse on PostgreSQL or name what its
/// schema lacks, each by its first words (whitespace collapsed): the
/// seam's move to portable SQL (PG-CONVENTIONS) takes them off. Listed so
/// that a new statement written in SQLite's dialect fails the test below.
/// None is left: the store's SQL is portable (the seam turns `?N` into
/// `$N` and leaves SQLite's `INDEXED BY` hints out on PostgreSQL).
const NOT_YET_PORTABLE: &[&str] = &[];

/// Every statement the store's sources hold parses on PostgreSQL against
/// the migrated schema (its tables, columns and functions exist), except
/// those [`NOT_YET_PORTABLE`] names. A parameter whose type PostgreSQL
/// cannot infer without the caller's value is not a failure here: the
/// seam binds typed values.
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn the_stores_statements_parse_on_the_postgres_schema() {
    the_stores_statements_parse_on_the_postgres_schema_on(true);
}

fn the_stores_statements_parse_on_the_postgres_schema_on(with_postgres: bool) {
    let statements = store_statements();
    assert!(
        statements.len() > 150,
        "found {} statements",
        statements.len()
    );
    let Some((_db, mut client)) = migrated_database(with_postgres) else {
        return;
    };
    let known = |sql: &str| {
        let flat = sql.split_whitespace().collect::<Vec<_>>().join(" ");
        NOT_YET_PORTABLE
            .iter()
            .any(|prefix| flat.starts_with(prefix))
    };
    // Each statement as the seam sends it (`?N` as `$N`, no `INDEXED BY`).
    let mut problems = Vec::new();
    let mut known_failing = 0;
    for (file, line, sql) in &statements {
        let Err(error) = client.prepare(&db::postgres_text(sql)) else {
            continue;
        };
        let Some(db_error) = error.as_db_error() else {
            panic!("{file}:{line}: {error}");
        };
        use postgres::error::SqlState;
        let inferring = [
            SqlState::INDETERMINATE_DATATYPE,
            SqlState::AMBIGUOUS_PARAMETER,
            SqlState::DATATYPE_MISMATCH,
        ];
        if inferring.contains(db_error.code()) {
            continue;
        }
        if known(sql) {
            known_failing += 1;
            continue;
        }
        problems.push(format!(
            "store/{file}:{line}: {}\n    {}",
            db_error.message(),
            sql.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
    }
    assert!(
        problems.is_empty(),
        "store statements that do not parse on PostgreSQL (write them in the portable form of \
         the store's SQL conventions, or give the schema what they name):\n{}",
        problems.join("\n")
    );
    eprintln!(
        "{} store statements checked on PostgreSQL; {known_failing} still in SQLite's dialect (NOT_YET_PORTABLE)",
        statements.len()
    );
}

/// The SQLite half of each comparison runs in every build, so the script,
/// the schema reading, the function table and the statement scan stay
/// valid for SQLite where no PostgreSQL runs (the PostgreSQL tests are
/// then listed as ignored, not passed).
#[test]
fn the_sqlite_halves_run_without_postgres() {
    postgres_schema_has_the_sqlite_schemas_tables_columns_indexes_and_triggers_on(false);
    the_same_row_operations_leave_the_same_counters_and_projections_on_both_on(false);
    the_sqlite_functions_postgres_defines_answer_as_sqlite_does_on(false);
    the_stores_statements_parse_on_the_postgres_schema_on(false);
}

/// CI runs the PostgreSQL tests: a test binary built there without
/// `DW_TEST_POSTGRES_URL` (which would compile them as ignored) fails here,
/// and one built with it leaves none of them ignored. Elsewhere `cargo
/// test` lists them as ignored, with the reason.
#[test]
fn ci_runs_the_postgres_tests() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--list", "--ignored", "--format", "terse"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let listed = String::from_utf8_lossy(&out.stdout);
    let ignored: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .filter(|name| name.starts_with("pg_schema::"))
        .collect();
    if cfg!(dw_test_postgres) {
        assert!(ignored.is_empty(), "{ignored:?}");
    } else {
        assert!(
            option_env!("CI").is_none(),
            "CI built the engine's tests without DW_TEST_POSTGRES_URL: the {} PostgreSQL schema \
             tests would only be reported as ignored; start PostgreSQL and set it (.ci/run does)",
            ignored.len()
        );
        assert_eq!(ignored.len(), tests_needing_postgres(), "{ignored:?}");
    }
}

/// How many tests of this file need PostgreSQL: those whose `ignore`
/// reason says so, counted in the file's own text, so a test added with
/// that attribute is expected among the ignored without a number to keep.
fn tests_needing_postgres() -> usize {
    let marked = include_str!("pg_schema.rs")
        .lines()
        .filter(|line| line.trim_start().starts_with("ignore = \"needs PostgreSQL"))
        .count();
    assert!(
        marked > 0,
        "no test of pg_schema.rs is marked as needing PostgreSQL"
    );
    marked
}

#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn the_schemas_of_dead_test_processes_are_swept_and_live_ones_kept() {
    let Some(url) = postgres_url(true) else {
        return;
    };
    // A pid past the kernel's largest is never alive; this process is.
    let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .expect("read pid_max")
        .trim()
        .parse()
        .expect("pid_max is a number");
    let dead = format!("dw_store_test_{}_0", pid_max + 1);
    let live = format!("dw_store_test_{}_{}", std::process::id(), u32::MAX);
    let mut admin = Client::connect(&url, NoTls).expect("connect");
    for schema in [&dead, &live] {
        admin
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; \
                 CREATE TABLE {schema}.runs (id integer)"
            ))
            .expect("make a test schema");
    }
    crate::common::sweep_dead_schemas(&url);
    let exists = |admin: &mut Client, schema: &str| -> bool {
        admin
            .query_one(
                "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
                &[&schema],
            )
            .expect("look the schema up")
            .get::<_, i64>(0)
            == 1
    };
    assert!(
        !exists(&mut admin, &dead),
        "{dead}: a dead process's schema was kept"
    );
    assert!(
        exists(&mut admin, &live),
        "{live}: a live process's schema was dropped"
    );
    admin
        .batch_execute(&format!("DROP SCHEMA {live} CASCADE"))
        .expect("drop the live schema");
}

/// The plan `explain` (an `EXPLAIN ...` statement) prints, one line per
/// plan node.
fn plan_lines(client: &mut postgres::Client, explain: &str) -> String {
    client
        .simple_query(explain)
        .unwrap()
        .into_iter()
        .filter_map(|message| match message {
            postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// SQLite's plan for `sql` with `params`, one line per step
/// (`EXPLAIN QUERY PLAN`'s detail column).
fn sqlite_plan(conn: &rusqlite::Connection, sql: &str, params: &[&str]) -> Vec<String> {
    conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .unwrap()
        .query_map(rusqlite::params_from_iter(params), |r| {
            r.get::<_, String>(3)
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The newest run of a workflow id is found through `runs_by_workflow`,
/// backwards, with no sort, by the plan a node keeps for its prepared
/// statement: the generic plan PostgreSQL makes while the table is still
/// empty and never analyzed, as on a node's first starts. With
/// `runs_by_workflow` on (namespace, workflow_id) alone that plan walked
/// `runs_by_namespace` and sorted: every start read every run of its
/// namespace (migration 0050; docs/performance.md, session 19).
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn the_newest_run_of_a_workflow_id_is_one_backward_index_step_on_an_empty_table() {
    let Some((_db, mut client)) = migrated_database(true) else {
        return;
    };
    // A prepared statement's generic plan, as a node's session keeps it
    // (its parameters unknown when it is made).
    client
        .batch_execute("SET plan_cache_mode = force_generic_plan")
        .unwrap();
    for (name, prepare, execute) in [
        (
            "a start's duplicate check",
            "PREPARE duplicate(text, text, text, bigint) AS SELECT id FROM runs \
             WHERE namespace = $1 AND workflow_id = $2 AND status = $3 ORDER BY id DESC LIMIT $4",
            "EXPLAIN EXECUTE duplicate('bench', 'w', 'running', 1)",
        ),
        (
            "a describe by workflow id",
            "PREPARE newest(text, text) AS SELECT id FROM runs \
             WHERE namespace = $1 AND workflow_id = $2 ORDER BY id DESC LIMIT 1",
            "EXPLAIN EXECUTE newest('bench', 'w')",
        ),
    ] {
        client.batch_execute(prepare).unwrap();
        let plan = plan_lines(&mut client, execute);
        assert!(
            plan.contains("Scan Backward using runs_by_workflow")
                && !plan.contains("Sort")
                && plan.contains("$1"),
            "{name}: the generic plan on an empty table is not one backward step in runs_by_workflow:\n{plan}"
        );
    }
}

/// One run's open workflow task (a describe by workflow id: the run found
/// by a subquery the planner cannot see into) is read through
/// `dispatch_by_run`, not by walking `dispatch_ready` over every ready
/// workflow task of every run. With 0051's partial `dispatch_ready`
/// PostgreSQL chose the latter once the table held a few thousand ready
/// tasks: 17 ms a describe, three nodes' SDK runs down to a tenth
/// (migration 0052; docs/performance.md, session 20).
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_runs_open_workflow_task_is_read_through_its_run_among_thousands_ready() {
    let Some((_db, mut client)) = migrated_database(true) else {
        return;
    };
    // What a node's first seconds of starts leave: runs, each with its
    // ready task, in tables not analyzed since they were empty (autovacuum
    // kept off them, so the test does not depend on when it runs).
    client
        .batch_execute(
            "ALTER TABLE runs SET (autovacuum_enabled = false); \
             ALTER TABLE dispatch_tasks SET (autovacuum_enabled = false); \
             INSERT INTO runs (id, workflow_id, workflow_type, namespace, task_queue, status, \
               origin, memo, search_attributes, created_at_ms) \
             SELECT n, 'w-' || n, 'T', 'bench', 'q', 'running', 'v2', '{}', '{}', n \
             FROM generate_series(1, 5000) AS n; \
             INSERT INTO dispatch_tasks (id, kind, run_id, namespace, task_queue, status, \
               due_at_ms, created_at_ms) \
             SELECT n, 'workflow', n, 'bench', 'q', 'ready', n, n FROM generate_series(1, 5000) AS n",
        )
        .unwrap();
    let plan = plan_lines(
        &mut client,
        "EXPLAIN SELECT id, last_error, attempt, due_at_ms FROM dispatch_tasks \
         WHERE run_id = (SELECT id FROM runs WHERE namespace = 'bench' AND workflow_id = 'w-7' \
           ORDER BY id DESC LIMIT 1) AND kind = 'workflow' AND status = 'ready' \
         UNION ALL SELECT id, last_error, attempt, due_at_ms FROM dispatch_tasks \
         WHERE run_id = (SELECT id FROM runs WHERE namespace = 'bench' AND workflow_id = 'w-7' \
           ORDER BY id DESC LIMIT 1) AND kind = 'workflow' AND status = 'leased'",
    );
    assert!(
        plan.contains("using dispatch_by_run") && !plan.contains("using dispatch_ready"),
        "one run's open workflow task is not read through dispatch_by_run:\n{plan}"
    );
    // The describe a node sends (one statement on PostgreSQL), by workflow
    // id and by run id, as the generic plans its prepared statements keep:
    // every table through an index on the run (the newest run backwards
    // through runs_by_workflow, its events through their primary key, its
    // ready task through dispatch_by_run to its status, not through every
    // done task of the run), never a walk of a whole table. (A leased task
    // may be found through dispatch_leases: the tasks leased at once.)
    client
        .batch_execute("SET plan_cache_mode = force_generic_plan")
        .unwrap();
    client
        .batch_execute(&format!(
            "PREPARE describe_latest(text, text) AS {}; PREPARE describe_by_id(bigint) AS {}",
            db::postgres_text(describe::one_statement_latest()),
            db::postgres_text(describe::ONE_STATEMENT),
        ))
        .unwrap();
    for (name, execute) in [
        (
            "by workflow id",
            "EXPLAIN EXECUTE describe_latest('bench', 'w-7')",
        ),
        ("by run id", "EXPLAIN EXECUTE describe_by_id(7)"),
    ] {
        let plan = plan_lines(&mut client, execute);
        assert!(
            plan.contains("using dispatch_by_run")
                && plan.contains("(kind = 'workflow'::text) AND (status = 'ready'::text))")
                && !plan.contains("Filter: (status")
                && plan.contains("using history_events_pkey")
                && !plan.contains("Seq Scan")
                && !plan.contains("using dispatch_ready"),
            "a describe {name} walks more than its run:\n{plan}"
        );
        if name == "by workflow id" {
            assert!(
                plan.contains("Scan Backward using runs_by_workflow"),
                "{plan}"
            );
        }
    }
}

/// Every task that moves updates its queue's `task_queue_state` row, so a
/// busy queue's row is updated thousands of times a second. Those updates
/// must be heap-only (HOT): an update that writes an entry into each of
/// the table's indexes leaves the row's lookups walking the dead ones
/// under load, while the row is locked (738 entries a lookup after 25 s
/// of SDK workflows before migration 0053, whose partial index read the
/// counters themselves). Only the updates that turn the queue busy or
/// idle change its indexes.
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_busy_queues_counter_updates_leave_its_indexes_alone() {
    let Some((_db, mut client)) = migrated_database(true) else {
        return;
    };
    let mut tx = client.transaction().unwrap();
    // The queue counts at commit (deferred triggers): counted at once
    // here, so this transaction's own statistics show each update.
    tx.batch_execute(
        "SET CONSTRAINTS ALL IMMEDIATE; \
         INSERT INTO runs (id, workflow_id, workflow_type, namespace, task_queue, status, \
           origin, memo, search_attributes, created_at_ms) \
         VALUES (1, 'w', 'T', 'ns', 'q', 'running', 'v2', '{}', '{}', 1); \
         INSERT INTO dispatch_tasks (id, kind, run_id, namespace, task_queue, status, \
           due_at_ms, created_at_ms) \
         SELECT n, CASE WHEN n % 2 = 0 THEN 'workflow' ELSE 'activity' END, 1, 'ns', 'q', \
           'ready', n, n FROM generate_series(1, 10) AS n; \
         UPDATE dispatch_tasks SET status = 'leased' WHERE run_id = 1; \
         UPDATE dispatch_tasks SET status = 'done' WHERE run_id = 1;",
    )
    .unwrap();
    let row = tx
        .query_one(
            "SELECT pg_stat_get_xact_tuples_updated('task_queue_state'::regclass), \
             pg_stat_get_xact_tuples_hot_updated('task_queue_state'::regclass), \
             (SELECT workflow_ready + workflow_leased + activity_ready + activity_leased \
              FROM task_queue_state WHERE namespace = 'ns' AND task_queue = 'q')",
            &[],
        )
        .unwrap();
    let (updated, heap_only, open): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(open, 0, "every task moved to done");
    assert!(
        updated >= 30,
        "ten tasks added, leased and done: {updated} updates"
    );
    assert!(
        heap_only >= updated - 2,
        "{heap_only} of {updated} updates of a busy queue's counters were heap-only: an index of \
         task_queue_state reads a counter (its key or its predicate), so every task move writes \
         into that index"
    );
}

/// A claim's candidate asks whether the task's run has a workflow task
/// leased already, and whether the run is pinned to another build, of
/// that run alone (`dispatch_by_run`, `runs_pkey`), in the generic plan
/// its prepared statement keeps: planned as a hash of every leased
/// workflow task of every run and an anti-join with every run, it read
/// both tables whole on each claim (sequential scans here; on a busy
/// queue, hundreds of entries left in `dispatch_leases` by tasks leased
/// and done since the last vacuum).
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_claims_leased_task_check_reads_the_candidates_run_alone() {
    let Some((_db, mut client)) = migrated_database(true) else {
        return;
    };
    busy_queue(&mut client);
    prepare_claim_candidate(&mut client);
    let plan = plan_lines(
        &mut client,
        "EXPLAIN EXECUTE candidate('workflow', 'bench', 'q', 5000, 'worker', '')",
    );
    assert!(
        !plan.contains("hashed SubPlan")
            && !plan.contains("Seq Scan on dispatch_tasks l")
            && plan.contains("using dispatch_by_run on dispatch_tasks l")
            && !plan.contains("Seq Scan on runs")
            && plan.contains("using runs_pkey on runs c"),
        "a claim reads more leased tasks than its candidate's run's:\n{plan}"
    );
}

/// A claim beside other claims reads its queue's ready tasks in its own
/// order (`due_at_ms, id`) and stops at the first it may lock. With
/// `dispatch_ready` ending at `due_at_ms` (before migration 0055) the plan
/// read every ready task of the queue, ran the candidate's checks on each
/// and sorted them to lock one: 55 tasks for one claim under SDK load (a
/// whole sort), 33 here (an incremental one). SQLite reads its partial
/// index in that order too.
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_claim_reads_its_queue_in_claim_order_without_sorting_it() {
    let (_dir, conn) = sqlite_database();
    let plan = sqlite_plan(
        &conn,
        leases::candidates_alone(),
        &["workflow", "bench", "q", "5000", "worker", ""],
    );
    assert!(
        plan.iter().any(|line| line.contains("dispatch_ready"))
            && !plan.iter().any(|line| line.contains("ORDER BY")),
        "SQLite: {plan:?}"
    );
    let Some((_db, mut client)) = migrated_database(true) else {
        return;
    };
    busy_queue(&mut client);
    prepare_claim_candidate(&mut client);
    let explain = "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) \
                   EXECUTE candidate('workflow', 'bench', 'q', 5000, 'worker', '')";
    let plan = plan_lines(&mut client, explain);
    let read = plan
        .lines()
        .find(|line| line.contains("Index Scan using dispatch_ready on dispatch_tasks d"))
        .unwrap_or_else(|| panic!("the claim does not read dispatch_ready:\n{plan}"));
    assert!(
        !plan.contains("Sort") && read.contains("rows=1 "),
        "a claim reads and sorts its queue's ready tasks to lock one:\n{plan}"
    );
}

/// A queue's backlog makes no other queue's readiness checks read the
/// whole task table. Both ask "is any task of this queue ready" with
/// nothing to order by: the readiness probe a waiting poll makes, and a
/// claim's check for another ready task beside its candidate. Once
/// `ANALYZE` has seen one queue holding most of the table, the generic
/// plan a node's prepared statement keeps (its queue unknown) expects a
/// match within the first few rows and reads the table in its physical
/// order instead of the ready index: on an idle queue, every row of every
/// queue, on every probe (3.7 ms a probe in three nodes' SDK runs after a
/// starts phase left 21,000 open runs on another queue;
/// docs/performance.md, session 33).
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn another_queues_backlog_leaves_a_readiness_check_on_the_ready_index() {
    // The draining check is the candidate's alone, not also its check for
    // another ready task (both select in `dispatch_tasks` order).
    assert_eq!(
        leases::candidates_beside_claims()
            .matches("build_id_rollouts")
            .count(),
        1,
        "{}",
        leases::candidates_beside_claims()
    );
    let Some((_db, mut client)) = migrated_database(true) else {
        return;
    };
    busy_queue(&mut client);
    prepare_as(
        &mut client,
        "probe(text, text, text, bigint)",
        leases::READY_IN_QUEUE,
    );
    prepare_claim_candidate(&mut client);
    for (name, execute) in [
        (
            "a waiting poll's readiness probe",
            "EXPLAIN EXECUTE probe('workflow', 'bench', 'idle', 5000)",
        ),
        (
            "a claim's check for another ready task",
            "EXPLAIN EXECUTE candidate('workflow', 'bench', 'idle', 5000, 'worker', '')",
        ),
    ] {
        let plan = plan_lines(&mut client, execute);
        assert!(
            plan.contains("$3") && !plan.contains("Seq Scan on dispatch_tasks"),
            "{name} reads the whole task table in its generic plan:\n{plan}"
        );
    }
}

/// The statement a claim beside other claims sends for its candidate,
/// prepared as `candidate` (kind, namespace, queue, now, worker, cohort).
fn prepare_claim_candidate(client: &mut Client) {
    prepare_as(
        client,
        "candidate(text, text, text, bigint, text, text)",
        leases::candidates_beside_claims(),
    );
}

/// Prepares the store's statement `sql` (in its `?N` form) as `signature`
/// (a name and its parameters' types), as a node's session prepares it.
fn prepare_as(client: &mut Client, signature: &str, sql: &str) {
    let sql = db::postgres_text(sql);
    client
        .batch_execute(&format!("PREPARE {signature} AS {sql}"))
        .unwrap();
}

/// A thousand runs of queue `q` in namespace `bench` with two workflow
/// tasks each, one task in ten leased (to poll request `p-<id>`), the
/// tables analyzed, and the session planning as a prepared statement
/// does once it keeps a generic plan.
fn busy_queue(client: &mut Client) {
    client
        .batch_execute(
            "INSERT INTO runs (id, workflow_id, workflow_type, namespace, task_queue, status, \
               origin, memo, search_attributes, created_at_ms) \
             SELECT n, 'w-' || n, 'T', 'bench', 'q', 'running', 'v2', '{}', '{}', n \
             FROM generate_series(1, 1000) AS n; \
             INSERT INTO dispatch_tasks (id, kind, run_id, namespace, task_queue, status, \
               due_at_ms, created_at_ms, lease_expires_at_ms, poll_request_id) \
             SELECT n, 'workflow', 1 + n % 1000, 'bench', 'q', \
               CASE WHEN n % 10 = 0 THEN 'leased' ELSE 'ready' END, n, n, \
               CASE WHEN n % 10 = 0 THEN 1000000 END, \
               CASE WHEN n % 10 = 0 THEN 'p-' || n END \
             FROM generate_series(1, 2000) AS n; \
             ANALYZE; SET plan_cache_mode = force_generic_plan",
        )
        .unwrap();
}

/// Every poll asks whether a task is still leased to its request id (a
/// repeated poll's replay), nearly always to learn that none is: the read
/// finds the task by that id on both backends, not by walking the
/// queue's leased tasks (on PostgreSQL also the entries their earlier
/// versions left in the indexes until a vacuum: 38-58 pages a poll under
/// SDK load before migration 0054).
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_polls_leased_task_is_found_by_its_request_id() {
    let (_dir, conn) = sqlite_database();
    let plan = sqlite_plan(
        &conn,
        leases::LEASED_BY_POLL_REQUEST,
        &["workflow", "bench", "q", "p-10"],
    );
    assert!(
        plan.iter()
            .any(|line| line.contains("dispatch_poll_requests")),
        "SQLite: {plan:?}"
    );
    let Some((_db, mut client)) = migrated_database(true) else {
        return;
    };
    busy_queue(&mut client);
    prepare_as(
        &mut client,
        "leased_by_request(text, text, text, text)",
        leases::LEASED_BY_POLL_REQUEST,
    );
    let plan = plan_lines(
        &mut client,
        "EXPLAIN EXECUTE leased_by_request('workflow', 'bench', 'q', 'p-10')",
    );
    assert!(
        plan.contains("dispatch_poll_requests") && !plan.contains("Seq Scan"),
        "PostgreSQL:\n{plan}"
    );
}
