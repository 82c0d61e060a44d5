// Reading rows costs an allocation per field (mysql_async's values); glibc's malloc spent
// about an eighth of the backup's instructions on them (docs/benchmarks.md, run 9).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    // Both ring (mysql_async) and aws-lc-rs (object_store) are linked, so rustls cannot pick a
    // process-wide provider by itself: name one before the first TLS connection.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let telemetry = visitors_agent::telemetry::init();
    let code = visitors_agent::cli::main().await;
    telemetry.shutdown();
    std::process::exit(code);
}
