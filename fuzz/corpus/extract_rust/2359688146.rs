pub fn render(n: u64) -> String {
    // The metric was renamed in code but not in the policy.
    format!("dw_workflow_runs {n}\n")
}
