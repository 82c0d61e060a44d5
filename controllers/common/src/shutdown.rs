//! Graceful shutdown on SIGTERM or SIGINT, shared by the controller loop and the HTTP server.

use tokio_util::sync::CancellationToken;

/// Returns a token cancelled on the first SIGTERM or SIGINT. Every long-running task of a
/// controller watches it and winds down; in-flight reconciles finish first.
pub fn on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let trigger = token.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown signal received; finishing in-flight work");
        trigger.cancel();
    });
    token
}

#[cfg(unix)]
async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::error!("cannot install signal handlers; the process will only stop when killed");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() {
    let _ = tokio::signal::ctrl_c().await;
}
