//! The command line: kubectl's conventions (`-n`, `-A`, `--context`, `--as`, `-o`) and one
//! subcommand per thing an on-call engineer does.

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "kubectl visitors",
    bin_name = "kubectl visitors",
    version,
    about = "The visitors-operator suite from one command: an app's whole state, backups, restores, drills, switchovers",
    after_help = "Examples:
  kubectl visitors status                      # one line per app of the namespace (-A: all namespaces)
  kubectl visitors status shop                 # app shop: health, backups, verified runs, restore window, problems
  kubectl visitors backup shop                 # a backup now, with the schedule's storage and options
  kubectl visitors restore shop --time 2026-11-27T10:15:00Z
  kubectl visitors report shop -o shop.tar.gz  # everything support needs, secrets redacted"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug, Clone)]
pub struct Global {
    /// The namespace (default: the kubeconfig context's, else `default`).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// Every namespace (for `status` without an app).
    #[arg(short = 'A', long, global = true)]
    pub all_namespaces: bool,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else in-cluster).
    #[arg(long, global = true, env = "KUBECONFIG", hide_env_values = true)]
    pub kubeconfig: Option<String>,
    /// Act as this user (impersonation, like kubectl --as).
    #[arg(long = "as", global = true)]
    pub as_user: Option<String>,
    /// Groups to act as, with --as (repeatable).
    #[arg(long = "as-group", global = true)]
    pub as_groups: Vec<String>,
    /// Colour: auto (a terminal, and NO_COLOR unset), always or never.
    #[arg(long, global = true, value_enum, default_value_t = Colour::Auto)]
    pub color: Colour,
    /// Print each API request (method, path, status, milliseconds) to stderr, and their count.
    #[arg(short = 'v', long, global = true)]
    pub verbose: bool,
}

#[derive(Args, Debug, Clone, Copy)]
pub struct OutputArgs {
    /// Output: text for people, json or yaml for scripts.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Text,
    Json,
    Yaml,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Colour {
    Auto,
    Always,
    Never,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// An app's whole state on one screen; without an app, one line per app.
    #[command(after_help = "Examples:
  kubectl visitors status shop
  kubectl visitors status -A
  kubectl visitors status shop -o json | jq .pointInTime")]
    Status {
        /// The VisitorsApp.
        app: Option<String>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// The backup runs of an app, newest first, with verified marks, sizes and durations.
    #[command(after_help = "Examples:
  kubectl visitors runs shop
  kubectl visitors runs shop -o json")]
    Runs {
        /// The VisitorsApp.
        app: String,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Take a backup now, with a schedule's storage and options, and follow it to the end.
    #[command(after_help = "Examples:
  kubectl visitors backup shop                     # the app's only schedule
  kubectl visitors backup shop --schedule nightly
  kubectl visitors backup shop --physical
  kubectl visitors backup shop --no-wait")]
    Backup(BackupArgs),
    /// Restore an app from a run, to a point in time, or to the latest recoverable state.
    /// Shows what will happen and asks first.
    #[command(after_help = "Examples:
  kubectl visitors restore shop --run nightly-29390400
  kubectl visitors restore shop --time 2026-11-27T10:15:00Z
  kubectl visitors restore shop --latest --into shop-copy --yes")]
    Restore(RestoreArgs),
    /// Prove a backup run restores: a drill into a throwaway database, followed to the end.
    #[command(after_help = "Examples:
  kubectl visitors drill nightly-29390400")]
    Drill(DrillArgs),
    /// Hand the primary to a replica (apps with spec.mysql.replicas > 1).
    #[command(after_help = "Examples:
  kubectl visitors switchover shop
  kubectl visitors switchover shop --to shop-mysql-2")]
    Switchover(SwitchoverArgs),
    /// Everything a support request needs about an app, in one .tar.gz, secrets redacted.
    #[command(after_help = "Examples:
  kubectl visitors report shop -o shop-report.tar.gz")]
    Report(ReportArgs),
}

#[derive(Args, Debug)]
pub struct BackupArgs {
    /// The VisitorsApp.
    pub app: String,
    /// The schedule whose storage and options the backup takes (needed when the app has several).
    #[arg(long)]
    pub schedule: Option<String>,
    /// A physical run (the server's files, streamed by its own mariadb-backup) whatever the
    /// schedule's method, drilled as the schedule's runs are.
    #[arg(long)]
    pub physical: bool,
    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Args, Debug)]
#[group(id = "source", required = true, multiple = false, args = ["run", "time", "latest"])]
pub struct RestoreArgs {
    /// The VisitorsApp whose backups are restored.
    pub app: String,
    /// A backup run (a MySQLBackup that succeeded).
    #[arg(long)]
    pub run: Option<String>,
    /// A point in time (RFC 3339, e.g. 2026-11-27T10:15:00Z), from a schedule that archives.
    #[arg(long)]
    pub time: Option<String>,
    /// The newest state that can be restored: the archive's last recoverable time, or without
    /// archiving the newest successful run.
    #[arg(long)]
    pub latest: bool,
    /// The schedule, for --time and --latest, when the app has several.
    #[arg(long)]
    pub schedule: Option<String>,
    /// Restore into another VisitorsApp of the namespace (default: the app itself).
    #[arg(long)]
    pub into: Option<String>,
    /// Do not ask for confirmation.
    #[arg(short = 'y', long)]
    pub yes: bool,
    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Args, Debug)]
pub struct DrillArgs {
    /// The backup run (a MySQLBackup that succeeded).
    pub run: String,
    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Args, Debug)]
pub struct SwitchoverArgs {
    /// The VisitorsApp.
    pub app: String,
    /// The replica pod to promote (default: the one the controller judges most up to date).
    #[arg(long)]
    pub to: Option<String>,
    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// The VisitorsApp.
    pub app: String,
    /// The archive to write.
    #[arg(short = 'o', long = "output", default_value = "visitors-report.tar.gz")]
    pub file: String,
    /// Log lines kept per container.
    #[arg(long, default_value_t = 2000)]
    pub tail: i64,
}

#[derive(Args, Debug, Clone, Copy)]
pub struct WaitArgs {
    #[command(flatten)]
    pub output: OutputArgs,
    /// Return once the request is created instead of following it.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to follow it, in seconds, before giving up waiting (it goes on).
    #[arg(long, default_value_t = 6 * 3600)]
    pub timeout: u64,
}
