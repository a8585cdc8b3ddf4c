pub fn render(n: u64) -> String {
    format!("dw_runs_total {n}\n")
}
