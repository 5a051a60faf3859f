//! Go duration strings (`15s`, `1m30s`, `500ms`), parsed and printed exactly as Go's
//! `time.ParseDuration` and `time.Duration.String` do, so `metav1.Duration` fields round-trip.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

const NANOS_PER_MICRO: i64 = 1_000;
const NANOS_PER_MILLI: i64 = 1_000_000;
const NANOS_PER_SECOND: i64 = 1_000_000_000;
const NANOS_PER_MINUTE: i64 = 60 * NANOS_PER_SECOND;
const NANOS_PER_HOUR: i64 = 60 * NANOS_PER_MINUTE;

/// A Go `time.Duration`: signed nanoseconds. Written and read as a Go duration string.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GoDuration(pub i64);

impl GoDuration {
    pub const ZERO: GoDuration = GoDuration(0);

    pub const fn from_secs(secs: i64) -> Self {
        GoDuration(secs * NANOS_PER_SECOND)
    }

    pub const fn from_millis(millis: i64) -> Self {
        GoDuration(millis * NANOS_PER_MILLI)
    }

    pub const fn as_nanos(self) -> i64 {
        self.0
    }

    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// The duration as a `std::time::Duration`; `None` when negative.
    pub fn to_std(self) -> Option<std::time::Duration> {
        u64::try_from(self.0)
            .ok()
            .map(std::time::Duration::from_nanos)
    }

    /// Parses a Go duration string (`time.ParseDuration`): an optional sign, then one or more
    /// decimal numbers each with a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`); `0` alone is allowed.
    pub fn parse(input: &str) -> Result<GoDuration, String> {
        let quoted = format!("{input:?}");
        let invalid = || format!("invalid duration {quoted}");
        let mut s = input;
        let mut negative = false;
        if let Some(rest) = s.strip_prefix('-') {
            negative = true;
            s = rest;
        } else if let Some(rest) = s.strip_prefix('+') {
            s = rest;
        }
        if s == "0" {
            return Ok(GoDuration::ZERO);
        }
        if s.is_empty() {
            return Err(invalid());
        }
        // Total in nanoseconds, kept in i128 so overflow is detected rather than wrapped.
        let mut total: i128 = 0;
        while !s.is_empty() {
            let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
            let int_part = &s[..int_len];
            s = &s[int_len..];
            let mut frac_part = "";
            if let Some(rest) = s.strip_prefix('.') {
                let frac_len = rest.bytes().take_while(u8::is_ascii_digit).count();
                frac_part = &rest[..frac_len];
                s = &rest[frac_len..];
            }
            if int_part.is_empty() && frac_part.is_empty() {
                return Err(invalid());
            }
            let unit_len = s
                .char_indices()
                .find(|(_, c)| *c == '.' || c.is_ascii_digit())
                .map_or(s.len(), |(i, _)| i);
            let unit = &s[..unit_len];
            s = &s[unit_len..];
            let scale: i128 = match unit {
                "ns" => 1,
                "us" | "\u{00b5}s" | "\u{03bc}s" => NANOS_PER_MICRO.into(),
                "ms" => NANOS_PER_MILLI.into(),
                "s" => NANOS_PER_SECOND.into(),
                "m" => NANOS_PER_MINUTE.into(),
                "h" => NANOS_PER_HOUR.into(),
                "" => return Err(format!("missing unit in duration {quoted}")),
                other => return Err(format!("unknown unit {other:?} in duration {quoted}")),
            };
            let int_value: i128 = if int_part.is_empty() {
                0
            } else {
                int_part.parse::<i128>().map_err(|_| invalid())?
            };
            let mut value = int_value.checked_mul(scale).ok_or_else(invalid)?;
            // The fraction, truncated to whole nanoseconds as Go does.
            let mut frac_scale = scale;
            for digit in frac_part.bytes().take(30) {
                frac_scale /= 10;
                if frac_scale == 0 {
                    break;
                }
                value += i128::from(digit - b'0') * frac_scale;
            }
            total = total.checked_add(value).ok_or_else(invalid)?;
            if total > i128::from(i64::MAX) + 1 {
                return Err(invalid());
            }
        }
        if negative {
            total = -total;
        }
        i64::try_from(total).map(GoDuration).map_err(|_| invalid())
    }
}

/// `digits` of `value / 10^prec` after the point, trailing zeros dropped; empty when whole.
fn fraction(value: u64, prec: u32) -> (String, u64) {
    let scale = 10u64.pow(prec);
    let frac = value % scale;
    let whole = value / scale;
    if frac == 0 {
        return (String::new(), whole);
    }
    let digits = format!("{frac:0width$}", width = prec as usize);
    (format!(".{}", digits.trim_end_matches('0')), whole)
}

