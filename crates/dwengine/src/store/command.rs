//! The commands a fan-out is made of, and what they produce.
//!
//! `all()` takes a tree of commands so that nested fan-outs count every leaf
//! toward `command_batch_size`; keeping the tree and its leaf count here
//! leaves the task module to the executor's checks and replay.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::store::model::{ActivityId, RunId, TimerId};

/// A child workflow to start.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChildWorkflow {
    /// The child's workflow id.
    pub workflow_id: String,
    /// The child's type.
    pub workflow_type: String,
    /// Its start arguments (checked against `payload_size_bytes`).
    pub arguments: Value,
}

/// One operation of a fan-out.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Schedule an activity.
    Activity {
        /// The activity type.
        activity_type: String,
        /// Its arguments (checked against `payload_size_bytes`).
        arguments: Value,
    },
    /// Start a timer.
    Timer {
        /// How long it waits.
        delay: Duration,
    },
    /// Start a child workflow.
    Child(ChildWorkflow),
    /// A nested fan-out; its leaves count toward the outer batch.
    All(Vec<Command>),
}

impl Command {
    /// An activity command.
    pub fn activity(activity_type: impl Into<String>, arguments: Value) -> Command {
        Command::Activity {
            activity_type: activity_type.into(),
            arguments,
        }
    }

    /// The number of leaf operations (activities, timers, children) it holds.
    pub fn leaves(&self) -> u64 {
        match self {
            Command::All(inner) => inner.iter().map(Command::leaves).sum(),
            _ => 1,
        }
    }
}

/// What a command produced, in the shape of the command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandOutput {
    /// A scheduled activity.
    Activity(ActivityId),
    /// A started timer.
    Timer(TimerId),
    /// A started child run.
    Child(RunId),
    /// A nested fan-out's outputs.
    All(Vec<CommandOutput>),
}
