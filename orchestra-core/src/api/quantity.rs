//! Resource quantities (`500m`, `1Gi`, `2.5e3`): parsed as upstream's
//! `resource.ParseQuantity` reads them, with the integer conversions its
//! `Value()`, `MilliValue()` and `ScaledValue()` make.
//!
//! A quantity is a signed number, an optional fraction and one suffix:
//! decimal SI (`n u m k M G T P E`, and none), binary SI (`Ki Mi Gi Ti Pi Ei`)
//! or a decimal exponent (`e3`, `E-2`). Like upstream, a non-zero amount
//! smaller than one nano-unit rounds up (away from zero) to one nano-unit,
//! and a binary-suffixed amount is capped at `i64::MAX` units. Amounts are
//! held in nano-units in an `i128`; larger ones (beyond about 1.7·10^29
//! units) saturate.
//!
//! Parsing and the conversions do not allocate.

use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Why a string is not a quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuantityError {
    /// The string is empty, or the number is malformed (`1.1.1`, `12x3`).
    #[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]
    Format,
    /// The suffix is none of the known ones (`1Q`, `5K`, `1ki`).
    #[error("unable to parse quantity's suffix")]
    Suffix,
}

/// One nano-unit per unit.
const NANOS: i128 = 1_000_000_000;

/// A parsed quantity: an exact amount in nano-units.
///
/// ```
/// use orchestra_core::api::quantity::ParsedQuantity;
///
/// let cpu: ParsedQuantity = "250m".parse().unwrap();
/// assert_eq!(cpu.milli_value(), 250);
/// assert_eq!(cpu.value(), 1); // rounded up, as upstream's Value()
/// let memory = ParsedQuantity::parse("1.5Gi").unwrap();
/// assert_eq!(memory.value(), 1_610_612_736);
/// assert!(ParsedQuantity::parse("12x").is_err());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ParsedQuantity {
    nanos: i128,
}

impl ParsedQuantity {
    /// Parses a quantity string. Surrounding whitespace is ignored, as when
    /// upstream decodes a quantity from JSON.
    pub fn parse(input: &str) -> Result<ParsedQuantity, QuantityError> {
        parse(input.trim()).map(|nanos| ParsedQuantity { nanos })
    }

    /// A quantity of `units` whole units.
    pub fn from_units(units: i64) -> ParsedQuantity {
        ParsedQuantity { nanos: i128::from(units) * NANOS }
    }

    /// The amount divided by `10^scale`, rounded up (towards positive
    /// infinity) and saturated to `i64` (upstream's `ScaledValue`): scale 0
    /// is whole units, -3 thousandths, 6 millions.
    pub fn scaled_value(&self, scale: i32) -> i64 {
        // nanos / 10^(9 + scale), or nanos × 10^-(9 + scale).
        let exponent = 9 + scale;
        let scaled = if exponent <= 0 {
            pow10(exponent.unsigned_abs()).and_then(|p| self.nanos.checked_mul(p)).unwrap_or(if self.nanos < 0 {
                i128::MIN
            } else {
                i128::MAX
            })
        } else {
            match pow10(exponent.unsigned_abs()) {
                Some(divisor) => ceil_div(self.nanos, divisor),
                // Smaller than one unit of the scale: 1 if positive, 0 otherwise.
                None => i128::from(self.nanos > 0),
            }
        };
        scaled.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// Whole units, rounded up (upstream's `Value()`).
    pub fn value(&self) -> i64 {
        self.scaled_value(0)
    }

    /// Thousandths, rounded up (upstream's `MilliValue()`): millicores of
    /// a CPU quantity.
    pub fn milli_value(&self) -> i64 {
        self.scaled_value(-3)
    }

    /// The amount as a float (upstream's `AsApproximateFloat64()`).
    pub fn as_f64(&self) -> f64 {
        self.nanos as f64 / NANOS as f64
    }

    /// True if the amount is zero.
    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }
}

