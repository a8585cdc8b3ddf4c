//! ## What it does
//! Reports a cache-key literal in a cache source whose normalized prefix no
//! `[cache_keys.*]` entry covers. The literal is cut at its first format
//! placeholder and back to its last `:`; a declared prefix covers it when the
//! normalized prefix starts with the declared one.
//!
//! A key is recognised by shape and place: the cache namespace must start
//! the literal (or follow a Redis command such as `GET`, `SET`, `DEL`,
//! `KEYS`, `MATCH` or `--pattern` inside it) and be followed by a family
//! segment and `:` (`server:<family>:`). So image references
//! (`durableworkflow/server:0.2`), URLs and `host:port` pairs
//! (`http://server:8080`) and command names (`server:bootstrap`) are not
//! keys. A fixed key needs a family segment too: write `server:lock:main`,
//! not `server:lock`. A key whose family is a placeholder (`server:{}`,
//! `server:%s:…`) is reported with advice to write the family literally,
//! since a prefix of just the namespace is not allowed.
//!
//! ## Why is this bad?
//! Every key family in the server's cache namespace grows with user input
//! (namespaces, queues, request IDs). A family that ships without a reviewed
//! TTL, admission rule, bound and eviction path is how an operator's Redis
//! fills up during a soak. The gate makes the review happen in the same
//! change that adds the key.
//!
//! ## Example
//! ```rust
//! // crates/dwengine/src/polling.rs
//! let key = format!("server:poll-hint:{namespace}:{queue}");
//! ```
//! fails until the policy declares the family:
//! ```toml
//! [cache_keys.poll_hints]
//! owner = "dwengine::polling::PollHints"
//! prefix = "server:poll-hint:"
//! dimensions = ["namespace", "task_queue"]
//! ttl = "30 seconds."
//! bound = "One key per (namespace, task queue) polled in the last 30 seconds."
//! admission = "Written only by registered workers' polls."
//! eviction = "TTL only; no index is kept."
//! ```

use super::Context;
use crate::base::diagnostic::Diagnostic;
use crate::inventory::normalize::Declared;

pub(super) const CODE: &str = "undeclared-cache-prefix";

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    let declared = Declared::new(
        ctx.policy()
            .cache_keys
            .iter()
            .filter_map(|c| c.prefix.as_ref().map(|p| p.value.as_str())),
    );
    let namespace = &ctx.policy().settings.cache_namespace;
    for usage in &ctx.inventory.cache_uses {
        if usage.prefix == *namespace {
            // Declaring the bare namespace is what `cache-prefix-namespace`
            // forbids, so the advice is about the code, not the policy.
            out.push(
                Diagnostic::new(
                    CODE,
                    usage.prefix.clone(),
                    format!("cache key `{}` computes its family right after `{namespace}`", usage.value),
                )
                .at(usage.anchor.clone())
                .help(format!(
                    "write the family as a literal segment (`{namespace}<family>:…`) and declare that prefix in {}; a prefix of just `{namespace}` would claim the whole namespace",
                    ctx.policy_file.display_path
                )),
            );
            continue;
        }
        if declared.cover(&usage.prefix) {
            continue;
        }
        out.push(
            Diagnostic::new(
                CODE,
                usage.prefix.clone(),
                format!("cache prefix `{}` is not declared in the policy", usage.prefix),
            )
            .at(usage.anchor.clone())
            .help(format!(
                "declare a [cache_keys.<id>] entry with prefix = \"{}\" and its owner, dimensions, ttl, bound, admission and eviction in {}",
                usage.prefix, ctx.policy_file.display_path
            )),
        );
    }
}
