//! Kubernetes `resource.Quantity` parsing: the one quantity module the whole crate uses.
//!
//! `k8s_openapi`'s `Quantity` is a string newtype; this module turns such strings into integers the
//! way upstream's `Quantity.MilliValue()` (CPU) and `Quantity.Value()` (memory, ephemeral storage,
//! pods, extended resources) do:
//!
//! - the grammar is upstream's: an optional sign, digits with an optional fraction (`1.5`, `.5`,
//!   `1.`), then a suffix: binary `Ki Mi Gi Ti Pi Ei`, decimal `n u m "" k M G T P E`, or a decimal
//!   exponent `e3` / `E-3`;
//! - the parsed amount is rounded up (away from zero) to nano precision, as upstream does, so a
//!   tiny non-zero request never becomes zero;
//! - [`Parsed::milli_value`] and [`Parsed::value`] round up (away from zero) again, like upstream's
//!   `MilliValue`/`Value`; results saturate at `i64::MAX`/`i64::MIN` instead of overflowing.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Why a quantity string does not parse; the messages are upstream's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    FormatWrong,
    #[error("unable to parse numeric part of quantity")]
    Numeric,
    #[error("unable to parse quantity's suffix")]
    Suffix,
}

/// A parsed quantity, held exactly in nano-units (`1` = `1n`), rounded up to nano precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Parsed {
    nanos: i128,
}

/// Nano-units in one unit.
const NANO: i128 = 1_000_000_000;
/// The largest magnitude kept: `i64::MAX` units (upstream caps binary quantities there; we cap all,
/// which only matters for absurd values).
const MAX_NANOS: i128 = i64::MAX as i128 * NANO;

impl Parsed {
    /// The amount in nano-units.
    pub fn nanos(self) -> i128 {
        self.nanos
    }

    /// Upstream's `MilliValue()`: the amount in milli-units, rounded up (away from zero).
    pub fn milli_value(self) -> i64 {
        saturate(div_round_away(self.nanos, 1_000_000))
    }

    /// Upstream's `Value()`: the amount in units, rounded up (away from zero).
    pub fn value(self) -> i64 {
        saturate(div_round_away(self.nanos, NANO))
    }

    pub fn is_zero(self) -> bool {
        self.nanos == 0
    }
}