impl ParsedQuantity {
    /// True if the amount is below zero.
    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// The quantity written as upstream's `Quantity.String()` writes it in
    /// `format`: the canonical form, e.g. `1500m`, `2k`, `1536Mi`, `5e3`.
    ///
    /// A binary amount below 1024 units, or with a fraction of a unit, is
    /// written in [`QuantityFormat::DecimalSI`], as upstream does.
    ///
    /// ```
    /// use orchestra_core::api::quantity::{ParsedQuantity, QuantityFormat};
    ///
    /// let q = |s: &str| ParsedQuantity::parse(s).unwrap();
    /// assert_eq!(q("1000m").canonical(QuantityFormat::DecimalSI), "1");
    /// assert_eq!(q("1.5Gi").canonical(QuantityFormat::BinarySI), "1536Mi");
    /// assert_eq!((q("250m") + q("250m")).canonical(QuantityFormat::of("250m")), "500m");
    /// ```
    pub fn canonical(&self, format: QuantityFormat) -> String {
        if self.nanos == 0 {
            return "0".to_owned();
        }
        let whole = self.nanos % NANOS == 0;
        let binary = format == QuantityFormat::BinarySI && whole && self.nanos.abs() >= 1024 * NANOS;
        if binary {
            let (mut units, mut power) = (self.nanos / NANOS, 0);
            while power < 6 && units % 1024 == 0 {
                units /= 1024;
                power += 1;
            }
            return format!("{units}{}", ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power]);
        }
        // nanos = mantissa × 10^exponent, with as few digits as possible and
        // the exponent a multiple of three.
        let (mut mantissa, mut exponent) = (self.nanos, -9i32);
        while mantissa % 10 == 0 {
            mantissa /= 10;
            exponent += 1;
        }
        let mut lower = exponent.rem_euclid(3);
        if format != QuantityFormat::DecimalExponent {
            lower = lower.max(exponent - 18);
        }
        mantissa = mantissa.saturating_mul(pow10(lower.unsigned_abs()).unwrap_or(i128::MAX));
        exponent -= lower;
        match format {
            QuantityFormat::DecimalExponent if exponent != 0 => format!("{mantissa}e{exponent}"),
            QuantityFormat::DecimalExponent => mantissa.to_string(),
            _ => {
                let suffix = match exponent {
                    -9 => "n",
                    -6 => "u",
                    -3 => "m",
                    3 => "k",
                    6 => "M",
                    9 => "G",
                    12 => "T",
                    15 => "P",
                    18 => "E",
                    _ => "",
                };
                format!("{mantissa}{suffix}")
            }
        }
    }
}

impl std::ops::Add for ParsedQuantity {
    type Output = ParsedQuantity;

    /// The sum, saturated.
    fn add(self, other: ParsedQuantity) -> ParsedQuantity {
        ParsedQuantity { nanos: self.nanos.saturating_add(other.nanos) }
    }
}

impl std::ops::AddAssign for ParsedQuantity {
    fn add_assign(&mut self, other: ParsedQuantity) {
        *self = *self + other;
    }
}

impl std::ops::Sub for ParsedQuantity {
    type Output = ParsedQuantity;

    /// The difference, saturated.
    fn sub(self, other: ParsedQuantity) -> ParsedQuantity {
        ParsedQuantity { nanos: self.nanos.saturating_sub(other.nanos) }
    }
}

/// How a quantity is written (upstream's `resource.Format`): the family of
/// the suffix it was written with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum QuantityFormat {
    /// A decimal SI suffix (`m`, `k`, `M`, ...) or none.
    #[default]
    DecimalSI,
    /// A binary SI suffix (`Ki`, `Mi`, ...).
    BinarySI,
    /// A decimal exponent (`e3`, `E-2`).
    DecimalExponent,
}

impl QuantityFormat {
    /// The format of a quantity string, read from its suffix as upstream's
    /// parser reads it.
    pub fn of(input: &str) -> QuantityFormat {
        let input = input.trim();
        let suffix = input.trim_start_matches(['+', '-']).trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
        if suffix.ends_with('i') {
            QuantityFormat::BinarySI
        } else if suffix.len() > 1 && suffix.starts_with(['e', 'E']) {
            QuantityFormat::DecimalExponent
        } else {
            QuantityFormat::DecimalSI
        }
    }
}

impl FromStr for ParsedQuantity {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<ParsedQuantity, QuantityError> {
        ParsedQuantity::parse(s)
    }
}

impl TryFrom<&Quantity> for ParsedQuantity {
    type Error = QuantityError;

    fn try_from(q: &Quantity) -> Result<ParsedQuantity, QuantityError> {
        ParsedQuantity::parse(&q.0)
    }
}

/// A quantity of an object in whole units, rounded up (`Quantity.Value()`);
/// 0 if it does not parse (an object the API server accepted holds valid
/// quantities).
pub fn value(q: &Quantity) -> i64 {
    ParsedQuantity::parse(&q.0).map_or(0, |q| q.value())
}

