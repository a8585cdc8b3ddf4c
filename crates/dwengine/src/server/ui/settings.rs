//! The console's settings: whether `/ui` is served, and the caps that keep
//! its filtered pages and its chart sampler bounded.
//!
//! Read like every other setting (environment variable, config-file key,
//! listed by `dwserver contract`); the defaults serve the console.

/// How the console is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UiSettings {
    /// Serve `/ui` (`server.ui.enabled`, `DW_SERVER_UI_ENABLED`; default on).
    pub enabled: bool,
    /// Rows one filtered console page examines at most
    /// (`server.ui.filter_scan_limit`): a search-attribute filter on the
    /// runs list and each table of the exceptions page.
    pub filter_scan_limit: usize,
    /// `dw_*` series the chart sampler keeps at most
    /// (`server.ui.chart_series_scan_limit`); each keeps
    /// [`CHART_SAMPLES`] samples.
    pub chart_series_scan_limit: usize,
    /// How often the chart sampler reads the metrics (default
    /// [`SAMPLE_EVERY`]; tests sample faster).
    pub sample_every: std::time::Duration,
}

/// The default of [`UiSettings::filter_scan_limit`].
pub const DEFAULT_FILTER_SCAN_LIMIT: usize = 1_000;
/// The default of [`UiSettings::chart_series_scan_limit`].
pub const DEFAULT_CHART_SERIES_SCAN_LIMIT: usize = 24;
/// Samples kept per charted series: 10 minutes at one sample per [`SAMPLE_EVERY`].
pub const CHART_SAMPLES: usize = 120;
/// How often the chart sampler reads the node's metrics.
pub const SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// The configuration key that turns the console on or off
/// (`DW_SERVER_UI_ENABLED`).
pub const ENABLED_KEY: &str = "server.ui.enabled";
/// The configuration key of the filter scan cap (a `*_scan_limit` key the
/// policy declares).
pub const FILTER_SCAN_LIMIT_KEY: &str = "server.ui.filter_scan_limit";
/// The configuration key of the sampler's series cap.
pub const CHART_SERIES_SCAN_LIMIT_KEY: &str = "server.ui.chart_series_scan_limit";

impl Default for UiSettings {
    fn default() -> Self {
        UiSettings {
            enabled: true,
            filter_scan_limit: DEFAULT_FILTER_SCAN_LIMIT,
            chart_series_scan_limit: DEFAULT_CHART_SERIES_SCAN_LIMIT,
            sample_every: SAMPLE_EVERY,
        }
    }
}
