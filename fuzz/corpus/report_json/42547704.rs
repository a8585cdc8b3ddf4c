pub fn render(activity_type: &str) -> String {
    format!("dw_activity_executions_total{{activity_type=\"{activity_type}\"}} 1\n")
}
