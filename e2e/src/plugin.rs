//! Running `kubectl visitors`, the real plugin binary of this checkout, as a person would.

use std::path::PathBuf;
use std::process::Output;

/// The plugin binary of this checkout (`E2E_PLUGIN` overrides), built by e2e/run.sh.
pub fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("E2E_PLUGIN") {
        return PathBuf::from(path);
    }
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| crate::repo_root().join("target"));
    let profile = match std::env::var("E2E_PROFILE").as_deref() {
        Ok("release") => "release",
        _ => "debug",
    };
    target.join(profile).join("kubectl-visitors")
}

/// Runs `kubectl visitors ARGS -n NAMESPACE` with stdin closed (no terminal: no question),
/// printing what it said for the test's log.
pub async fn run(namespace: &str, args: &[&str]) -> Output {
    let binary = binary();
    let mut command = tokio::process::Command::new(&binary);
    command.args(args).args(["-n", namespace]).stdin(std::process::Stdio::null());
    let output = command
        .output()
        .await
        .unwrap_or_else(|e| panic!("{}: {e} (build it: cargo build --bin kubectl-visitors)", binary.display()));
    let (stdout, stderr) = text(&output);
    eprintln!("$ kubectl visitors {} -> {:?}\n{stdout}{stderr}", args.join(" "), output.status.code());
    output
}

/// What it printed: standard output and standard error.
pub fn text(output: &Output) -> (String, String) {
    (String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned())
}
