//! OpenAPI string `format`s the CRD validator checks (upstream's supported
//! set; unknown formats are accepted, like upstream).

/// True if `s` is a valid string of `format` (or the format is not checked).
pub fn string_matches(format: &str, s: &str) -> bool {
    match format {
        "date-time" | "datetime" => date_time(s),
        "date" => date(s),
        "byte" => base64(s),
        "uuid" => uuid(s, None),
        "uuid3" => uuid(s, Some('3')),
        "uuid4" => uuid(s, Some('4')),
        "uuid5" => uuid(s, Some('5')),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => cidr(s),
        "mac" => mac(s),
        "hostname" => hostname(s),
        "duration" => duration(s),
        "int32" => s.parse::<i32>().is_ok(),
        "int64" => s.parse::<i64>().is_ok(),
        "email" => s.split_once('@').is_some_and(|(user, host)| !user.is_empty() && hostname(host)),
        _ => true,
    }
}

fn digits(s: &str, n: usize) -> Option<u32> {
    (s.len() == n && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
}

/// `YYYY-MM-DD` with a real day of the month.
fn date(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    let [y, m, d] = parts.as_slice() else {
        return false;
    };
    let (Some(y), Some(m), Some(d)) = (digits(y, 4), digits(m, 2), digits(d, 2)) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

/// RFC 3339: `2024-01-02T03:04:05[.frac](Z|±hh:mm)`.
fn date_time(s: &str) -> bool {
    let Some((day, rest)) = s.split_once(['T', 't', ' ']) else {
        return false;
    };
    if !date(day) || rest.len() < 8 {
        return false;
    }
    let (time, zone) = match rest.find(['Z', 'z', '+', '-']) {
        Some(i) => rest.split_at(i),
        None => return false,
    };
    let (clock, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let hms: Vec<&str> = clock.split(':').collect();
    let [h, m, sec] = hms.as_slice() else {
        return false;
    };
    let ok_clock = digits(h, 2).is_some_and(|h| h < 24)
        && digits(m, 2).is_some_and(|m| m < 60)
        && digits(sec, 2).is_some_and(|s| s <= 60)
        && !fraction.is_empty()
        && fraction.bytes().all(|b| b.is_ascii_digit());
    let ok_zone = matches!(zone, "Z" | "z")
        || (zone.len() == 6
            && zone[1..]
                .split_once(':')
                .is_some_and(|(h, m)| digits(h, 2).is_some_and(|h| h < 24) && digits(m, 2).is_some_and(|m| m < 60)));
    ok_clock && ok_zone
}

fn base64(s: &str) -> bool {
    let s = s.trim_end_matches('=');
    s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/') && s.len() % 4 != 1
}

fn uuid(s: &str, version: Option<char>) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    let lengths = [8, 4, 4, 4, 12];
    groups.len() == 5
        && groups.iter().zip(lengths).all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
        && version.is_none_or(|v| groups[2].starts_with(v))
}

fn cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => bits <= 32,
        Ok(std::net::IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

fn mac(s: &str) -> bool {
    let groups: Vec<&str> = s.split([':', '-']).collect();
    matches!(groups.len(), 6 | 8 | 20)
        && groups.iter().all(|g| g.len() == 2 && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn hostname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// Go durations (`1h30m`, `300ms`, `-1.5s`).
fn duration(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    if s == "0" {
        return true;
    }
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let number_len = rest.bytes().take_while(|b| b.is_ascii_digit() || *b == b'.').count();
        if number_len == 0 {
            return false;
        }
        rest = &rest[number_len..];
        let unit =
            ["ns", "us", "µs", "ms", "s", "m", "h"].into_iter().filter(|u| rest.starts_with(u)).max_by_key(|u| u.len());
        match unit {
            Some(u) => rest = &rest[u.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::string_matches;

    #[test]
    fn formats() {
        let cases = [
            ("date-time", "2024-01-02T03:04:05Z", true),
            ("date-time", "2024-01-02T03:04:05.123+02:00", true),
            ("date-time", "2024-01-02", false),
            ("date-time", "2024-01-02T25:04:05Z", false),
            ("date", "2024-02-29", true),
            ("date", "2023-02-29", false),
            ("byte", "aGVsbG8=", true),
            ("byte", "not base64!", false),
            ("uuid", "123e4567-e89b-12d3-a456-426614174000", true),
            ("uuid4", "123e4567-e89b-12d3-a456-426614174000", false),
            ("ipv4", "10.0.0.1", true),
            ("ipv4", "10.0.0.256", false),
            ("ipv6", "::1", true),
            ("cidr", "10.0.0.0/8", true),
            ("cidr", "10.0.0.0/33", false),
            ("mac", "01:23:45:67:89:ab", true),
            ("hostname", "a.example.com", true),
            ("hostname", "-a.com", false),
            ("duration", "1h30m", true),
            ("duration", "5 minutes", false),
            ("int32", "12", true),
            ("int32", "3000000000", false),
            ("password", "anything", true),
        ];
        for (format, s, ok) in cases {
            assert_eq!(string_matches(format, s), ok, "{format} {s}");
        }
    }
}
