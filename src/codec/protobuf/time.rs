//! Times and durations in the JSON form Kubernetes (Go) writes them.

use super::error::Error;

/// A time in its JSON form, on the stack: `2006-01-02T15:04:05Z` or, for `MicroTime`,
/// `2006-01-02T15:04:05.000000Z`.
pub(crate) struct TimeText {
    buf: [u8; 27],
    len: usize,
}

impl TimeText {
    pub(crate) fn as_str(&self) -> &str {
        // Only ASCII digits and separators are written.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or_default()
    }
}

/// `2006-01-02T15:04:05Z`, or with `nanos` the microsecond form of `MicroTime`
/// (`2006-01-02T15:04:05.000000Z`). Go cannot write a year outside 0..=9999 in JSON, so neither
/// can this.
pub(crate) fn rfc3339(seconds: i64, nanos: Option<i64>) -> Result<TimeText, Error> {
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    if !(0..=9999).contains(&year) {
        return Err(Error(format!("time {seconds}s from 1970 is outside the years 0 to 9999")));
    }
    let mut out = TimeText { buf: *b"0000-00-00T00:00:00.000000Z", len: 20 };
    let mut put = |at: usize, width: usize, mut v: u64| {
        for i in (at..at + width).rev() {
            out.buf[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, 4, year as u64);
    put(5, 2, u64::from(month));
    put(8, 2, u64::from(day));
    put(11, 2, (secs / 3600) as u64);
    put(14, 2, (secs / 60 % 60) as u64);
    put(17, 2, (secs % 60) as u64);
    match nanos {
        None => {
            out.buf[19] = b'Z';
        }
        Some(nanos) => {
            if !(0..1_000_000_000).contains(&nanos) {
                return Err(Error(format!("{nanos} nanoseconds is not within a second")));
            }
            put(20, 6, (nanos / 1000) as u64);
            out.len = 27;
        }
    }
    Ok(out)
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

/// Days since 1970-01-01 of a civil date (the inverse of [`civil_from_days`]).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Seconds and nanoseconds of an RFC 3339 time as Kubernetes writes it
/// (`2006-01-02T15:04:05Z`, optionally with a fraction; an offset instead of `Z` is applied).
pub(crate) fn parse_rfc3339(text: &str) -> Result<(i64, u32), Error> {
    let bad = || Error(format!("{text:?} is not an RFC 3339 time"));
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') || b[13] != b':' || b[16] != b':' {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, Error> {
        let digits = text.get(r).ok_or_else(bad)?;
        if !digits.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        digits.parse().map_err(|_| bad())
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, m, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
        return Err(bad());
    }
    let mut rest = &text[19..];
    let mut nanos = 0u32;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        for (i, c) in frac.bytes().take(digits.min(9)).enumerate() {
            nanos += u32::from(c - b'0') * 10u32.pow(8 - i as u32);
        }
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && matches!(rest.as_bytes()[0], b'+' | b'-') && rest.as_bytes()[3] == b':' => {
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            let start = text.len() - 6;
            let (oh, om) = (num(start + 1..start + 3)?, num(start + 4..start + 6)?);
            sign * (oh * 3600 + om * 60)
        }
        _ => return Err(bad()),
    };
    let days = days_from_civil(year, month as u32, day as u32);
    Ok((days * 86_400 + h * 3600 + m * 60 + s - offset, nanos))
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
        assert_eq!(rfc3339(1_700_000_000, None).unwrap().as_str(), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(1_700_000_000, Some(123_456_789)).unwrap().as_str(), "2023-11-14T22:13:20.123456Z");
        assert_eq!(rfc3339(-1, None).unwrap().as_str(), "1969-12-31T23:59:59Z");
        assert_eq!(rfc3339(951_782_400, None).unwrap().as_str(), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(-62_135_596_800, None).unwrap().as_str(), "0001-01-01T00:00:00Z");
        assert!(rfc3339(i64::MAX, None).is_err() && rfc3339(i64::MIN, None).is_err());
        assert!(rfc3339(0, Some(-1)).is_err() && rfc3339(0, Some(1_000_000_000)).is_err());
    }

    #[test]
    fn times_parse_back() {
        for seconds in [0, 1_700_000_000, -1, 951_782_400, -62_135_596_800, 253_402_300_799] {
            assert_eq!(parse_rfc3339(rfc3339(seconds, None).unwrap().as_str()).unwrap(), (seconds, 0));
        }
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20.123456Z").unwrap(), (1_700_000_000, 123_456_000));
        assert_eq!(parse_rfc3339("2023-11-14T23:13:20+01:00").unwrap(), (1_700_000_000, 0));
        for bad in [
            "",
            "2023-11-14",
            "2023-11-14T22:13:20",
            "2023-13-14T22:13:20Z",
            "2023-11-14T22:13:20.Z",
            "x023-11-14T22:13:20Z",
        ] {
            assert!(parse_rfc3339(bad).is_err(), "{bad}");
        }
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
