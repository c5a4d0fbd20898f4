//! Numeric option values, checked while clap parses them.
//!
//! Every number a user gives is within a stated range before weir does any
//! arithmetic with it, so no value can overflow, panic, or ask for something
//! that cannot end (a filter run 4 billion times per packet, a pacing rate of
//! one packet per 10^300 seconds). A value out of range is refused with exit 2
//! and a message that names the option (clap adds it) and the range.
//!
//! Integer options use clap's own ranged parsers
//! (`value_parser!(u64).range(..)`); the ranges live beside the options. What
//! clap has no parser for is here: bounded floats and durations (in seconds,
//! or with a unit).

use std::time::Duration;

/// The longest time any option may name: ten years. Longer is surely a
/// mistake, and every deadline computed from it stays far from overflow.
pub const MAX_SECONDS: f64 = 10.0 * 365.0 * 86_400.0;

/// A float parser accepting `lo..=hi`, refusing NaN and infinities.
pub fn float_in(lo: f64, hi: f64) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let v: f64 = s.trim().parse().map_err(|_| format!("{s:?} is not a number"))?;
        if v.is_finite() && (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(format!("{s} is out of range: must be from {lo} to {hi}"))
        }
    }
}

/// Seconds, fractions allowed, from a positive `min` up to [`MAX_SECONDS`].
pub fn seconds(min: f64) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    let floats = float_in(min, MAX_SECONDS);
    move |s: &str| {
        let v = floats(s).map_err(|e| format!("{e} seconds"))?;
        Duration::try_from_secs_f64(v).map_err(|e| format!("{s} seconds: {e}"))
    }
}

/// A duration as operators write one: a number (fractions allowed) and a
/// unit, `s`, `m`, `h` or `d` (`90s`, `30m`, `12h`, `7d`); a bare number is
/// seconds. At least a second, at most [`MAX_SECONDS`].
pub fn duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (number, unit) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&t[..i], c),
        _ => (t, 's'),
    };
    let scale = match unit {
        's' => 1.0,
        'm' => 60.0,
        'h' => 3600.0,
        'd' => 86_400.0,
        _ => return Err(format!("{s:?}: the unit must be s, m, h or d (as in 90s, 30m, 12h, 7d)")),
    };
    let v: f64 =
        number.trim().parse().map_err(|_| format!("{s:?} is not a duration: a number and a unit s, m, h or d (90s, 30m, 12h, 7d)"))?;
    let secs = v * scale;
    if !(secs.is_finite() && (1.0..=MAX_SECONDS).contains(&secs)) {
        return Err(format!("{s} is out of range: must be from 1 second to ten years"));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(duration("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(duration("7d"), Ok(Duration::from_secs(604_800)));
        assert_eq!(duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(duration("45"), Ok(Duration::from_secs(45)));
        assert_eq!(duration("3650d"), Ok(Duration::from_secs(315_360_000)));
        for bad in ["0", "0.5s", "3651d", "-1h", "1w", "d", "", "NaN", "infh", "1e309", "7 days"] {
            assert!(duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn floats_are_finite_and_in_range() {
        let p = float_in(0.001, 1e9);
        assert_eq!(p("2.5"), Ok(2.5));
        assert_eq!(p("1e9"), Ok(1e9));
        for bad in ["NaN", "inf", "-inf", "-1", "0", "1e-300", "1e300", "", "x", "1e309"] {
            assert!(p(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn seconds_stop_at_ten_years() {
        let p = seconds(0.000_001);
        assert_eq!(p("1.5"), Ok(Duration::from_millis(1500)));
        for bad in ["0", "18446744073709551615", "1e19", "-3", "NaN"] {
            assert!(p(bad).is_err(), "{bad}");
        }
        assert!(p(&MAX_SECONDS.to_string()).is_ok());
    }
}
