//! Times and durations in the JSON form Kubernetes (Go) writes them.

use super::de::Error;

/// `2006-01-02T15:04:05Z`, or with `nanos` the microsecond form of `MicroTime`
/// (`2006-01-02T15:04:05.000000Z`). Go cannot write a year outside 0..=9999 in JSON, so neither
/// can this.
pub(crate) fn rfc3339(seconds: i64, nanos: Option<i64>) -> Result<String, Error> {
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    if !(0..=9999).contains(&year) {
        return Err(Error(format!("time {seconds}s from 1970 is outside the years 0 to 9999")));
    }
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    Ok(match nanos {
        None => format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}Z"),
        Some(nanos) => {
            if !(0..1_000_000_000).contains(&nanos) {
                return Err(Error(format!("{nanos} nanoseconds is not within a second")));
            }
            format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{:06}Z", nanos / 1000)
        }
    })
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Go's `time.Duration.String()`: `1h2m3.5s`, `1.5ms`, `0s`.
pub(crate) fn go_duration(nanos: i64) -> String {
    let neg = nanos < 0;
    let u = nanos.unsigned_abs();
    let mut out = String::new();
    if u < 1_000_000_000 {
        let (unit, prec) = match u {
            0 => return "0s".into(),
            1..1_000 => ("ns", 0),
            1_000..1_000_000 => ("µs", 3),
            _ => ("ms", 6),
        };
        let (int, frac) = fraction(u, prec);
        out.push_str(&format!("{int}{frac}{unit}"));
    } else {
        let (secs, frac) = fraction(u, 9);
        let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
        if h > 0 {
            out.push_str(&format!("{h}h{m}m"));
        } else if m > 0 {
            out.push_str(&format!("{m}m"));
        }
        out.push_str(&format!("{s}{frac}s"));
    }
    if neg {
        out.insert(0, '-');
    }
    out
}

/// `v / 10^prec` as an integer and a fraction (`.5`, without trailing zeros; empty when zero).
fn fraction(v: u64, prec: u32) -> (u64, String) {
    let scale = 10u64.pow(prec);
    let frac = v % scale;
    if frac == 0 {
        return (v / scale, String::new());
    }
    let digits = format!("{frac:0width$}", width = prec as usize);
    (v / scale, format!(".{}", digits.trim_end_matches('0')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_go_writes_them() {
        assert_eq!(rfc3339(1_700_000_000, None).unwrap(), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(1_700_000_000, Some(123_456_789)).unwrap(), "2023-11-14T22:13:20.123456Z");
        assert_eq!(rfc3339(-1, None).unwrap(), "1969-12-31T23:59:59Z");
        assert_eq!(rfc3339(951_782_400, None).unwrap(), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(-62_135_596_800, None).unwrap(), "0001-01-01T00:00:00Z");
        assert!(rfc3339(i64::MAX, None).is_err() && rfc3339(i64::MIN, None).is_err());
        assert!(rfc3339(0, Some(-1)).is_err() && rfc3339(0, Some(1_000_000_000)).is_err());
    }

    #[test]
    fn durations_read_as_go_writes_them() {
        for (nanos, text) in [
            (0, "0s"),
            (1, "1ns"),
            (1_500, "1.5µs"),
            (1_500_000, "1.5ms"),
            (1_000_000_000, "1s"),
            (90_000_000_000, "1m30s"),
            (3_600_000_000_000, "1h0m0s"),
            (3_723_500_000_000, "1h2m3.5s"),
            (-2_000_000, "-2ms"),
            (i64::MIN, "-2562047h47m16.854775808s"),
        ] {
            assert_eq!(go_duration(nanos), text);
        }
    }
}
