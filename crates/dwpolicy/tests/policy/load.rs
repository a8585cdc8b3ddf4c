//! The loader on the repository's real policy and on every broken variant
//! of it that a careless edit could produce: it must report, never panic.

use dwpolicy::load::load;
use dwpolicy::Policy;

const ENGINE_POLICY: &str = include_str!("../../../../policy/dw-bounded-growth.toml");

#[test]
fn the_engine_policy_loads_and_passes_review() {
    let policy = Policy::from_toml_str(ENGINE_POLICY).expect("engine policy is reviewed");
    assert!(!policy.cache_keys.is_empty());
    assert!(policy.metric("dw_workflow_runs_total").is_some());
}

#[test]
fn every_truncation_loads_or_reports_without_panicking() {
    for end in (0..=ENGINE_POLICY.len()).filter(|i| ENGINE_POLICY.is_char_boundary(*i)) {
        let _ = load(&ENGINE_POLICY[..end]);
    }
}

#[test]
fn single_character_corruptions_load_or_report_without_panicking() {
    // Every position is corrupted, each with one of the replacements in
    // turn: all six at every position cost a minute of a debug build once
    // the engine's policy had grown, and the fuzz target
    // (fuzz/fuzz_targets/policy.rs) covers arbitrary corruptions.
    const REPLACEMENTS: [char; 6] = ['"', '[', '=', '\n', '{', 'é'];
    let mut reported = 0;
    for (nth, (at, _)) in ENGINE_POLICY.char_indices().enumerate() {
        let replacement = REPLACEMENTS[nth % REPLACEMENTS.len()];
        let mut text = ENGINE_POLICY.to_owned();
        let len = text[at..].chars().next().map_or(0, char::len_utf8);
        text.replace_range(at..at + len, &replacement.to_string());
        if let Err(errors) = load(&text) {
            reported += 1;
            for error in &errors.errors {
                if let Some(span) = error.span {
                    assert!(
                        span.start <= span.end && span.end <= text.len(),
                        "{error:?}"
                    );
                }
            }
        }
    }
    assert!(reported > 0, "corruptions must be reported");
}

#[test]
fn structural_errors_are_all_collected_with_spans() {
    let text = "schema_version = 2\nbogus = 1\n[sources]\ncache = \"src\"\n[metrics.dw_x]\ndimensions = [\"a\"]\n";
    let errors = load(text).unwrap_err().errors;
    let messages: Vec<&str> = errors.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(errors.len(), 4, "{messages:?}");
    assert!(messages
        .iter()
        .any(|m| m.contains("unsupported schema_version 2")));
    assert!(messages.iter().any(|m| m.contains("unknown key `bogus`")));
    assert!(messages
        .iter()
        .any(|m| m.contains("`sources.cache` must be an array of strings, found string")));
    assert!(messages
        .iter()
        .any(|m| m.contains("`metrics.dw_x.dimensions` must be a table")));
    assert!(errors.iter().all(|e| e.span.is_some()));
}

#[test]
fn an_overlapping_prefix_is_reported_against_its_nearest_cover() {
    let mut text = String::from("schema_version = 1\n");
    for (id, prefix) in [
        ("a", "server:a:"),
        ("ab", "server:a:b:"),
        ("abc", "server:a:b:c:"),
        ("ab_again", "server:a:b:"),
        ("e", "server:é:"),
        ("ex", "server:é:x:"),
        ("other", "server:b:"),
        ("empty", ""),
    ] {
        text.push_str(&format!("[cache_keys.{id}]\nprefix = \"{prefix}\"\n"));
    }
    let policy = load(&text).expect("loads");
    let pairs: Vec<String> = dwpolicy::checks::overlapping_cache_prefixes(&policy)
        .into_iter()
        .map(|f| f.message)
        .collect();
    assert_eq!(
        pairs,
        [
            "prefix `server:a:b:` of `ab` is covered by `server:a:` of `a`, so key ownership is ambiguous",
            "prefix `server:a:b:c:` of `abc` is covered by `server:a:b:` of `ab`, so key ownership is ambiguous",
            "prefix `server:a:b:` of `ab_again` is covered by `server:a:b:` of `ab`, so key ownership is ambiguous",
            "prefix `server:é:x:` of `ex` is covered by `server:é:` of `e`, so key ownership is ambiguous",
        ]
    );
}
