//! What the console keeps while the node runs: the CSRF key and the chart
//! ring buffer. Both are fixed in size.

use std::sync::Arc;

use crate::server::ui::samples::Samples;
use crate::server::ui::session::CsrfKey;

/// The console's per-node state.
pub struct UiState {
    /// Derives each session's CSRF token.
    pub key: CsrfKey,
    /// The sampled `dw_*` series.
    pub samples: Arc<Samples>,
}
