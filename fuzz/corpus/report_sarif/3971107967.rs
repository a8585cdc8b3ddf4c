pub struct Poller;

impl Poller {
    pub fn limits(config: &dyn Fn(&str) -> Option<usize>) -> (usize, usize) {
        (
            config("server.polling.due_timer_recovery_scan_limit").unwrap_or(5),
            config("server.polling.stale_lease_scan_limit").unwrap_or(50),
        )
    }
}
