//! Sets the `dw_test_redis` cfg when `DW_TEST_REDIS_URL` is set at build
//! time: the engine's bound tests compile their Redis variants as ignored
//! without it (`tests/engine/support`, `cache_variants!`), so `cargo test`
//! reports them as ignored, with the reason, instead of as passed. Nothing
//! in the library reads the cfg. Changing the variable rebuilds the crate.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(dw_test_redis)");
    println!("cargo::rerun-if-env-changed=DW_TEST_REDIS_URL");
    if std::env::var_os("DW_TEST_REDIS_URL").is_some_and(|url| !url.is_empty()) {
        println!("cargo::rustc-cfg=dw_test_redis");
    }
}
