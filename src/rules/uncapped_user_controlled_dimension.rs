//! ## What it does
//! Reports a dimension named in `settings.user_controlled_dimensions`
//! (namespace, task queue, workflow type, worker id, request ids, …) that
//! a policy entry uses without a bound:
//!
//! - a metric that emits it as a label of a `finite_*` class: a value a
//!   user chooses is no fixed inventory, so the label must be `bounded_*`
//!   (its series capped at run time) or not a label at all
//!   (`request_scope_*`, `*_no_label`);
//! - a cache-key family that has it as a key segment but whose `ttl` names
//!   no expiry (no duration such as `60 seconds` or `2 minutes`, nor a bare
//!   number of seconds), or one longer than an hour: every new value a user sends is a new key, and
//!   only a short expiry bounds how many exist.
//!
//! A `ttl` that is missing or `TODO` is left to `missing-review-field`, and
//! a class outside the taxonomy to `unreviewed-cardinality-class`.
//!
//! ## Why is this bad?
//! The review rule for user-controlled dimensions is that they are capped
//! or expire quickly. A `finite_*` class or a key family without a stated
//! expiry passes every other rule while a client that sends a new task
//! queue or worker id per request grows the series set or the cache
//! without limit.
//!
//! ## Example
//! ```toml
//! [settings]
//! user_controlled_dimensions = ["namespace", "task_queue", "worker_id"]
//!
//! [metrics.dw_task_queue_depth]
//! dimensions = { task_queue = "finite_queues" }   # bounded_series, capped
//!
//! [cache_keys.worker_markers]
//! prefix = "server:worker-marker:"
//! dimensions = ["namespace", "worker_id"]
//! ttl = "Until the worker deregisters."   # "90 seconds from the last poll."
//! ```

use dwpolicy::CardinalityClass;

use super::Context;
use crate::base::diagnostic::Diagnostic;

pub(super) const CODE: &str = "uncapped-user-controlled-dimension";

/// The longest expiry that counts as quick for a key holding a
/// user-controlled segment.
const MAX_TTL_SECONDS: u64 = 3600;

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    let policy = ctx.policy();
    let user_controlled = &policy.settings.user_controlled_dimensions;
    let is_user_controlled = |name: &str| user_controlled.iter().any(|d| d == name);
    for metric in &policy.metrics {
        for dimension in metric.dimension_list() {
            if dimension.class() != CardinalityClass::Finite
                || !is_user_controlled(&dimension.name.value)
            {
                continue;
            }
            out.push(
                Diagnostic::new(
                    CODE,
                    format!("{}.{}", metric.name.value, dimension.name.value),
                    format!(
                        "`{}` is a user-controlled dimension, but `{}` emits it as a label of the fixed-inventory class \"{}\"",
                        dimension.name.value, metric.name.value, dimension.class.value
                    ),
                )
                .at(ctx.in_policy(dimension.class.span, "declared finite here"))
                .help("cap its series with a bounded_* class, or keep it out of labels (request_scope_*, *_no_label)"),
            );
        }
    }
    for cache in &policy.cache_keys {
        let Some(dimensions) = &cache.dimensions else {
            continue;
        };
        let Some(segment) = dimensions
            .value
            .iter()
            .find(|d| is_user_controlled(&d.value))
        else {
            continue;
        };
        let Some(ttl) = cache
            .ttl
            .as_ref()
            .filter(|t| !t.value.trim().is_empty() && t.value.trim() != "TODO")
        else {
            continue;
        };
        let problem = match longest_duration_seconds(&ttl.value) {
            None => "names no expiry".to_owned(),
            Some(seconds) if seconds > MAX_TTL_SECONDS => {
                format!(
                    "names an expiry of {seconds} s, over the hour a user-controlled key may live"
                )
            }
            Some(_) => continue,
        };
        out.push(
            Diagnostic::new(
                CODE,
                cache.id.value.clone(),
                format!(
                    "cache keys `{}` have the user-controlled segment `{}`, but their ttl {problem}",
                    cache.id.value, segment.value
                ),
            )
            .at(ctx.in_policy(ttl.span, "ttl here"))
            .related(ctx.in_policy(segment.span, "user-controlled segment"))
            .help("give the keys an expiry of at most an hour and state it in ttl (\"60 seconds from the latest write\")"),
        );
    }
}

/// The longest duration `text` states: a number (digits, or a number word
/// up to ninety) followed by a time unit (`ms`, `s`, `sec`, `second`,
/// `minute`, `min`, `hour`, `h`, `day`, plurals included), or the whole
/// text a number of seconds (`120`). `None` when it states none.
fn longest_duration_seconds(text: &str) -> Option<u64> {
    // A bare number is seconds, as the reference PHP policy writes a ttl.
    if let Ok(seconds) = text.trim().parse::<u64>() {
        return Some(seconds);
    }
    let words: Vec<&str> = text
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let mut longest = None;
    for pair in words.windows(2) {
        let Some(count) = number(pair[0]) else {
            continue;
        };
        let Some(unit) = unit_millis(pair[1]) else {
            continue;
        };
        let seconds = count.saturating_mul(unit) / 1000;
        longest = Some(longest.map_or(seconds, |l: u64| l.max(seconds)));
    }
    // `30s`, `500ms`: the number and the unit in one word.
    for word in &words {
        let digits = word.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits == word.len() {
            continue;
        }
        let (Ok(count), Some(unit)) = (word[..digits].parse::<u64>(), unit_millis(&word[digits..]))
        else {
            continue;
        };
        let seconds = count.saturating_mul(unit) / 1000;
        longest = Some(longest.map_or(seconds, |l: u64| l.max(seconds)));
    }
    longest
}

fn number(word: &str) -> Option<u64> {
    if let Ok(n) = word.parse::<u64>() {
        return Some(n);
    }
    const WORDS: [(&str, u64); 15] = [
        ("one", 1),
        ("two", 2),
        ("three", 3),
        ("four", 4),
        ("five", 5),
        ("six", 6),
        ("ten", 10),
        ("twelve", 12),
        ("fifteen", 15),
        ("twenty", 20),
        ("thirty", 30),
        ("forty", 40),
        ("fifty", 50),
        ("sixty", 60),
        ("ninety", 90),
    ];
    let lower = word.to_ascii_lowercase();
    WORDS.iter().find(|(w, _)| *w == lower).map(|(_, n)| *n)
}

fn unit_millis(word: &str) -> Option<u64> {
    Some(match word.to_ascii_lowercase().as_str() {
        "ms" | "millisecond" | "milliseconds" => 1,
        "s" | "sec" | "secs" | "second" | "seconds" => 1000,
        "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hour" | "hours" => 3_600_000,
        "day" | "days" => 86_400_000,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::longest_duration_seconds as longest;

    #[test]
    fn durations_are_read_from_review_prose() {
        assert_eq!(longest("60 seconds from the latest signal."), Some(60));
        assert_eq!(
            longest("Two minutes (120 seconds) for both the counter and the key"),
            Some(120)
        );
        assert_eq!(
            longest("15 minutes from the latest observation."),
            Some(900)
        );
        assert_eq!(longest("a lease of 500ms, retried after 30s"), Some(30));
        assert_eq!(longest("Kept for 7 days."), Some(604_800));
        assert_eq!(longest(" 120 "), Some(120));
        assert_eq!(longest("Until the worker deregisters."), None);
        assert_eq!(longest("server.ttl_seconds (90)"), None);
    }
}
