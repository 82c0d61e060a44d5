//! Flags and environment variables every controller binary accepts.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, ValueEnum};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (for log collectors).
    Json,
}

/// The flags shared by the three controllers; each binary flattens this into its own.
#[derive(Debug, Clone, Args)]
pub struct ControllerArgs {
    /// Watch only this namespace. Empty or unset: watch all namespaces (needs cluster-wide RBAC).
    #[arg(long, env = "WATCH_NAMESPACE", default_value = "")]
    pub namespace: String,

    /// Address of the HTTP server for /metrics, /healthz and /readyz.
    #[arg(long, env = "METRICS_ADDRESS", default_value = "0.0.0.0:8080")]
    pub metrics_address: SocketAddr,

    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Take part in leader election on a coordination.k8s.io Lease, so that only one of
    /// several replicas reconciles at a time. Disable only when running a single replica.
    #[arg(long, env = "LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,

    /// Namespace of the leader election Lease. Defaults to the pod's namespace (POD_NAMESPACE,
    /// from the downward API), else `default`.
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,

    /// Identity of this replica in leader election. Defaults to the pod name (POD_NAME), else
    /// the host name.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,

    /// Seconds between periodic reconciles of an unchanged object.
    #[arg(long, env = "RESYNC_SECONDS", default_value_t = 600)]
    pub resync_seconds: u64,

    /// First retry delay after a failed reconcile, in milliseconds; it doubles on each
    /// further failure of the same object, with jitter, up to --backoff-max-seconds.
    #[arg(long, env = "BACKOFF_BASE_MS", default_value_t = 500)]
    pub backoff_base_ms: u64,

    /// Largest retry delay after failed reconciles, in seconds.
    #[arg(long, env = "BACKOFF_MAX_SECONDS", default_value_t = 300)]
    pub backoff_max_seconds: u64,

    /// Seconds to wait for the controller's CustomResourceDefinition to be established.
    #[arg(long, env = "CRD_WAIT_SECONDS", default_value_t = 60)]
    pub crd_wait_seconds: u64,
}

/// The own flags of a controller that runs the agent in Jobs (backup, restore).
#[derive(Debug, Clone, Args)]
pub struct AgentArgs {
    /// Image of the agent Jobs, which run /usr/local/bin/visitors-agent from it; the Helm
    /// chart sets it to the controllers' own image.
    #[arg(long, env = "AGENT_IMAGE")]
    pub agent_image: String,
}

/// Environment variables read outside clap, listed in every binary's `--help`.
pub const ENVIRONMENT_HELP: &str = "\
Environment:
  KUBECONFIG                     kubeconfig file (else ~/.kube/config, else in-cluster config)
  RUST_LOG                       log filter (default: info,kube=warn)
  OTEL_EXPORTER_OTLP_ENDPOINT    send traces by OTLP/HTTP (protobuf) to this collector,
                                 e.g. http://jaeger-collector:4318; unset: no trace export
  OTEL_SERVICE_NAME              overrides the service name traces are reported under
  POD_NAMESPACE                  namespace of the leader election Lease (downward API)";

impl ControllerArgs {
    pub fn watch_namespace(&self) -> Option<&str> {
        Some(self.namespace.as_str()).filter(|ns| !ns.is_empty())
    }

    pub fn resync(&self) -> Duration {
        Duration::from_secs(self.resync_seconds)
    }

    pub fn backoff_base(&self) -> Duration {
        Duration::from_millis(self.backoff_base_ms)
    }

    pub fn backoff_max(&self) -> Duration {
        Duration::from_secs(self.backoff_max_seconds)
    }

    pub fn lease_namespace(&self) -> String {
        self.leader_election_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .filter(|ns| !ns.is_empty())
            .unwrap_or_else(|| "default".to_string())
    }

    pub fn identity(&self) -> String {
        self.identity
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| format!("pid-{}", std::process::id()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        common: ControllerArgs,
    }

    #[test]
    fn defaults_watch_all_namespaces_with_leader_election() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(cli.common.watch_namespace(), None);
        assert!(cli.common.leader_election);
        assert_eq!(cli.common.resync(), Duration::from_secs(600));
    }

    #[test]
    fn flags_override_defaults() {
        let cli = Cli::try_parse_from([
            "x",
            "--namespace",
            "team-a",
            "--leader-election",
            "false",
            "--log-format",
            "json",
            "--metrics-address",
            "127.0.0.1:9000",
        ])
        .unwrap();
        assert_eq!(cli.common.watch_namespace(), Some("team-a"));
        assert!(!cli.common.leader_election);
        assert_eq!(cli.common.log_format, LogFormat::Json);
        assert_eq!(cli.common.metrics_address.port(), 9000);
    }
}
