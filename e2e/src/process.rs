//! What the benchmarks read of a local process from /proc: its CPU time and memory, and the
//! process of a program (the test cluster's node runs the controllers as local processes).

/// User plus system CPU seconds of process `pid` (0 when it is gone). /proc counts in clock
/// ticks, 100 a second on Linux (USER_HZ).
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which is in parentheses and may contain spaces.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// The resident memory of process `pid` now and at its peak, in MiB (`VmRSS`, `VmHWM`).
pub fn resident_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0)
}

/// The one running process whose executable is named `program`.
pub fn pid_of(program: &str) -> Option<u32> {
    let mut found = std::fs::read_dir("/proc").ok()?.filter_map(|entry| {
        let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
        (exe.file_name()?.to_str()? == program).then_some(pid)
    });
    let pid = found.next()?;
    found.next().is_none().then_some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_found_and_measured() {
        let exe = std::env::current_exe().unwrap();
        let name = exe.file_name().unwrap().to_str().unwrap();
        assert_eq!(pid_of(name), Some(std::process::id()));
        let (now, peak) = resident_mib(std::process::id());
        assert!(now > 0.0 && peak >= now, "{now} {peak}");
        let spin: u64 = (0..20_000_000u64).fold(0, |a, b| a.wrapping_add(b * b));
        assert!(spin > 0 && cpu_seconds(std::process::id()) > 0.0);
    }
}
