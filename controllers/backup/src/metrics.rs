//! The backup controller's own metrics, served with the shared ones at `/metrics`: runs by
//! result, the last successful backup per source, run duration and size, schedules whose
//! last success is overdue (older than twice their interval) and schedules whose newest
//! finished run failed, for alerts; and, for schedules that archive their binary log, the
//! archive's lag, whether its archiver reports, whether a gap keeps restores from crossing it,
//! and its last recoverable time; restore drills by result and reason, and for schedules that
//! drill, whether the newest drill failed, when a run was last verified, whether that is too
//! long ago, and the newest verified run's restore time.

use std::sync::atomic::AtomicU64;

use controller_common::metrics::Metrics;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use visitors_api::drill::{DrillPhase, DrillStatus};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub namespace: String,
    pub visitors_app: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DrillLabels {
    pub namespace: String,
    pub visitors_app: String,
    pub result: String,
    pub reason: String,
}

/// What a schedule's drills look like now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DrillGauges {
    /// Whether the newest finished drill of its runs failed; `None` while none finished.
    pub last_failed: Option<bool>,
    /// Completion time of the newest verified run's drill.
    pub last_verified: Option<f64>,
    /// Whether that is older than `spec.drill.maxUnverifiedAge` (or none is, and the schedule is).
    pub unverified: bool,
    /// Restore time the newest verified run's drill measured.
    pub restore_seconds: Option<f64>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScheduleLabels {
    pub namespace: String,
    pub schedule: String,
}

type HistogramFamily = Family<ResultLabels, Histogram, fn() -> Histogram>;
type FloatGauge = Gauge<f64, AtomicU64>;

/// What a schedule's archive looks like now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArchiveGauges {
    pub lag_seconds: f64,
    pub up: bool,
    pub gap: bool,
    pub last_recoverable: Option<f64>,
}

pub struct BackupMetrics {
    runs: Family<ResultLabels, Counter>,
    last_success: Family<SourceLabels, Gauge<f64, AtomicU64>>,
    duration: HistogramFamily,
    size: Family<SourceLabels, Histogram, fn() -> Histogram>,
    overdue: Family<ScheduleLabels, Gauge>,
    last_run_failed: Family<ScheduleLabels, Gauge>,
    archive_lag: Family<ScheduleLabels, FloatGauge>,
    archiver_up: Family<ScheduleLabels, Gauge>,
    archive_gap: Family<ScheduleLabels, Gauge>,
    last_recoverable: Family<ScheduleLabels, FloatGauge>,
    drills: Family<DrillLabels, Counter>,
    last_drill_failed: Family<ScheduleLabels, Gauge>,
    last_verified: Family<ScheduleLabels, FloatGauge>,
    unverified: Family<ScheduleLabels, Gauge>,
    drill_restore_seconds: Family<ScheduleLabels, FloatGauge>,
}

fn duration_buckets() -> Histogram {
    // 1 s to about 9 hours.
    Histogram::new(exponential_buckets(1.0, 2.0, 16))
}

fn size_buckets() -> Histogram {
    // 1 MiB to 16 TiB.
    Histogram::new(exponential_buckets(1024.0 * 1024.0, 4.0, 13))
}

impl Default for BackupMetrics {
    fn default() -> Self {
        Self {
            runs: Family::default(),
            last_success: Family::default(),
            duration: Family::new_with_constructor(duration_buckets),
            size: Family::new_with_constructor(size_buckets),
            overdue: Family::default(),
            last_run_failed: Family::default(),
            archive_lag: Family::default(),
            archiver_up: Family::default(),
            archive_gap: Family::default(),
            last_recoverable: Family::default(),
            drills: Family::default(),
            last_drill_failed: Family::default(),
            last_verified: Family::default(),
            unverified: Family::default(),
            drill_restore_seconds: Family::default(),
        }
    }
}