/// A quantity of an object in thousandths, rounded up
/// (`Quantity.MilliValue()`); 0 if it does not parse.
pub fn milli_value(q: &Quantity) -> i64 {
    ParsedQuantity::parse(&q.0).map_or(0, |q| q.milli_value())
}

/// `10^n`, if it fits an `i128`.
fn pow10(n: u32) -> Option<i128> {
    10i128.checked_pow(n)
}

/// `a / b` rounded towards positive infinity (`b > 0`), in 64 bits when the
/// operands fit (a 128-bit division is a library call).
fn ceil_div(a: i128, b: i128) -> i128 {
    if let (Ok(a), Ok(b)) = (i64::try_from(a), i64::try_from(b)) {
        let (q, r) = (a / b, a % b);
        return i128::from(q + i64::from(r > 0));
    }
    let (q, r) = (a / b, a % b);
    q + i128::from(r > 0)
}

/// The suffix's base-10 exponent, or its power of 1024.
enum Suffix {
    Decimal(i32),
    Binary(u32),
}

fn suffix(s: &str) -> Result<Suffix, QuantityError> {
    Ok(match s {
        "" => Suffix::Decimal(0),
        "n" => Suffix::Decimal(-9),
        "u" => Suffix::Decimal(-6),
        "m" => Suffix::Decimal(-3),
        "k" => Suffix::Decimal(3),
        "M" => Suffix::Decimal(6),
        "G" => Suffix::Decimal(9),
        "T" => Suffix::Decimal(12),
        "P" => Suffix::Decimal(15),
        "E" => Suffix::Decimal(18),
        "Ki" => Suffix::Binary(1),
        "Mi" => Suffix::Binary(2),
        "Gi" => Suffix::Binary(3),
        "Ti" => Suffix::Binary(4),
        "Pi" => Suffix::Binary(5),
        "Ei" => Suffix::Binary(6),
        _ => match s.strip_prefix(['e', 'E']) {
            Some(exponent) if !exponent.is_empty() => {
                Suffix::Decimal(exponent.parse().map_err(|_| QuantityError::Suffix)?)
            }
            _ => return Err(QuantityError::Suffix),
        },
    })
}

/// Parses `[+-]digits[.digits]suffix` to nano-units, following upstream's
/// `parseQuantityString`: the digits may be missing (`-`, `.5`, `m` read as
/// 0 and 0.5 and 0m), the suffix is a run of suffix letters, an optional
/// sign and digits.
fn parse(s: &str) -> Result<i128, QuantityError> {
    if s.is_empty() {
        return Err(QuantityError::Format);
    }
    let bytes = s.as_bytes();
    let (negative, mut at) = match bytes[0] {
        b'-' => (true, 1),
        b'+' => (false, 1),
        _ => (false, 0),
    };
    // The significant digits, as many as fit; `exponent` is the power of ten
    // they stand for, `inexact` whether a dropped digit was not zero.
    let mut mantissa: u128 = 0;
    let mut exponent: i64 = 0;
    let mut inexact = false;
    let mut digit = |d: u8, fraction: bool, mantissa: &mut u128, exponent: &mut i64| match mantissa
        .checked_mul(10)
        .and_then(|m| m.checked_add(u128::from(d)))
    {
        Some(m) => {
            *mantissa = m;
            *exponent -= i64::from(fraction);
        }
        None => {
            *exponent += i64::from(!fraction);
            inexact |= d != 0;
        }
    };
    while let Some(d) = bytes.get(at).filter(|b| b.is_ascii_digit()) {
        digit(d - b'0', false, &mut mantissa, &mut exponent);
        at += 1;
    }
    if bytes.get(at) == Some(&b'.') {
        at += 1;
        while let Some(d) = bytes.get(at).filter(|b| b.is_ascii_digit()) {
            digit(d - b'0', true, &mut mantissa, &mut exponent);
            at += 1;
        }
    }
    // The suffix: letters, then an optional sign and digits, then the end.
    let rest = &s[at..];
    let letters = rest.find(|c: char| !"eEinumkKMGTP".contains(c)).unwrap_or(rest.len());
    let tail = rest[letters..].strip_prefix(['+', '-']).unwrap_or(&rest[letters..]);
    if !tail.bytes().all(|b| b.is_ascii_digit()) {
        return Err(QuantityError::Format);
    }
    let (exponent, binary) = match suffix(rest)? {
        Suffix::Decimal(e) => (exponent + i64::from(e), 0),
        Suffix::Binary(power) => (exponent, power),
    };
    let magnitude = nanos(mantissa, exponent + 9, inexact, binary);
    // A binary amount is capped at i64::MAX units, as upstream caps it.
    let magnitude = if binary > 0 { magnitude.min(i128::from(i64::MAX) * NANOS) } else { magnitude };
    Ok(if negative { -magnitude } else { magnitude })
}

