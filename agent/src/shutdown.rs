//! Stopping a long-running command (`archive`) cleanly: SIGTERM (what Kubernetes sends) or
//! Ctrl-C cancel the token, and the command stores what is whole before it exits.

use tokio_util::sync::CancellationToken;

/// A token cancelled at the first SIGTERM or SIGINT.
pub fn on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(error) => {
                tracing::warn!("cannot listen for SIGTERM ({error}); only Ctrl-C stops cleanly");
                let _ = tokio::signal::ctrl_c().await;
                cancel.cancel();
                return;
            }
        };
        tokio::select! {
            _ = terminate.recv() => tracing::info!("SIGTERM: storing what is whole, then stopping"),
            _ = tokio::signal::ctrl_c() => tracing::info!("interrupted: storing what is whole, then stopping"),
        }
        cancel.cancel();
    });
    token
}