impl fmt::Display for GoDuration {
    /// Formats like Go's `time.Duration.String`: `0s`, `1.5s`, `2m0s`, `1h0m0s`, `500ms`, `10µs`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let negative = self.0 < 0;
        let u = self.0.unsigned_abs();
        let sign = if negative { "-" } else { "" };
        if u == 0 {
            return f.write_str("0s");
        }
        if u < NANOS_PER_SECOND as u64 {
            let (unit, prec) = if u < NANOS_PER_MICRO as u64 {
                ("ns", 0)
            } else if u < NANOS_PER_MILLI as u64 {
                ("\u{00b5}s", 3)
            } else {
                ("ms", 6)
            };
            let (frac, whole) = fraction(u, prec);
            return write!(f, "{sign}{whole}{frac}{unit}");
        }
        let (frac, total_secs) = fraction(u, 9);
        let secs = total_secs % 60;
        let total_mins = total_secs / 60;
        let mut out = format!("{secs}{frac}s");
        if total_mins > 0 {
            out = format!("{}m{out}", total_mins % 60);
            let hours = total_mins / 60;
            if hours > 0 {
                out = format!("{hours}h{out}");
            }
        }
        write!(f, "{sign}{out}")
    }
}

impl std::str::FromStr for GoDuration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        GoDuration::parse(s)
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        GoDuration::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_go() {
        let cases = [
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1\u{00b5}s"),
            (2_200_000, "2.2ms"),
            (500 * NANOS_PER_MILLI, "500ms"),
            (NANOS_PER_SECOND, "1s"),
            (1_500_000_000, "1.5s"),
            (15 * NANOS_PER_SECOND, "15s"),
            (90 * NANOS_PER_SECOND, "1m30s"),
            (2 * NANOS_PER_MINUTE, "2m0s"),
            (NANOS_PER_HOUR, "1h0m0s"),
            (
                NANOS_PER_HOUR + 2 * NANOS_PER_MINUTE + 3 * NANOS_PER_SECOND + 1,
                "1h2m3.000000001s",
            ),
            (-15 * NANOS_PER_SECOND, "-15s"),
            (i64::MAX, "2562047h47m16.854775807s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
        ];
        for (nanos, want) in cases {
            assert_eq!(GoDuration(nanos).to_string(), want, "{nanos}");
        }
    }

    #[test]
    fn parses_like_go() {
        let cases = [
            ("0", 0),
            ("-0", 0),
            ("15s", 15 * NANOS_PER_SECOND),
            ("+15s", 15 * NANOS_PER_SECOND),
            ("1m30s", 90 * NANOS_PER_SECOND),
            ("1.5h", 90 * NANOS_PER_MINUTE),
            ("300ms", 300 * NANOS_PER_MILLI),
            ("-1.5h", -90 * NANOS_PER_MINUTE),
            ("2h45m", 165 * NANOS_PER_MINUTE),
            ("10us", 10 * NANOS_PER_MICRO),
            ("10\u{00b5}s", 10 * NANOS_PER_MICRO),
            ("10\u{03bc}s", 10 * NANOS_PER_MICRO),
            (".5s", 500 * NANOS_PER_MILLI),
            ("5.s", 5 * NANOS_PER_SECOND),
            ("1h0m0s", NANOS_PER_HOUR),
            ("2562047h47m16.854775807s", i64::MAX),
            ("-2562047h47m16.854775808s", i64::MIN),
        ];
        for (input, want) in cases {
            assert_eq!(GoDuration::parse(input), Ok(GoDuration(want)), "{input}");
        }
    }

    #[test]
    fn rejects_what_go_rejects() {
        for input in [
            "",
            "s",
            "15",
            "1x",
            "-",
            ".s",
            "1.2.3s",
            "15 s",
            "2562047h47m16.854775808s",
            "9999999999999999999h",
        ] {
            assert!(
                GoDuration::parse(input).is_err(),
                "{input:?} should not parse"
            );
        }
        assert!(
            GoDuration::parse("15")
                .unwrap_err()
                .contains("missing unit")
        );
        assert!(
            GoDuration::parse("1x")
                .unwrap_err()
                .contains("unknown unit")
        );
    }

    #[test]
    fn round_trips() {
        for nanos in [
            0,
            1,
            999,
            1_000,
            1_234_567,
            15 * NANOS_PER_SECOND,
            3_723_000_000_123,
            -42,
        ] {
            let d = GoDuration(nanos);
            assert_eq!(GoDuration::parse(&d.to_string()), Ok(d));
        }
    }
}
