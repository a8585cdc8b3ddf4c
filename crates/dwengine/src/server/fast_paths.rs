//! Which starts and worker reports an async HTTP thread may answer itself,
//! awaiting the writer there instead of handing the request to a blocking
//! thread (docs/performance.md, "Starts without the blocking pool" and
//! "Worker reports without the blocking pool"). A request may take that
//! fast path only when no step on its way can block, and which steps a
//! request needs is said once per request kind, here: [`Engine::start_steps`],
//! [`Engine::completion_steps`] and [`Engine::report_steps`]. The ordinary
//! path runs the steps they name; the fast path declines a request for
//! which [`StartSteps::blocking`] (and its siblings) names a reason. A new
//! step that may block is a new field here, so both paths follow it.

use serde_json::Value;

use crate::server::external_payloads::references_external_payloads;
use crate::server::wire::{ActivityReport, StartWorkflow, WorkflowTaskLease};
use crate::server::Engine;
use crate::store::WorkflowCommand;

/// Why a request takes the blocking pool: the first step on its way that
/// may block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocking {
    /// PostgreSQL or a Redis cache ([`Engine::writes_from_async`]): a
    /// write, or the wake after it, may wait on the network.
    SharedBackends,
    /// A namespace with a request cap: admission counts the request in
    /// the cache.
    CappedNamespace,
    /// An external payload reference: each is read from the store.
    ExternalPayloads,
    /// Message stream cursors or waits: the run's streams are read.
    MessageStreams,
    /// Search-attribute upserts: the run and the registered attributes
    /// are read.
    SearchAttributeUpserts,
    /// A service call's workflow started with a memo or search
    /// attributes: checked against the registered attributes of the
    /// namespace it starts in.
    ServiceCallOptions,
}

/// The steps a start needs besides its transaction ([`Engine::start_steps`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartSteps {
    shared_backends: bool,
    /// The namespace has a request cap: the start is admitted through the
    /// cache.
    pub(crate) admission: bool,
    /// The input names external payloads: each is verified against the
    /// store, and the start changes their reference counts (so it does
    /// not commit in a start batch beside other nodes' starts).
    pub(crate) payload_references: bool,
    /// Search attributes are given: they are checked against the
    /// registered ones (read on an idle reader on the fast path, which
    /// declines while none is idle).
    pub(crate) registered_attributes: bool,
}

impl StartSteps {
    /// Why the start must take the blocking pool; `None`: it may be
    /// answered on the async thread.
    pub fn blocking(&self) -> Option<Blocking> {
        [
            (self.shared_backends, Blocking::SharedBackends),
            (self.admission, Blocking::CappedNamespace),
            (self.payload_references, Blocking::ExternalPayloads),
        ]
        .into_iter()
        .find_map(|(needed, why)| needed.then_some(why))
    }
}

/// The steps a workflow task completion needs besides its transaction
/// ([`Engine::completion_steps`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletionSteps {
    shared_backends: bool,
    /// The commands name external payloads: each is verified against the
    /// store.
    pub(crate) payload_references: bool,
    /// Message stream cursors or waits: checked against the run's streams.
    pub(crate) message_streams: bool,
    /// Search-attribute upserts: checked against the run and the
    /// registered attributes.
    pub(crate) upserts: bool,
    /// A service call's workflow started with a memo or search attributes.
    pub(crate) service_call_options: bool,
}

impl CompletionSteps {
    /// Why the completion must take the blocking pool; `None`: it may be
    /// answered on the async thread (a sticky claim's run is then read on
    /// an idle reader, and the completion declines while none is idle).
    pub fn blocking(&self) -> Option<Blocking> {
        [
            (self.shared_backends, Blocking::SharedBackends),
            (self.payload_references, Blocking::ExternalPayloads),
            (self.message_streams, Blocking::MessageStreams),
            (self.upserts, Blocking::SearchAttributeUpserts),
            (self.service_call_options, Blocking::ServiceCallOptions),
        ]
        .into_iter()
        .find_map(|(needed, why)| needed.then_some(why))
    }
}

/// The steps an activity attempt's report needs besides its transaction
/// ([`Engine::report_steps`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportSteps {
    shared_backends: bool,
    /// The result names external payloads: each is verified against the
    /// store.
    pub(crate) payload_references: bool,
}

impl ReportSteps {
    /// Why the report must take the blocking pool; `None`: it may be
    /// answered on the async thread.
    pub fn blocking(&self) -> Option<Blocking> {
        [
            (self.shared_backends, Blocking::SharedBackends),
            (self.payload_references, Blocking::ExternalPayloads),
        ]
        .into_iter()
        .find_map(|(needed, why)| needed.then_some(why))
    }
}

impl Engine {
    /// The steps a start of `body` in `namespace` needs: what the ordinary
    /// start runs, and whether [`Engine::start_workflow_now`] may take it.
    pub fn start_steps(&self, namespace: &str, body: &StartWorkflow) -> StartSteps {
        StartSteps {
            shared_backends: !self.writes_from_async(),
            admission: self.namespaces.is_capped(namespace),
            payload_references: references_external_payloads(&[("input", &body.input)]),
            registered_attributes: body
                .search_attributes
                .as_ref()
                .is_some_and(|search| !search.is_empty()),
        }
    }

    /// The steps a workflow task completion of `body` with its parsed
    /// `commands` needs: what the ordinary completion runs, and whether
    /// [`Engine::complete_workflow_task_now`] may take it.
    pub fn completion_steps(
        &self,
        body: &WorkflowTaskLease,
        commands: &[WorkflowCommand],
    ) -> CompletionSteps {
        let payloads: Vec<(&str, &Value)> = body.commands.iter().map(|c| ("commands", c)).collect();
        CompletionSteps {
            shared_backends: !self.writes_from_async(),
            payload_references: references_external_payloads(&payloads),
            message_streams: body.message_stream_cursors.is_some()
                || body.message_stream_waits.is_some(),
            upserts: commands
                .iter()
                .any(|c| matches!(c, WorkflowCommand::UpsertSearchAttributes { .. })),
            service_call_options: service_starts_with_options(commands),
        }
    }

    /// The steps an activity attempt's report of `body` needs: what the
    /// ordinary report runs, and whether [`Engine::report_activity_now`]
    /// may take it.
    pub fn report_steps(&self, body: &ActivityReport) -> ReportSteps {
        ReportSteps {
            shared_backends: !self.writes_from_async(),
            payload_references: references_external_payloads(&[("result", &body.result)]),
        }
    }
}

/// Whether a completion starts a service call's workflow with a memo or
/// search attributes (checked before it is written).
pub(crate) fn service_starts_with_options(commands: &[WorkflowCommand]) -> bool {
    commands.iter().any(|c| {
        matches!(c, WorkflowCommand::StartServiceOperation { memo, search_attributes, .. }
            if memo.is_some() || search_attributes.is_some())
    })
}

/// A completion's sticky claim, if it makes one (`null` makes none).
pub(crate) fn sticky_claim(body: &WorkflowTaskLease) -> Option<&Value> {
    body.sticky_cache.as_ref().filter(|claim| !claim.is_null())
}