/// `mantissa × 1024^binary × 10^exponent` in nano-units (the exponent
/// already counts the nine), rounded up to whole nano-units, saturated.
fn nanos(mantissa: u128, exponent: i64, inexact: bool, binary: u32) -> i128 {
    if mantissa == 0 {
        return 0;
    }
    let Some(mantissa) = mantissa.checked_mul(1u128 << (10 * binary)) else { return i128::MAX };
    let magnitude = if exponent >= 0 {
        u32::try_from(exponent).ok().and_then(|e| 10u128.checked_pow(e)).and_then(|p| mantissa.checked_mul(p))
    } else {
        match u32::try_from(-exponent).ok().and_then(|e| 10u128.checked_pow(e)) {
            Some(divisor) => Some(mantissa / divisor + u128::from(mantissa % divisor != 0 || inexact)),
            // Less than a nano-unit: one nano-unit.
            None => Some(1),
        }
    };
    magnitude.and_then(|m| i128::try_from(m).ok()).unwrap_or(i128::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_upstream() {
        // (input, Value(), MilliValue())
        let cases: &[(&str, i64, i64)] = &[
            ("0", 0, 0),
            ("1", 1, 1000),
            ("-1", -1, -1000),
            ("+3", 3, 3000),
            ("100m", 1, 100),
            ("1500m", 2, 1500),
            ("0.5", 1, 500),
            ("1.5", 2, 1500),
            ("0.1", 1, 100),
            (".5", 1, 500),
            ("5.", 5, 5000),
            ("1.G", 1_000_000_000, 1_000_000_000_000),
            ("007", 7, 7000),
            ("1n", 1, 1),
            ("1u", 1, 1),
            ("1500u", 1, 2),
            ("2k", 2000, 2_000_000),
            ("1M", 1_000_000, 1_000_000_000),
            ("1G", 1_000_000_000, 1_000_000_000_000),
            ("1T", 1_000_000_000_000, 1_000_000_000_000_000),
            ("1P", 1_000_000_000_000_000, 1_000_000_000_000_000_000),
            ("1E", 1_000_000_000_000_000_000, i64::MAX),
            ("1Ki", 1024, 1_024_000),
            ("0.5Ki", 512, 512_000),
            ("1Mi", 1 << 20, (1 << 20) * 1000),
            ("1.5Gi", 1_610_612_736, 1_610_612_736_000),
            ("1Ti", 1 << 40, (1 << 40) * 1000),
            ("1Pi", 1 << 50, (1 << 50) * 1000),
            ("1Ei", 1 << 60, i64::MAX),
            // Binary amounts are capped at i64::MAX units.
            ("8Ei", i64::MAX, i64::MAX),
            ("1e3", 1000, 1_000_000),
            ("1E3", 1000, 1_000_000),
            ("1e+3", 1000, 1_000_000),
            ("12e-3", 1, 12),
            ("1.5e1", 15, 15_000),
            // Negative amounts round up, towards zero.
            ("-1.5", -1, -1500),
            ("-1500u", 0, -1),
            // Below a nano-unit: rounds up to one nano-unit.
            ("1e-12", 1, 1),
            ("-1e-12", 0, 0),
            ("0.0000000001", 1, 1),
            // Upstream's reading of missing digits.
            ("-", 0, 0),
            ("m", 0, 0),
            ("Ki", 0, 0),
            ("1e40", i64::MAX, i64::MAX),
            ("-1e40", i64::MIN, i64::MIN),
            ("123456789012345678901234567890123456789012", i64::MAX, i64::MAX),
            (" 2 ", 2, 2000),
        ];
        for (input, value, milli) in cases {
            let q = ParsedQuantity::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!((q.value(), q.milli_value()), (*value, *milli), "{input:?}");
        }
    }

    #[test]
    fn rejects_what_upstream_rejects() {
        let cases: &[(&str, QuantityError)] = &[
            ("", QuantityError::Format),
            ("1.1.1", QuantityError::Format),
            ("1+1.0M", QuantityError::Format),
            ("1e3m", QuantityError::Format),
            ("12x", QuantityError::Format),
            ("x", QuantityError::Format),
            ("1 Gi", QuantityError::Format),
            ("1Q", QuantityError::Format),
            ("1e", QuantityError::Suffix),
            ("1e-", QuantityError::Suffix),
            ("5K", QuantityError::Suffix),
            ("1ki", QuantityError::Suffix),
            ("0.1mi", QuantityError::Suffix),
            ("1i", QuantityError::Suffix),
            ("1Ki3", QuantityError::Suffix),
            ("1e99999999999", QuantityError::Suffix),
        ];
        for (input, error) in cases {
            assert_eq!(ParsedQuantity::parse(input), Err(*error), "{input:?}");
        }
    }

    #[test]
    fn canonical_forms_match_upstream() {
        use QuantityFormat::{BinarySI, DecimalExponent, DecimalSI};
        let cases: &[(&str, QuantityFormat, &str)] = &[
            ("0", DecimalSI, "0"),
            ("0Mi", BinarySI, "0"),
            ("1", DecimalSI, "1"),
            ("1000m", DecimalSI, "1"),
            ("1500m", DecimalSI, "1500m"),
            ("0.5", DecimalSI, "500m"),
            ("2000", DecimalSI, "2k"),
            ("1100", DecimalSI, "1100"),
            ("10", DecimalSI, "10"),
            ("100", DecimalSI, "100"),
            ("1n", DecimalSI, "1n"),
            ("1.5G", DecimalSI, "1500M"),
            ("-250m", DecimalSI, "-250m"),
            ("1e21", DecimalSI, "1000E"),
            ("1Gi", BinarySI, "1Gi"),
            ("1.5Gi", BinarySI, "1536Mi"),
            ("1025", BinarySI, "1025"),
            ("2048", BinarySI, "2Ki"),
            // Below 1024, or with a fraction: decimal.
            ("512", BinarySI, "512"),
            ("0.5Ki", BinarySI, "512"),
            ("1500m", BinarySI, "1500m"),
            ("5e3", DecimalExponent, "5e3"),
            ("1.5e1", DecimalExponent, "15"),
            ("1e-3", DecimalExponent, "1e-3"),
        ];
        for (input, format, expected) in cases {
            let q = ParsedQuantity::parse(input).unwrap();
            assert_eq!(q.canonical(*format), *expected, "{input:?} as {format:?}");
        }
        let formats: &[(&str, QuantityFormat)] = &[
            ("1", DecimalSI),
            ("100m", DecimalSI),
            ("1E", DecimalSI),
            ("1Ki", BinarySI),
            ("-2.5Gi", BinarySI),
            ("1e3", DecimalExponent),
            ("1E-2", DecimalExponent),
        ];
        for (input, format) in formats {
            assert_eq!(QuantityFormat::of(input), *format, "{input:?}");
        }
        let q = |s: &str| ParsedQuantity::parse(s).unwrap();
        assert_eq!(q("1") + q("500m"), q("1.5"));
        assert_eq!(q("1") - q("1500m"), q("-500m"));
        assert!((q("1") - q("2")).is_negative() && !q("0").is_negative());
    }

    #[test]
    fn conversions() {
        let q = |s: &str| ParsedQuantity::parse(s).unwrap();
        assert_eq!(q("1.5Gi").as_f64(), 1_610_612_736.0);
        assert_eq!(q("250m").as_f64(), 0.25);
        assert_eq!(q("1500m").scaled_value(3), 1);
        assert_eq!(q("5G").scaled_value(6), 5000);
        assert_eq!(q("1Gi").scaled_value(-9), 1_073_741_824_000_000_000);
        assert_eq!(q("1n").scaled_value(-9), 1);
        assert_eq!(q("1n").scaled_value(-12), 1000);
        assert_eq!(q("1").scaled_value(40), 1);
        assert_eq!(q("-1").scaled_value(40), 0);
        assert_eq!(q("1k"), q("1000"));
        assert_eq!(q("1000m"), q("1"));
        assert!(q("1Ki") > q("1k"));
        assert!(q("0m").is_zero());
        assert_eq!(ParsedQuantity::from_units(3), q("3"));
        assert_eq!(value(&Quantity("2Mi".into())), 2 << 20);
        assert_eq!(milli_value(&Quantity("2".into())), 2000);
        assert_eq!(milli_value(&Quantity("nonsense".into())), 0);
        assert_eq!(ParsedQuantity::try_from(&Quantity("1k".into())), Ok(q("1k")));
    }
}
