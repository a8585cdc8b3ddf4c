//! Archiving closed runs.
//!
//! Archive moves a closed run out of the default listing without deleting
//! it: the run keeps its history and stays readable by id, and the mark
//! (when and why) lives on its row, so an archived run costs no extra rows.
//! Only closed runs are archived; an open v2 run has to close first. An
//! imported v1 projection that never ended (no terminal event) is closed as
//! terminated by its archive, in the same transaction, since no workflow
//! code will ever close it. Archiving twice keeps the first mark, so a
//! retried request converges.

use crate::store::db::{params, OptionalExtension};
use serde::Serialize;
use serde_json::json;

use crate::store::completion::finish_run;
use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::model::{EventType, RunId, RunOrigin, RunStatus};
use crate::store::rows::{load_head, now_ms};
use crate::store::tx::WriteTx;

/// A run's archive mark.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArchiveMark {
    /// When it was archived (Unix ms).
    pub archived_at_ms: i64,
    /// Why, as given.
    pub reason: Option<String>,
}

/// What an archive request did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchiveOutcome {
    /// The run is archived now.
    Archived(ArchiveMark),
    /// It already was (the earlier mark is kept).
    AlreadyArchived(ArchiveMark),
}

/// Which runs a listing includes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ArchivedFilter {
    /// Runs that are not archived (the default).
    #[default]
    Exclude,
    /// Archived runs only.
    Only,
    /// Both.
    Include,
}

impl ArchivedFilter {
    /// `exclude`, `only` or `include`.
    pub fn parse(text: &str) -> Option<ArchivedFilter> {
        match text {
            "exclude" | "false" => Some(ArchivedFilter::Exclude),
            "only" | "true" => Some(ArchivedFilter::Only),
            "include" | "all" => Some(ArchivedFilter::Include),
            _ => None,
        }
    }

    pub(crate) fn as_sql(self) -> &'static str {
        match self {
            ArchivedFilter::Exclude => "exclude",
            ArchivedFilter::Only => "only",
            ArchivedFilter::Include => "include",
        }
    }
}

impl Store {
    /// Archives the closed run `run` with `reason`.
    pub fn archive_run(&self, run: RunId, reason: Option<&str>) -> Result<ArchiveOutcome, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let head = load_head(&tx, run)?;
        if head.status == RunStatus::Running {
            if head.origin != RunOrigin::V1Projection {
                return Err(Error::RunNotClosed(run));
            }
            // An imported v1 run that never ended has no workflow code to
            // close it: archiving closes it as terminated first (a
            // `WorkflowTerminated` event naming the archive), which frees
            // its workflow id.
            let payload = json!({ "reason": reason, "request_id": null, "closed_by": "archive" });
            finish_run(
                &tx,
                &head,
                RunStatus::Terminated,
                EventType::WorkflowTerminated,
                &payload,
                None,
            )?;
        } else if let Some(mark) = self.archive_mark(run)? {
            return Ok(ArchiveOutcome::AlreadyArchived(mark));
        }
        let mark = ArchiveMark {
            archived_at_ms: now_ms(),
            reason: reason.map(str::to_owned),
        };
        tx.prepare_cached(
            "UPDATE runs SET archived_at_ms = ?2, archive_reason = ?3 WHERE id = ?1",
        )?
        .execute(params![run.0, mark.archived_at_ms, mark.reason])?;
        tx.commit()?;
        Ok(ArchiveOutcome::Archived(mark))
    }

    /// The run's archive mark, if it is archived.
    pub fn archive_mark(&self, run: RunId) -> Result<Option<ArchiveMark>, Error> {
        let row: Option<(Option<i64>, Option<String>)> = self
            .conn
            .prepare_cached("SELECT archived_at_ms, archive_reason FROM runs WHERE id = ?1")?
            .query_row([run.0], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        match row {
            None => Err(Error::RunNotFound(run)),
            Some((at, reason)) => Ok(at.map(|archived_at_ms| ArchiveMark {
                archived_at_ms,
                reason,
            })),
        }
    }
}
