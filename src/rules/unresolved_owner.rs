//! ## What it does
//! Reports a policy `owner` that names nothing in the tree. An owner is one
//! of:
//! - a Rust path to an item defined in the scanned sources (struct, enum,
//!   union, trait, type alias, fn, const, static, mod or macro, keyed by
//!   crate name and module path, inline `mod` blocks included);
//! - a PHP class, interface, trait or enum, `App\Support\Foo`, declared
//!   through the file's `namespace`, or whose file the `autoload.psr-4` map
//!   of the root's `composer.json` points at;
//! - a Python module by its dotted path (`scripts.perf.harness`, from the
//!   file `scripts/perf/harness.py`), or a top-level class or function in it
//!   (`scripts.perf.harness:Harness` or `scripts.perf.harness.Harness`);
//! - a Go type or function as `package.Type`;
//! - a path, relative to the checked root, of a file that exists.
//!
//! ## Why is this bad?
//! The owner is who answers for the surface's bound. An owner that was
//! renamed or deleted leaves the surface orphaned, and reviewers cannot find
//! the code that enforces the TTL or cap the entry promises.
//!
//! ## Example
//! ```toml
//! [cache_keys.long_poll_signals]
//! owner = "dwengine::polling::LongPollSignals"   # the type is LongPollSignalStore
//! ```

use super::Context;
use crate::base::diagnostic::Diagnostic;
use dwpolicy::Spanned;

pub(super) const CODE: &str = "unresolved-owner";

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    let policy = ctx.policy();
    let owners = policy
        .cache_keys
        .iter()
        .map(|c| (&c.id, &c.owner))
        .chain(policy.scan_limits.iter().map(|s| (&s.id, &s.owner)))
        .chain(policy.metrics.iter().map(|m| (&m.name, &m.owner)));
    for (id, owner) in owners {
        let Some(owner) = owner else { continue };
        if owner.value.trim().is_empty() || resolves(ctx, owner) {
            continue;
        }
        out.push(
            Diagnostic::new(
                CODE,
                id.value.clone(),
                format!("owner `{}` of `{}` names nothing in the tree", owner.value, id.value),
            )
            .at(ctx.in_policy(owner.span, "not found"))
            .help("use the item's full path (crate::module::Type, App\\Support\\Type, package.module:Class, package.Type) or a file path relative to the checked root"),
        );
    }
}

fn resolves(ctx: &Context, owner: &Spanned<String>) -> bool {
    let owner = owner.value.trim();
    let as_path = strip_all(strip_all(owner, "crate::"), "::").trim_start_matches('\\');
    ctx.inventory.items.contains(as_path)
        || is_tree_file(ctx, owner)
        || psr4_file(ctx, as_path).is_some_and(|file| is_tree_file(ctx, &file))
        || python_module_file(as_path)
            .iter()
            .any(|file| is_tree_file(ctx, file))
}

/// `text` without any leading repeats of `prefix`: what
/// `trim_start_matches(prefix)` returns, without building a substring
/// searcher for each of a large policy's thousands of owners.
fn strip_all<'t>(mut text: &'t str, prefix: &str) -> &'t str {
    if prefix.is_empty() {
        return text;
    }
    while let Some(rest) = text.strip_prefix(prefix) {
        text = rest;
    }
    text
}

fn is_tree_file(ctx: &Context, owner: &str) -> bool {
    let relative = std::path::Path::new(owner);
    !owner.contains("::")
        && relative.is_relative()
        && !relative
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        && ctx.root.join(relative).is_file()
}

/// The file PSR-4 autoloading would load `App\Support\Foo` from, through
/// the root's `composer.json` (`autoload` and `autoload-dev`).
fn psr4_file(ctx: &Context, class: &str) -> Option<String> {
    if !class.contains('\\') {
        return None;
    }
    let text = std::fs::read_to_string(ctx.root.join("composer.json")).ok()?;
    let composer: serde_json::Value = serde_json::from_str(&text).ok()?;
    for section in ["autoload", "autoload-dev"] {
        let Some(map) = composer[section]["psr-4"].as_object() else {
            continue;
        };
        // The longest matching namespace prefix wins, as in Composer.
        let mut prefixes: Vec<_> = map.iter().collect();
        prefixes.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        for (prefix, dirs) in prefixes {
            let Some(rest) = class.strip_prefix(prefix.as_str()) else {
                continue;
            };
            let dirs = match dirs {
                serde_json::Value::Array(list) => list.iter().filter_map(|d| d.as_str()).collect(),
                other => other.as_str().into_iter().collect::<Vec<_>>(),
            };
            for dir in dirs {
                let dir = dir.trim_end_matches('/');
                let file = format!("{dir}/{}.php", rest.replace('\\', "/"));
                let file = file.trim_start_matches('/').to_owned();
                if is_tree_file(ctx, &file) {
                    return Some(file);
                }
            }
        }
    }
    None
}

/// `scripts.perf.harness` → `scripts/perf/harness.py` or the package's
/// `scripts/perf/harness/__init__.py`.
fn python_module_file(owner: &str) -> Vec<String> {
    let dotted = owner.contains('.')
        && owner.split('.').all(|part| {
            !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        });
    if !dotted {
        return Vec::new();
    }
    let path = owner.replace('.', "/");
    vec![format!("{path}.py"), format!("{path}/__init__.py")]
}

#[cfg(test)]
mod tests {
    #[test]
    fn strip_all_trims_like_trim_start_matches() {
        let texts = [
            "",
            "crate::",
            "crate::crate::a::B",
            "::a",
            ":::a",
            "crate:a",
            "crate::::x",
            "a::crate::b",
        ];
        for text in texts {
            for prefix in ["crate::", "::"] {
                assert_eq!(
                    super::strip_all(text, prefix),
                    text.trim_start_matches(prefix),
                    "{text:?} {prefix:?}"
                );
            }
        }
        assert_eq!(super::strip_all("crate::crate::a", "crate::"), "a");
        assert_eq!(super::strip_all("a", ""), "a");
    }
}