impl BackupMetrics {
    /// Adds these metrics to the controller's `/metrics`.
    pub fn register(&self, metrics: &Metrics) {
        metrics.register("backup_runs", "Backup runs that ended, by result (succeeded, failed)", self.runs.clone());
        metrics.register(
            "backup_last_success_timestamp_seconds",
            "Completion time of the newest successful backup run, per VisitorsApp",
            self.last_success.clone(),
        );
        metrics.register("backup_duration_seconds", "Wall time of backup runs, by result", self.duration.clone());
        metrics.register("backup_size_bytes", "Stored bytes of successful backup runs", self.size.clone());
        metrics.register(
            "backup_schedule_overdue",
            "1 when a schedule's last successful run is older than twice its interval",
            self.overdue.clone(),
        );
        metrics.register(
            "backup_schedule_last_run_failed",
            "1 when the newest finished run of a schedule failed, 0 when it succeeded",
            self.last_run_failed.clone(),
        );
        metrics.register(
            "backup_binlog_archive_lag_seconds",
            "How far a schedule's binary log archive is behind what its server committed",
            self.archive_lag.clone(),
        );
        metrics.register(
            "backup_binlog_archiver_up",
            "1 while a schedule's binary log archiver renews its Lease, 0 when it stopped reporting",
            self.archiver_up.clone(),
        );
        metrics.register(
            "backup_binlog_archive_gap",
            "1 while a gap in a schedule's binary log archive is not bridged by a run after it",
            self.archive_gap.clone(),
        );
        metrics.register(
            "backup_binlog_last_recoverable_timestamp_seconds",
            "Every transaction committed up to this time is in the schedule's binary log archive",
            self.last_recoverable.clone(),
        );
        metrics.register(
            "backup_drills",
            "Restore drills that ended, by result (succeeded, failed) and reason of failure",
            self.drills.clone(),
        );
        metrics.register(
            "backup_schedule_last_drill_failed",
            "1 when the newest finished restore drill of a schedule's runs failed, 0 when it passed",
            self.last_drill_failed.clone(),
        );
        metrics.register(
            "backup_schedule_last_verified_timestamp_seconds",
            "When the drill of a schedule's newest verified run passed",
            self.last_verified.clone(),
        );
        metrics.register(
            "backup_schedule_unverified",
            "1 when a drilling schedule has no run verified within its spec.drill.maxUnverifiedAge",
            self.unverified.clone(),
        );
        metrics.register(
            "backup_schedule_verified_restore_seconds",
            "Restore time measured by the drill of a schedule's newest verified run",
            self.drill_restore_seconds.clone(),
        );
    }

    /// Counts a drill that ended.
    pub fn drill_ended(&self, namespace: &str, visitors_app: &str, drill: &DrillStatus) {
        let succeeded = drill.phase == DrillPhase::Succeeded;
        let labels = DrillLabels {
            namespace: namespace.to_string(),
            visitors_app: visitors_app.to_string(),
            result: if succeeded { "succeeded" } else { "failed" }.into(),
            reason: drill.reason.clone().unwrap_or_default(),
        };
        self.drills.get_or_create(&labels).inc();
    }

    /// Records what a drilling schedule's drills look like now.
    pub fn drills_observed(&self, schedule: ScheduleLabels, gauges: &DrillGauges) {
        set_or_remove(&self.last_drill_failed, &schedule, gauges.last_failed.map(i64::from));
        set_or_remove(&self.last_verified, &schedule, gauges.last_verified);
        self.unverified.get_or_create(&schedule).set(i64::from(gauges.unverified));
        set_or_remove(&self.drill_restore_seconds, &schedule, gauges.restore_seconds);
    }

    /// Forgets the drills of a schedule that no longer drills.
    pub fn drills_forgotten(&self, schedule: &ScheduleLabels) {
        self.last_drill_failed.remove(schedule);
        self.last_verified.remove(schedule);
        self.unverified.remove(schedule);
        self.drill_restore_seconds.remove(schedule);
    }

    /// Records what a schedule's archive looks like now.
    pub fn archive_observed(&self, schedule: ScheduleLabels, gauges: &ArchiveGauges) {
        self.archive_lag.get_or_create(&schedule).set(gauges.lag_seconds);
        self.archiver_up.get_or_create(&schedule).set(i64::from(gauges.up));
        self.archive_gap.get_or_create(&schedule).set(i64::from(gauges.gap));
        match gauges.last_recoverable {
            Some(time) => {
                self.last_recoverable.get_or_create(&schedule).set(time);
            }
            None => {
                self.last_recoverable.remove(&schedule);
            }
        }
    }

    /// Forgets the archive of a schedule that no longer archives.
    pub fn archive_forgotten(&self, schedule: &ScheduleLabels) {
        self.archive_lag.remove(schedule);
        self.archiver_up.remove(schedule);
        self.archive_gap.remove(schedule);
        self.last_recoverable.remove(schedule);
    }

    /// Records a run that ended.
    pub fn run_ended(
        &self,
        source: SourceLabels,
        succeeded: bool,
        completed_at: f64,
        duration: Option<f64>,
        size: Option<i64>,
    ) {
        let result = ResultLabels { result: if succeeded { "succeeded" } else { "failed" }.into() };
        self.runs.get_or_create(&result).inc();
        if let Some(duration) = duration {
            self.duration.get_or_create(&result).observe(duration);
        }
        if succeeded {
            self.success_seen(&source, completed_at);
            if let Some(size) = size {
                self.size.get_or_create(&source).observe(size as f64);
            }
        }
    }

