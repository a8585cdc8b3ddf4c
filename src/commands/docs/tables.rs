//! The inventory tables, rendered from the policy.
//!
//! The columns are those of the reference server's operator doc (Cache
//! Inventory, Polling Scan Limits, Metric Inventory), so operators read the
//! same table whichever tool wrote it. The policy is the single source: a
//! table row is its entry's fields, in policy file order.

use dwpolicy::{Policy, Spanned};

/// One generated table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// `cache-inventory`: Policy ID | Prefix | Owner | Growth Bound.
    CacheInventory,
    /// `scan-limits`: Policy ID | Config Key | Owner | Growth Bound.
    ScanLimits,
    /// `metric-inventory`: Metric | Surface | Label Policy.
    MetricInventory,
}

impl Table {
    /// Every table, in marker documentation order.
    pub const ALL: [Table; 3] = [
        Table::CacheInventory,
        Table::ScanLimits,
        Table::MetricInventory,
    ];

    /// The name used in markers.
    pub fn name(self) -> &'static str {
        match self {
            Table::CacheInventory => "cache-inventory",
            Table::ScanLimits => "scan-limits",
            Table::MetricInventory => "metric-inventory",
        }
    }

    /// The table's lines: header, separator, one row per entry.
    pub fn render(self, policy: &Policy) -> Vec<String> {
        let (header, rows): (&[&str], Vec<Vec<String>>) = match self {
            Table::CacheInventory => (
                &["Policy ID", "Prefix", "Owner", "Growth Bound"],
                policy
                    .cache_keys
                    .iter()
                    .map(|c| {
                        vec![
                            cell(&c.id.value),
                            code(&c.prefix),
                            code(&c.owner),
                            text(&c.bound),
                        ]
                    })
                    .collect(),
            ),
            Table::ScanLimits => (
                &["Policy ID", "Config Key", "Owner", "Growth Bound"],
                policy
                    .scan_limits
                    .iter()
                    .map(|s| {
                        vec![
                            cell(&s.id.value),
                            code(&s.config_key),
                            code(&s.owner),
                            text(&s.bound),
                        ]
                    })
                    .collect(),
            ),
            Table::MetricInventory => (
                &["Metric", "Surface", "Label Policy"],
                policy
                    .metrics
                    .iter()
                    .map(|m| {
                        let parts = [&m.cardinality, &m.selection, &m.suppression];
                        let label_policy: Vec<String> = parts
                            .into_iter()
                            .map(text)
                            .filter(|t| !t.is_empty())
                            .collect();
                        vec![
                            cell(&m.name.value),
                            text(&m.surface),
                            label_policy.join(" "),
                        ]
                    })
                    .collect(),
            ),
        };
        let mut lines = vec![row(header.iter().map(|h| h.to_string()))];
        lines.push(row(header.iter().map(|_| "---".to_owned())));
        lines.extend(rows.into_iter().map(|r| row(r.into_iter())));
        lines
    }
}

fn row(cells: impl Iterator<Item = String>) -> String {
    let cells: Vec<String> = cells.collect();
    format!("| {} |", cells.join(" | "))
}

/// One line, with `|` escaped so it cannot end the cell.
fn cell(value: &str) -> String {
    value
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn text(value: &Option<Spanned<String>>) -> String {
    value.as_ref().map(|v| cell(&v.value)).unwrap_or_default()
}

/// A code span; plain text when the value holds a backtick a span would end at.
fn code(value: &Option<Spanned<String>>) -> String {
    match value.as_ref().map(|v| cell(&v.value)) {
        Some(v) if !v.is_empty() && !v.contains('`') => format!("`{v}`"),
        Some(v) => v,
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_escape_pipes_and_fold_lines() {
        let policy = dwpolicy::load::load(
            "schema_version = 1\n[metrics.dw_x]\nsurface = \"GET /a|b\"\ncardinality = \"\"\"\nOne\n  series.\"\"\"\nselection = \"a | b\"\n",
        )
        .unwrap();
        assert_eq!(
            Table::MetricInventory.render(&policy),
            vec![
                "| Metric | Surface | Label Policy |",
                "| --- | --- | --- |",
                "| dw_x | GET /a\\|b | One series. a \\| b |",
            ]
        );
    }
}