fn saturate(v: i128) -> i64 {
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// `n / d` rounded away from zero (`d > 0`).
fn div_round_away(n: i128, d: i128) -> i128 {
    let q = n / d;
    if n % d == 0 {
        q
    } else if n > 0 {
        q + 1
    } else {
        q - 1
    }
}

/// Parses a quantity string.
pub fn parse(s: &str) -> Result<Parsed, QuantityError> {
    if s.is_empty() {
        return Err(QuantityError::FormatWrong);
    }
    let (positive, num, denom, suffix) = split(s)?;
    let (base, exponent) = interpret_suffix(suffix).ok_or(QuantityError::Suffix)?;

    // The digits of `num.denom` (without leading/trailing zeros) as an integer `mantissa`, keeping
    // at most 36 significant digits; `dropped` digits were cut off the end (`sticky` if any of them
    // was non-zero, which only rounds up).
    let digits = num.trim_start_matches('0');
    let frac = denom.trim_end_matches('0');
    let mut mantissa: i128 = 0;
    let mut significant = 0usize;
    let mut dropped: i64 = 0;
    let mut sticky = false;
    for c in digits.bytes().chain(frac.bytes()) {
        let d = i128::from(c - b'0');
        if significant < 36 {
            mantissa = mantissa * 10 + d;
            if mantissa != 0 {
                significant += 1;
            }
        } else {
            dropped += 1;
            sticky |= d != 0;
        }
    }
    // value = mantissa * 10^(dropped - frac_len) units; in nano-units:
    let mut exp10: i64 = dropped - frac.len() as i64 + 9;
    let mut mult: i128 = 1;
    if base == 10 {
        exp10 += i64::from(exponent);
    } else {
        // 2^exponent with exponent in {10, 20, ..., 60}.
        mult = 1i128 << exponent;
    }

    let magnitude = scale(mantissa, mult, exp10, sticky);
    let magnitude = magnitude.min(MAX_NANOS);
    Ok(Parsed {
        nanos: if positive { magnitude } else { -magnitude },
    })
}

/// `ceil(mantissa * mult * 10^exp10)` with saturation (rounding away from zero; all positive here).
fn scale(mantissa: i128, mult: i128, exp10: i64, sticky: bool) -> i128 {
    if mantissa == 0 {
        return if sticky { 1 } else { 0 };
    }
    let Some(m) = mantissa.checked_mul(mult) else {
        return MAX_NANOS;
    };
    if exp10 >= 0 {
        let Some(p) = pow10(exp10) else {
            return MAX_NANOS;
        };
        let v = m.checked_mul(p).unwrap_or(MAX_NANOS);
        // A dropped non-zero digit below the kept ones means the true value is a bit larger;
        // with exp10 >= 0 it is at least one nano more only if it reaches nano scale, which it
        // does (dropped digits sit at 10^exp10 >= 1 nano). Round up.
        if sticky { v.saturating_add(1) } else { v }
    } else {
        match pow10(-exp10) {
            Some(p) => {
                let q = m / p;
                if m % p != 0 || sticky { q + 1 } else { q }
            }
            // 10^-exp10 exceeds any mantissa: a non-zero amount below one nano rounds up to 1.
            None => 1,
        }
    }
}

fn pow10(e: i64) -> Option<i128> {
    if !(0..=38).contains(&e) {
        return None;
    }
    10i128.checked_pow(e as u32)
}

/// Splits `s` like upstream's `parseQuantityString`: (positive, integer digits, fraction digits, suffix).
fn split(s: &str) -> Result<(bool, &str, &str, &str), QuantityError> {
    let b = s.as_bytes();
    let end = b.len();
    let mut pos = 0;
    let mut positive = true;
    match b.first() {
        Some(b'-') => {
            positive = false;
            pos = 1;
        }
        Some(b'+') => pos = 1,
        _ => {}
    }
    // Integer digits.
    let num_start = pos;
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    let num = &s[num_start..pos];
    let mut denom = "";
    if pos < end && b[pos] == b'.' {
        pos += 1;
        let d_start = pos;
        while pos < end && b[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &s[d_start..pos];
    }
    // Suffix: letters from the set, then an optional sign, then digits, then the end.
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < end && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos != end {
        return Err(QuantityError::FormatWrong);
    }
    Ok((positive, num, denom, &s[suffix_start..]))
}

/// (base, exponent): base 10 with a power of ten, or base 2 with a power of two.
fn interpret_suffix(suffix: &str) -> Option<(u32, i32)> {
    let r = match suffix {
        "" => (10, 0),
        "n" => (10, -9),
        "u" => (10, -6),
        "m" => (10, -3),
        "k" => (10, 3),
        "M" => (10, 6),
        "G" => (10, 9),
        "T" => (10, 12),
        "P" => (10, 15),
        "E" => (10, 18),
        "Ki" => (2, 10),
        "Mi" => (2, 20),
        "Gi" => (2, 30),
        "Ti" => (2, 40),
        "Pi" => (2, 50),
        "Ei" => (2, 60),
        _ => {
            let rest = suffix
                .strip_prefix('e')
                .or_else(|| suffix.strip_prefix('E'))?;
            if rest.is_empty() {
                return None;
            }
            let e: i32 = rest.parse().ok()?;
            (10, e)
        }
    };
    Some(r)
}

/// How a quantity is written (upstream's `Format`): decided by the suffix it was parsed with, and
/// kept by the values computed from it, so that a quantity written back reads as upstream's would.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Format {
    /// `Ki`, `Mi`, ... (`1Gi`).
    BinarySI,
    /// `n`, `u`, `m`, `k`, `M`, ... or none (`1500m`, `2k`).
    #[default]
    DecimalSI,
    /// `1e3`.
    DecimalExponent,
}

/// The format of a quantity string (upstream's `ParseQuantity`); a string that does not parse is
/// `DecimalSI`.
pub fn format_of(s: &str) -> Format {
    match split(s).map(|(_, _, _, suffix)| suffix) {
        Ok(suffix) if suffix.ends_with('i') => Format::BinarySI,
        Ok(suffix) if suffix.starts_with(['e', 'E']) => Format::DecimalExponent,
        _ => Format::DecimalSI,
    }
}

impl Parsed {
    /// A quantity of `nanos` nano-units.
    pub fn from_nanos(nanos: i128) -> Parsed {
        Parsed { nanos }
    }
}

/// `nanos` written in `format` such that upstream parses the string back to the same amount and
/// format (the API server then stores its canonical form): binary amounts with a binary suffix
/// (`1Gi`, or `1.953125Ki` for 2000; below 1Ki as decimal ones, as upstream), exponent amounts as `Ne-9`, decimal ones with the largest
/// decimal suffix that keeps them whole (`2k`, `1500m`).
pub fn to_string(nanos: i128, format: Format) -> String {
    let sign = if nanos < 0 { "-" } else { "" };
    let magnitude = nanos.unsigned_abs();
    match format {
        Format::DecimalExponent => format!("{sign}{magnitude}e-9"),
        // Below 1024 upstream writes binary amounts as decimal ones.
        Format::BinarySI if magnitude >= 1024 * NANO as u128 => {
            const UNIT: u128 = NANO as u128;
            for (exp, suffix) in [
                (6, "Ei"),
                (5, "Pi"),
                (4, "Ti"),
                (3, "Gi"),
                (2, "Mi"),
                (1, "Ki"),
            ] {
                let div = UNIT * 1024u128.pow(exp);
                if magnitude.is_multiple_of(div) {
                    return format!("{sign}{}{suffix}", magnitude / div);
                }
            }
            // Not a whole number of Ki: the exact decimal of amount/1024 (it terminates: 1024 is
            // a power of two), in Ki.
            let per_ki = UNIT * 1024;
            let whole = magnitude / per_ki;
            let mut rest = magnitude % per_ki;
            let mut frac = String::new();
            while rest != 0 {
                rest *= 10;
                frac.push(char::from(b'0' + (rest / per_ki) as u8));
                rest %= per_ki;
            }
            format!("{sign}{whole}.{frac}Ki")
        }
        Format::BinarySI | Format::DecimalSI => {
            if magnitude == 0 {
                return "0".to_string();
            }
            for (exp, suffix) in [
                (27, "E"),
                (24, "P"),
                (21, "T"),
                (18, "G"),
                (15, "M"),
                (12, "k"),
                (9, ""),
                (6, "m"),
                (3, "u"),
            ] {
                let div = 10u128.pow(exp);
                if magnitude.is_multiple_of(div) {
                    return format!("{sign}{}{suffix}", magnitude / div);
                }
            }
            format!("{sign}{magnitude}n")
        }
    }
}

/// Parses a `Quantity`.
pub fn parse_quantity(q: &Quantity) -> Result<Parsed, QuantityError> {
    parse(&q.0)
}

/// Upstream's `q.MilliValue()` (CPU in millicores).
pub fn milli_value(q: &Quantity) -> Result<i64, QuantityError> {
    parse(&q.0).map(Parsed::milli_value)
}

/// Upstream's `q.Value()` (bytes, counts).
pub fn value(q: &Quantity) -> Result<i64, QuantityError> {
    parse(&q.0).map(Parsed::value)
}

/// The integer the scheduler keeps for resource `name`: millicores for `cpu`, `Value()` otherwise.
pub fn resource_value(name: &str, q: &Quantity) -> Result<i64, QuantityError> {
    if name == "cpu" {
        milli_value(q)
    } else {
        value(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milli_values() {
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("1", 1000),
            ("100m", 100),
            ("0.1", 100),
            ("1.5", 1500),
            ("1500m", 1500),
            ("1n", 1),
            ("1u", 1),
            ("999999n", 1),
            ("1000001n", 2),
            ("0.0001", 1),
            ("0.1m", 1),
            ("2k", 2_000_000),
            ("1e3", 1_000_000),
            ("1E3", 1_000_000),
            ("1e-3", 1),
            ("5e-4", 1),
            ("+2", 2000),
            ("-1", -1000),
            ("-0.1m", -1),
            (".5", 500),
            ("1.", 1000),
            ("1.Ki", 1_024_000),
            ("0.5Ki", 512_000),
            ("000001", 1000),
            ("1.000", 1000),
        ];
        for (s, want) in cases {
            let got = parse(s).map(Parsed::milli_value);
            assert_eq!(got, Ok(*want), "{s}");
        }
    }

    #[test]
    fn values() {
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("1", 1),
            ("100m", 1),
            ("1001m", 2),
            ("128974848", 128_974_848),
            ("129e6", 129_000_000),
            ("129M", 129_000_000),
            ("123Mi", 123 * 1024 * 1024),
            ("1Ki", 1024),
            ("1Gi", 1 << 30),
            ("1Ti", 1 << 40),
            ("1Pi", 1 << 50),
            ("1Ei", 1 << 60),
            ("1.5Gi", 3 << 29),
            ("1.1Ki", 1127), // 1126.4 rounds up
            ("200Mi", 209_715_200),
            ("1k", 1000),
            ("1M", 1_000_000),
            ("1G", 1_000_000_000),
            ("1T", 1_000_000_000_000),
            ("1P", 1_000_000_000_000_000),
            ("1E", 1_000_000_000_000_000_000),
            ("110", 110),
            ("1n", 1),
            ("-1n", -1),
            ("-1.5", -2),
            ("10Ei", i64::MAX),
            ("100E", i64::MAX),
            ("1e100", i64::MAX),
            ("1e-100", 1),
            ("0e100", 0),
            ("0.000000000000000000000000000000000000000000000001", 1),
            (
                "123456789012345678901234567890123456789012345678901234567890e-50",
                1_234_567_891,
            ),
        ];
        for (s, want) in cases {
            let got = parse(s).map(Parsed::value);
            assert_eq!(got, Ok(*want), "{s}");
        }
    }

    #[test]
    fn errors() {
        let cases: &[(&str, QuantityError)] = &[
            ("", QuantityError::FormatWrong),
            ("1.5.5", QuantityError::FormatWrong),
            ("abc", QuantityError::FormatWrong),
            ("1 Gi", QuantityError::FormatWrong),
            ("1Gix", QuantityError::FormatWrong),
            ("1K", QuantityError::Suffix),
            ("1Mb", QuantityError::FormatWrong),
            ("1mi", QuantityError::Suffix),
            ("1e", QuantityError::Suffix),
            ("1ee3", QuantityError::Suffix),
            ("1i", QuantityError::Suffix),
            ("1e3.5", QuantityError::FormatWrong),
        ];
        for (s, want) in cases {
            assert_eq!(parse(s), Err(want.clone()), "{s}");
        }
    }

    #[test]
    fn formats_survive_a_round_trip() {
        let cases: &[(&str, Format)] = &[
            ("1Gi", Format::BinarySI),
            ("1024Mi", Format::BinarySI),
            ("1.5Gi", Format::BinarySI),
            ("0.5Ki", Format::BinarySI),
            ("2k", Format::DecimalSI),
            ("2000", Format::DecimalSI),
            ("1.5", Format::DecimalSI),
            ("100m", Format::DecimalSI),
            ("0", Format::DecimalSI),
            ("1e3", Format::DecimalExponent),
            ("-1Ki", Format::BinarySI),
        ];
        for (s, format) in cases {
            assert_eq!(format_of(s), *format, "{s}");
        }
        // The written form parses back to the same amount and format.
        for (s, format) in cases {
            let nanos = parse(s).expect("parse").nanos();
            let written = to_string(nanos, *format);
            assert_eq!(
                parse(&written).map(Parsed::nanos),
                Ok(nanos),
                "{s} -> {written}"
            );
            if nanos.abs() >= 1024 * NANO {
                assert_eq!(format_of(&written), *format, "{s} -> {written}");
            }
        }
        assert_eq!(
            to_string(parse("0.5Ki").expect("parse").nanos(), Format::BinarySI),
            "512"
        );
        assert_eq!(
            to_string(parse("2000").expect("parse").nanos(), Format::BinarySI),
            "1.953125Ki"
        );
        assert_eq!(
            to_string(parse("1Gi").expect("parse").nanos(), Format::BinarySI),
            "1Gi"
        );
        assert_eq!(
            to_string(parse("1.5").expect("parse").nanos(), Format::DecimalSI),
            "1500m"
        );
    }

    #[test]
    fn quantity_helpers() {
        let q = Quantity("250m".to_string());
        assert_eq!(milli_value(&q), Ok(250));
        assert_eq!(value(&q), Ok(1));
        assert_eq!(resource_value("cpu", &q), Ok(250));
        assert_eq!(resource_value("memory", &Quantity("1Ki".into())), Ok(1024));
        assert!(value(&Quantity("x".into())).is_err());
    }
}
