//! Sizes, durations and ages the way a person reads them.

use jiff::Timestamp;

pub fn bytes(value: i64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if value < 1024 {
        return format!("{value} B");
    }
    let mut scaled = value as f64 / 1024.0;
    let mut unit = 0;
    while scaled >= 1024.0 && unit < UNITS.len() - 1 {
        scaled /= 1024.0;
        unit += 1;
    }
    if scaled < 10.0 { format!("{scaled:.1} {}", UNITS[unit]) } else { format!("{scaled:.0} {}", UNITS[unit]) }
}

/// `41 s`, `2m 3s`, `3h 12m`, `2d 4h`: two units at most.
pub fn duration(seconds: f64) -> String {
    let total = seconds.max(0.0).round() as i64;
    if seconds < 10.0 && seconds > 0.0 && (seconds - seconds.round()).abs() > f64::EPSILON {
        return format!("{seconds:.1} s");
    }
    let (days, hours, minutes, secs) = (total / 86_400, total % 86_400 / 3600, total % 3600 / 60, total % 60);
    match (days, hours, minutes) {
        (0, 0, 0) => format!("{secs} s"),
        (0, 0, _) => format!("{minutes}m {secs}s"),
        (0, _, _) => format!("{hours}h {minutes}m"),
        _ => format!("{days}d {hours}h"),
    }
}

/// `1234567` as `1,234,567`.
pub fn thousands(value: i64) -> String {
    let digits = value.unsigned_abs().to_string();
    let mut grouped = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    if value < 0 { format!("-{grouped}") } else { grouped }
}

/// How long before `now` (`3h ago`) or after it (`in 21h`), one unit.
pub fn age(at: Timestamp, now: Timestamp) -> String {
    let seconds = now.duration_since(at).as_secs();
    let text = short(seconds.unsigned_abs());
    if seconds >= 0 { format!("{text} ago") } else { format!("in {text}") }
}

fn short(seconds: u64) -> String {
    match seconds {
        0..120 => format!("{seconds}s"),
        120..7200 => format!("{}m", seconds / 60),
        7200..172_800 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}

/// A timestamp to the second, in UTC.
pub fn time(at: Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_grouped_by_thousands() {
        let cases = [(0, "0"), (999, "999"), (1000, "1,000"), (1234567, "1,234,567"), (-45000, "-45,000")];
        for (value, text) in cases {
            assert_eq!(thousands(value), text);
        }
    }

    #[test]
    fn figures_read_the_way_people_say_them() {
        let cases: [(i64, &str); 5] =
            [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (52_428_800, "50 MiB"), (3_221_225_472, "3.0 GiB")];
        for (value, text) in cases {
            assert_eq!(bytes(value), text);
        }
        let cases: [(f64, &str); 6] = [
            (0.0, "0 s"),
            (2.34, "2.3 s"),
            (41.0, "41 s"),
            (123.0, "2m 3s"),
            (11_520.0, "3h 12m"),
            (187_200.0, "2d 4h"),
        ];
        for (seconds, text) in cases {
            assert_eq!(duration(seconds), text);
        }
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let cases: [(i64, &str); 5] =
            [(-30, "30s ago"), (-600, "10m ago"), (-10_800, "3h ago"), (-259_200, "3d ago"), (75_600, "in 21h")];
        for (offset, text) in cases {
            assert_eq!(age(Timestamp::from_second(1_800_000_000 + offset).unwrap(), now), text);
        }
        assert_eq!(time(now), "2027-01-15T08:00:00Z");
    }
}
