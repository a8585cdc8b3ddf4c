//! The policy IDs an operator doc already uses, so `init` writes those
//! instead of inventing its own.
//!
//! A tree that adopts the gate often has its inventory written down already:
//! a markdown table whose first column is the ID and another column the
//! prefix or config key (`| long_poll_signals | server:long-poll-signal: |`).
//! An invented ID (`long_poll_signal`) would turn every such row into a
//! `doc-missing-mention` on the first `check`. Only table rows count: in
//! prose, which word names which surface is a guess.

use std::collections::HashMap;

/// Surface (a prefix or a config key, as written in the doc) → the ID in
/// the same table row.
#[derive(Debug, Default)]
pub struct DocIds {
    by_surface: HashMap<String, String>,
}

impl DocIds {
    /// Reads the tables of every doc text.
    pub fn from_docs<'t>(texts: impl IntoIterator<Item = &'t str>) -> Self {
        let mut ids = DocIds::default();
        for text in texts {
            for line in text.lines() {
                ids.table_row(line);
            }
        }
        ids
    }

    fn table_row(&mut self, line: &str) {
        let Some(row) = line.trim().strip_prefix('|') else {
            return;
        };
        let mut cells = row.split('|').map(cell_text);
        let Some(id) = cells.next().filter(|id| is_policy_id(id)) else {
            return;
        };
        for surface in cells.filter(|c| !c.is_empty() && !c.contains(char::is_whitespace)) {
            // The first row naming a surface wins, as the first table does.
            self.by_surface
                .entry(surface.to_owned())
                .or_insert_with(|| id.to_owned());
        }
    }

    /// The doc's ID for a cache prefix.
    pub fn for_prefix(&self, prefix: &str) -> Option<&str> {
        self.by_surface.get(prefix).map(String::as_str)
    }

    /// The doc's ID for a scan-limit config key: the key as found, or a
    /// dotted form of it (`polling.x_scan_limit` ~ `server.polling.x_scan_limit`).
    pub fn for_config_key(&self, key: &str) -> Option<&str> {
        self.by_surface.get(key).map(String::as_str).or_else(|| {
            self.by_surface
                .iter()
                .filter(|(surface, _)| crate::inventory::config_key_matches(surface, key))
                .map(|(_, id)| id.as_str())
                .min()
        })
    }
}

/// A cell without blanks and code backticks.
fn cell_text(cell: &str) -> &str {
    cell.trim().trim_matches('`').trim()
}

/// What a TOML bare key an ID can be: `[a-z][a-z0-9_]*`. Header cells
/// ("Policy ID") and metric names are excluded by the caller's lookups.
fn is_policy_id(cell: &str) -> bool {
    let mut chars = cell.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_come_from_the_first_column_of_a_table_row() {
        let doc = "\
| Policy ID | Prefix | Owner |
| --- | --- | --- |
| `long_poll_signals` | `server:long-poll-signal:` | `App\\Support\\LongPollSignalStore` |
|readiness_probe|server:readiness:|x|
| due_timer_recovery | `server.polling.due_timer_recovery_scan_limit` | x |

The long_poll_signal surface uses server:long-poll-wait: (prose: ignored).
| Not An Id | `server:other:` |
";
        let ids = DocIds::from_docs([doc]);
        assert_eq!(
            ids.for_prefix("server:long-poll-signal:"),
            Some("long_poll_signals")
        );
        assert_eq!(ids.for_prefix("server:readiness:"), Some("readiness_probe"));
        assert_eq!(ids.for_prefix("server:long-poll-wait:"), None);
        assert_eq!(ids.for_prefix("server:other:"), None);
        assert_eq!(
            ids.for_config_key("server.polling.due_timer_recovery_scan_limit"),
            Some("due_timer_recovery")
        );
        assert_eq!(
            ids.for_config_key("polling.due_timer_recovery_scan_limit"),
            Some("due_timer_recovery")
        );
        assert_eq!(ids.for_config_key("other_scan_limit"), None);
    }
}