    /// Moves the last-success gauge of `source` to `completed_at` if that is newer. Also called
    /// for successful runs a reconcile finds already finished: at start-up every run is
    /// reconciled once, so a restarted controller exports the gauge again.
    pub fn success_seen(&self, source: &SourceLabels, completed_at: f64) {
        let gauge = self.last_success.get_or_create(source);
        if completed_at > gauge.get() {
            gauge.set(completed_at);
        }
    }

    /// Sets whether a schedule's last success is overdue.
    pub fn schedule_overdue(&self, schedule: ScheduleLabels, overdue: bool) {
        self.overdue.get_or_create(&schedule).set(i64::from(overdue));
    }

    /// Sets whether a schedule's newest finished run failed; `None` (no run has finished)
    /// exports nothing for it.
    pub fn schedule_last_run(&self, schedule: ScheduleLabels, failed: Option<bool>) {
        if let Some(failed) = failed {
            self.last_run_failed.get_or_create(&schedule).set(i64::from(failed));
        } else {
            self.last_run_failed.remove(&schedule);
        }
    }

    /// Forgets a deleted schedule.
    pub fn schedule_deleted(&self, schedule: &ScheduleLabels) {
        self.overdue.remove(schedule);
        self.last_run_failed.remove(schedule);
        self.archive_forgotten(schedule);
        self.drills_forgotten(schedule);
    }
}

fn set_or_remove<N, A>(family: &Family<ScheduleLabels, Gauge<N, A>>, schedule: &ScheduleLabels, value: Option<N>)
where
    A: prometheus_client::metrics::gauge::Atomic<N> + Default,
{
    match value {
        Some(value) => {
            family.get_or_create(schedule).set(value);
        }
        None => {
            family.remove(schedule);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_durations_sizes_and_overdue_schedules_are_exported() {
        let shared = Metrics::new("backup-controller");
        let backup = BackupMetrics::default();
        backup.register(&shared);
        let source = SourceLabels { namespace: "shop".into(), visitors_app: "ex".into() };
        backup.run_ended(source.clone(), true, 1_800_000_000.0, Some(42.0), Some(5 << 20));
        backup.run_ended(source.clone(), true, 1_700_000_000.0, Some(40.0), Some(5 << 20));
        backup.run_ended(source, false, 1_800_000_100.0, Some(3.0), None);
        let schedule = ScheduleLabels { namespace: "shop".into(), schedule: "nightly".into() };
        backup.schedule_overdue(schedule.clone(), true);
        backup.schedule_last_run(schedule.clone(), Some(true));
        let never_ran = ScheduleLabels { namespace: "shop".into(), schedule: "new".into() };
        backup.schedule_last_run(never_ran, None);
        let text = shared.encode();
        for expected in [
            r#"visitors_operator_backup_runs_total{result="succeeded"} 2"#,
            r#"visitors_operator_backup_runs_total{result="failed"} 1"#,
            r#"visitors_operator_backup_last_success_timestamp_seconds{namespace="shop",visitors_app="ex"} 1800000000"#,
            r#"visitors_operator_backup_duration_seconds_count{result="succeeded"} 2"#,
            r#"visitors_operator_backup_size_bytes_count{namespace="shop",visitors_app="ex"} 2"#,
            r#"visitors_operator_backup_schedule_overdue{namespace="shop",schedule="nightly"} 1"#,
            r#"visitors_operator_backup_schedule_last_run_failed{namespace="shop",schedule="nightly"} 1"#,
        ] {
            assert!(text.contains(expected), "missing {expected} in\n{text}");
        }
        assert!(!text.contains(r#"schedule="new""#), "a schedule without a finished run exports nothing:\n{text}");
        backup.schedule_last_run(schedule.clone(), Some(false));
        assert!(
            shared.encode().contains(
                r#"visitors_operator_backup_schedule_last_run_failed{namespace="shop",schedule="nightly"} 0"#
            ),
            "a success clears it"
        );
        backup.archive_observed(
            schedule.clone(),
            &ArchiveGauges { lag_seconds: 2.5, up: true, gap: false, last_recoverable: Some(1_800_000_000.0) },
        );
        let text = shared.encode();
        for expected in [
            r#"visitors_operator_backup_binlog_archive_lag_seconds{namespace="shop",schedule="nightly"} 2.5"#,
            r#"visitors_operator_backup_binlog_archiver_up{namespace="shop",schedule="nightly"} 1"#,
            r#"visitors_operator_backup_binlog_archive_gap{namespace="shop",schedule="nightly"} 0"#,
            r#"visitors_operator_backup_binlog_last_recoverable_timestamp_seconds{namespace="shop",schedule="nightly"} 1800000000"#,
        ] {
            assert!(text.contains(expected), "missing {expected} in\n{text}");
        }
        backup.schedule_deleted(&schedule);
        assert!(!shared.encode().contains(r#"schedule="nightly""#), "a deleted schedule is forgotten");
    }
}
