pub struct Poller;

impl Poller {
    pub fn limit(config: &dyn Fn(&str) -> Option<usize>) -> usize {
        // Reads a renamed key; the declared one is read nowhere.
        config("server.polling.due_timer_scan_limit").unwrap_or(5)
    }
}
