use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() {
    // Both ring (mysql_async) and aws-lc-rs (object_store) are linked, so rustls cannot pick a
    // process-wide provider by itself: name one before the first TLS connection.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let code = visitors_agent::cli::main().await;
    std::process::exit(code);
}
