//! Sets the `dw_test_redis` cfg when `DW_TEST_REDIS_URL` is set at build
//! time: the engine's bound tests compile their Redis variants as ignored
//! without it (`tests/engine/support`, `cache_variants!`), so `cargo test`
//! reports them as ignored, with the reason, instead of as passed. Nothing
//! in the library reads the cfg. Changing the variable rebuilds the crate.

fn main() {
    // DW_TEST_POSTGRES_URL turns on `dw_test_postgres` the same way: the
    // engine's PostgreSQL schema tests (`tests/engine/pg_schema.rs`) are
    // compiled as ignored without it.
    for (variable, cfg) in [
        ("DW_TEST_REDIS_URL", "dw_test_redis"),
        ("DW_TEST_POSTGRES_URL", "dw_test_postgres"),
        // DW_TEST_SQS_ENDPOINT turns on `dw_test_sqs`: the SQS driver's
        // tests (`tests/engine/sqs.rs`, built with the `sqs` feature) are
        // compiled as ignored without it.
        ("DW_TEST_SQS_ENDPOINT", "dw_test_sqs"),
    ] {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        println!("cargo::rerun-if-env-changed={variable}");
        if std::env::var_os(variable).is_some_and(|url| !url.is_empty()) {
            println!("cargo::rustc-cfg={cfg}");
        }
    }
}
