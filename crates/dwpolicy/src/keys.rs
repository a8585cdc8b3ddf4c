//! The keys a policy may hold, one list per table, and the rule severities.
//!
//! Both readers of a policy check keys against these lists: the full loader
//! (`load`) to name an unknown key and its nearest valid one, and the fast
//! path (`fast`) to hand anything it does not know back to the loader. The
//! lists sit below both readers, so the fast path never imports the loader
//! (the loader calls the fast path first); this module uses nothing.

/// Keys valid at the top level of a policy.
pub const TOP_KEYS: &[&str] = &[
    "schema_version",
    "sources",
    "settings",
    "cache_keys",
    "scan_limits",
    "metrics",
    "rules",
];
/// Keys valid in `[sources]`.
pub const SOURCE_KEYS: &[&str] = &["cache", "metrics", "docs", "remote_write", "exclude"];
/// Keys valid in `[settings]`.
pub const SETTING_KEYS: &[&str] = &[
    "cache_namespace",
    "metric_prefix",
    "user_controlled_dimensions",
    "per_run_labels",
];
/// Fields valid in a `[cache_keys.<id>]` entry.
pub const CACHE_KEYS: &[&str] = &[
    "owner",
    "prefix",
    "dimensions",
    "ttl",
    "bound",
    "admission",
    "eviction",
];
/// Fields valid in a `[scan_limits.<id>]` entry.
pub const SCAN_KEYS: &[&str] = &["owner", "config_key", "default", "bound"];
/// Fields valid in a `[metrics.<name>]` entry.
pub const METRIC_KEYS: &[&str] = &[
    "owner",
    "surface",
    "dimensions",
    "cardinality",
    "selection",
    "suppression",
];
/// The severities a `[rules]` entry may name.
pub(crate) const SEVERITY_LEVELS: &[&str] = &["allow", "warn", "error"];
