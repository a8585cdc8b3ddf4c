//! Worker sessions over HTTP: `POST /api/worker/sessions` (create, reuse or
//! reacquire), `POST /api/worker/sessions/{id}/heartbeat` (renew the holder
//! lease, never the TTL) and `DELETE /api/worker/sessions/{id}` (close for
//! good). Each answers the receipt both SDKs check: `admitted`, `outcome`
//! and the `session` (its options, `status`, `namespace`, `lease_owner`,
//! `lease_expires_at`, `ttl_expires_at`). Routing a session's activities to
//! its holder is the lease's business (`store::leases`).

use serde_json::{json, Value};

use crate::server::error::finish_with;
use crate::server::wire::Checks;
use crate::server::worker::session_wire;
use crate::server::{ApiError, Engine};
use crate::store::sessions::{
    Refused, SessionOptions, MAX_NAMESPACE_SESSIONS, MAX_SESSION_SECONDS,
};

impl Engine {
    /// `POST /api/worker/sessions`.
    pub fn create_worker_session(&self, namespace: &str, body: Value) -> Result<Value, ApiError> {
        let worker = self.session_worker(namespace, &body)?;
        let options = SessionOptions::from_wire(&body, "session").map_err(|problems| {
            let problems: Vec<(String, String)> = problems
                .into_iter()
                .map(|(field, problem)| {
                    let field = field.trim_start_matches("session.").to_owned();
                    (field, problem)
                })
                .collect();
            match finish_with(self.config.request_limits.validator(), &[], &problems) {
                Err(e) => ApiError::Boundary(e),
                Ok(()) => ApiError::Internal("session options".into()),
            }
        })?;
        let (ns, owner) = (namespace.to_owned(), worker.clone());
        let queue = self.read({
            let (ns, owner) = (ns.clone(), owner.clone());
            move |s| s.worker_queue(&ns, &owner)
        })?;
        let Some(queue) = queue else {
            return Err(ApiError::WorkerNotFound(worker));
        };
        // An explicit create creates whatever create_if_missing says (that
        // flag is for activities that name a session nobody created).
        let acquired = self.write(move |s| {
            s.acquire_worker_session(&ns, &owner, &queue, &options, true, MAX_NAMESPACE_SESSIONS)
        })?;
        match acquired {
            Ok((session, outcome)) => Ok(receipt(outcome.as_str(), &session.lease())),
            Err(refused) => Err(refusal(&refused, &body)),
        }
    }

    /// `POST /api/worker/sessions/{id}/heartbeat`.
    pub fn heartbeat_worker_session(
        &self,
        namespace: &str,
        session_id: &str,
        body: Value,
    ) -> Result<Value, ApiError> {
        let worker = self.session_worker(namespace, &body)?;
        let lease = match body.get("lease_seconds") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().filter(|n| (1..=MAX_SESSION_SECONDS).contains(n)).ok_or_else(
                || {
                    let mut checks = Checks::default();
                    checks.problem(
                        "lease_seconds",
                        format!("The lease_seconds field must be an integer from 1 to {MAX_SESSION_SECONDS}."),
                    );
                    match finish_with(self.config.request_limits.validator(), &[], &checks.problems) {
                        Err(e) => ApiError::Boundary(e),
                        Ok(()) => ApiError::Internal("lease_seconds".into()),
                    }
                },
            )?),
        };
        let (ns, id) = (namespace.to_owned(), session_id.to_owned());
        let renewed = self.write(move |s| {
            let lease = match lease {
                Some(n) => n,
                None => match s.worker_session(&ns, &id)? {
                    Some(session) => u64::try_from(session.lease_seconds).unwrap_or(120),
                    None => 120,
                },
            };
            s.renew_worker_session(&ns, &id, &worker, lease)
        })?;
        match renewed {
            Ok(session) => Ok(receipt("heartbeat_recorded", &session.lease())),
            Err(refused) => Err(refusal(&refused, &json!({ "session_id": session_id }))),
        }
    }

    /// `DELETE /api/worker/sessions/{id}`.
    pub fn close_worker_session(
        &self,
        namespace: &str,
        session_id: &str,
        body: Value,
    ) -> Result<Value, ApiError> {
        let worker = self.session_worker(namespace, &body)?;
        let reason = body
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or("closed")
            .chars()
            .take(255)
            .collect::<String>();
        let (ns, id) = (namespace.to_owned(), session_id.to_owned());
        let closed = self.write(move |s| s.close_worker_session(&ns, &id, &worker, &reason))?;
        match closed {
            Ok((session, again)) => Ok(receipt(
                if again { "already_closed" } else { "closed" },
                &session.lease(),
            )),
            Err(refused) => Err(refusal(&refused, &json!({ "session_id": session_id }))),
        }
    }

    /// The body's `worker_id`, checked and registered.
    fn session_worker(&self, namespace: &str, body: &Value) -> Result<String, ApiError> {
        let worker = body
            .get("worker_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let mut v = self.config.request_limits.validator();
        v.text("worker_id", &worker, dwpolicy::boundary::MAX_NAME_CHARS);
        finish_with(v, &[("worker_id", &worker)], &[])?;
        let idle_before = self.config.worker_sweep.idle_before_ms(crate::unix_ms());
        let (ns, w) = (namespace.to_owned(), worker.clone());
        if !self.read(move |s| s.worker_registered(&ns, &w, idle_before))? {
            return Err(ApiError::WorkerNotFound(worker));
        }
        Ok(worker)
    }
}

/// The receipt both SDKs check.
fn receipt(outcome: &str, session: &crate::store::dispatch::SessionLease) -> Value {
    json!({ "admitted": true, "outcome": outcome, "session": session_wire(session) })
}

/// A refused session call: 404 for an unknown session, 409 otherwise, with
/// the reason the SDKs and operators read.
fn refusal(refused: &Refused, body: &Value) -> ApiError {
    let session_id = body.get("session_id").cloned().unwrap_or(Value::Null);
    let (status, message, details) = match refused {
        Refused::NotFound => (
            404,
            "No such worker session: create it first (POST /api/worker/sessions).".to_owned(),
            json!({ "session_id": session_id }),
        ),
        Refused::Held(holder) => (
            409,
            format!("Worker {holder:?} holds this session; only its holder may use it until its lease lapses."),
            json!({ "session_id": session_id, "lease_owner": holder }),
        ),
        Refused::Unqualified(missing) => (
            409,
            "This worker did not register for worker_sessions or does not name every requirement of the session among its capabilities.".to_owned(),
            json!({ "session_id": session_id, "missing_requirements": missing }),
        ),
        Refused::WorkerCapacity(max) => (
            409,
            format!("This worker already holds {max} sessions, its max_concurrent_worker_sessions: close one first."),
            json!({ "session_id": session_id, "max_concurrent_worker_sessions": max }),
        ),
        Refused::NamespaceCapacity(max) => (
            409,
            format!("The namespace keeps {max} worker sessions, the most this server keeps: close sessions, or wait for ended ones to be swept."),
            json!({ "session_id": session_id, "limit": max }),
        ),
        Refused::Ended(reason) => (
            409,
            format!("The session has ended ({reason}); an ended session id cannot be used again."),
            json!({ "session_id": session_id }),
        ),
        Refused::OptionsConflict => (
            409,
            "The session exists with other options; a session's options never change.".to_owned(),
            json!({ "session_id": session_id }),
        ),
    };
    // The service catalog's refusal shape: status, reason, message, details.
    ApiError::ServiceCatalog {
        status,
        reason: refused.reason(),
        message,
        details,
    }
}
