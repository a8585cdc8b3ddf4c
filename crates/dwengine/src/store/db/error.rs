//! The seam's error type: what a database refused or failed, whichever
//! backend answered, and the `optional()` reading of "no row".

use rusqlite::types::FromSqlError;

/// Why a database call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// SQLite refused or failed an operation.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL refused or failed an operation (or the connection).
    #[error("postgres: {0}")]
    Postgres(#[from] postgres::Error),
    /// The database did not answer a call within the node's own deadline
    /// (or the session was closed after one that did not): the server
    /// hangs, or the network to it drops packets.
    #[error("postgres: {0}")]
    Unanswered(String),
    /// A database setting that cannot be used (a malformed URL).
    #[error("{0}")]
    Config(String),
    /// A `query_row` found no row (`optional()` turns it into `None`).
    #[error("the query returned no rows")]
    NoRows,
    /// A column's value could not be read as the type asked for.
    #[error("column {column}: {source}")]
    Conversion {
        /// The column's index in the row.
        column: usize,
        /// What did not fit.
        source: FromSqlError,
    },
    /// Reading or writing a blob's bytes failed on the Rust side (the
    /// source of an upload, a seek past the end).
    #[error("blob I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// A database call's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `query_row(…).optional()`: no row is `Ok(None)`, not an error.
pub trait OptionalExtension<T> {
    /// The row's value, `None` when the query returned no row.
    fn optional(self) -> Result<Option<T>>;
}

impl<T> OptionalExtension<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(value) => Ok(Some(value)),
            Err(Error::NoRows) | Err(Error::Sqlite(rusqlite::Error::QueryReturnedNoRows)) => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

impl Error {
    /// Whether the database could not write because its disk (or its
    /// configured size cap) is full.
    pub fn is_disk_full(&self) -> bool {
        match self {
            Error::Sqlite(e) => e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull),
            _ => false,
        }
    }

    /// Whether PostgreSQL ended the statement or transaction because of a
    /// lock conflict with another transaction (a deadlock it broke, 40P01,
    /// or a serialization failure, 40001): nothing of it was written, and
    /// it can be run again. SQLite never answers this (one writer).
    pub fn is_lock_conflict(&self) -> bool {
        use postgres::error::SqlState;
        match self {
            Error::Postgres(e) => e.code().is_some_and(|code| {
                [
                    SqlState::T_R_DEADLOCK_DETECTED,
                    SqlState::T_R_SERIALIZATION_FAILURE,
                ]
                .contains(code)
            }),
            _ => false,
        }
    }

    /// Whether the database server could not be reached or dropped the
    /// session (stopped, restarting, the network gone), did not answer in
    /// time (a call past the node's deadline, a statement past
    /// `statement_timeout`, a lock wait past `lock_timeout`), as opposed to
    /// a statement it refused: what clears by itself once the server is
    /// back, so a caller is told to retry.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Postgres(e) => postgres_unavailable(e) || postgres_timed_out(e),
            Error::Unanswered(_) => true,
            _ => false,
        }
    }
}

/// A PostgreSQL error that says the server ended a statement for running
/// too long: `statement_timeout` (57014, query canceled) or a lock wait
/// past `lock_timeout` (55P03). The session stays usable.
fn postgres_timed_out(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    e.code()
        .is_some_and(|code| [SqlState::QUERY_CANCELED, SqlState::LOCK_NOT_AVAILABLE].contains(code))
}

/// A PostgreSQL error that says the server or the session is gone: the
/// session closed, an I/O failure (a refused or reset connection), a
/// connect timeout, or the server's own "connection exception" (class
/// 08), "shutting down" (57P01, 57P02), "not accepting connections
/// yet" (57P03), and its closing of a session idle too long inside a
/// transaction (25P03) or outside one (57P05).
pub(super) fn postgres_unavailable(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        return code.code().starts_with("08")
            || [
                SqlState::ADMIN_SHUTDOWN,
                SqlState::CRASH_SHUTDOWN,
                SqlState::CANNOT_CONNECT_NOW,
                SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
                SqlState::IDLE_SESSION_TIMEOUT,
            ]
            .contains(code);
    }
    let io = std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>());
    // The client's connect timeout carries no source; its text is fixed.
    io || e.to_string().starts_with("timeout waiting for server")
}
