//! When a schedule fires: five-field cron expressions in a time zone, and fixed intervals.
//!
//! The SDK's `ScheduleSpec` carries `cron_expressions` (standard five-field
//! cron: minute, hour, day of month, month, day of week, with `*`, lists,
//! ranges, steps, month and weekday names, and the `@hourly`-style macros),
//! `intervals` (`{"every": "PT1H", "offset": "PT5M"}`, ISO-8601 durations,
//! aligned to the Unix epoch) and a `timezone`. A schedule's next fire is the
//! earliest next fire of its rules. The cron evaluator works on wall-clock
//! seconds with the civil-calendar conversion below; a named IANA zone (jiff,
//! with its time-zone database bundled) maps wall-clock minutes to instants.
//! Across a daylight-saving change a cron rule keeps to the wall clock: a
//! wall time the spring-forward gap skips fires when the gap ends (02:30
//! becomes 03:30), and a wall time the fall-back fold repeats fires once, at
//! its first occurrence. Intervals are absolute and ignore the zone. The
//! cron crates on crates.io all bring chrono and a seconds field this
//! protocol does not use; this one is small enough to test exhaustively.

use std::collections::BTreeSet;

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::Timestamp;

/// Seconds in a day.
const DAY: i64 = 86_400;
/// The furthest a cron search looks ahead (a Feb-29-on-a-Monday rule fires within 28 years).
const HORIZON_SECONDS: i64 = 30 * 366 * DAY;

/// One parsed cron expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    minutes: BTreeSet<u32>,
    hours: BTreeSet<u32>,
    days_of_month: BTreeSet<u32>,
    months: BTreeSet<u32>,
    days_of_week: BTreeSet<u32>,
    /// Day of month was `*` (standard cron: then only the weekday restricts, and vice versa).
    any_day_of_month: bool,
    any_day_of_week: bool,
}

/// A fixed interval: fires at every `offset + k * every` seconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    /// The period, seconds (at least 1).
    pub every: i64,
    /// The phase, seconds (less than `every`).
    pub offset: i64,
}

/// A schedule's rules.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Spec {
    /// Cron rules.
    pub crons: Vec<Cron>,
    /// Interval rules.
    pub intervals: Vec<Interval>,
    /// The zone cron rules are read in; `None` is UTC.
    pub zone: Option<TimeZone>,
}

impl Spec {
    /// The first fire strictly after `after` (Unix seconds), if any rule fires again.
    pub fn next_after(&self, after: i64) -> Option<i64> {
        let crons = self
            .crons
            .iter()
            .filter_map(|c| c.next_after_in(after, self.zone.as_ref()));
        let intervals = self.intervals.iter().map(|i| i.next_after(after));
        crons.chain(intervals).min()
    }
}

/// The zone called `name` (an IANA name such as `Europe/Kyiv`, or `UTC`);
/// `None` for UTC itself, so UTC specs skip the zone arithmetic.
pub fn parse_zone(name: &str) -> Result<Option<TimeZone>, String> {
    if matches!(name, "UTC" | "Etc/UTC" | "Z") {
        return Ok(None);
    }
    TimeZone::get(name).map(Some).map_err(|_| {
        format!("{name:?} is not a time zone of the IANA database (such as UTC or Europe/Kyiv)")
    })
}

/// The wall-clock seconds (Unix seconds as if the zone were UTC) of `at` in `zone`.
fn wall_clock(zone: &TimeZone, at: i64) -> Option<i64> {
    let offset = zone.to_offset(Timestamp::from_second(at).ok()?);
    Some(at + i64::from(offset.seconds()))
}

/// The instant a wall-clock minute names in `zone`: its first occurrence
/// when a fold repeats it, the end of the gap when a gap skips it.
fn instant(zone: &TimeZone, wall: i64) -> Option<i64> {
    let days = wall.div_euclid(DAY);
    let (year, month, day) = civil_from_days(days);
    let seconds = wall.rem_euclid(DAY);
    let civil = DateTime::new(
        i16::try_from(year).ok()?,
        i8::try_from(month).ok()?,
        i8::try_from(day).ok()?,
        i8::try_from(seconds / 3600).ok()?,
        i8::try_from(seconds % 3600 / 60).ok()?,
        0,
        0,
    )
    .ok()?;
    // jiff's `compatible` choice: the earlier instant in a fold, the later
    // (the wall time moved forward by the gap) in a gap.
    zone.to_ambiguous_timestamp(civil)
        .compatible()
        .ok()
        .map(Timestamp::as_second)
}

impl Interval {
    /// Parses `every` and the optional `offset` (ISO-8601 durations).
    pub fn parse(every: &str, offset: Option<&str>) -> Result<Interval, String> {
        let every = parse_duration(every)?;
        if every < 1 {
            return Err("every must be at least one second".into());
        }
        let offset = offset.map(parse_duration).transpose()?.unwrap_or(0);
        if offset >= every {
            return Err("offset must be shorter than every".into());
        }
        Ok(Interval { every, offset })
    }

    /// The first fire strictly after `after`.
    pub fn next_after(&self, after: i64) -> i64 {
        let since = after - self.offset;
        let k = since.div_euclid(self.every) + 1;
        self.offset + k * self.every
    }
}

/// `PnDTnHnMnS` (any part may be absent, at least one present) in seconds.
pub fn parse_duration(text: &str) -> Result<i64, String> {
    let bad = || format!("{text:?} is not an ISO-8601 duration such as PT1H, PT30M or P1D");
    let rest = text.strip_prefix('P').ok_or_else(bad)?;
    let (date, time) = match rest.split_once('T') {
        Some((date, time)) if !time.is_empty() => (date, Some(time)),
        Some(_) => return Err(bad()),
        None => (rest, None),
    };
    let mut total: i64 = 0;
    let mut parts = 0;
    let mut add = |section: &str, units: &[(char, i64)]| -> Result<(), String> {
        let mut number = String::new();
        let mut allowed = units.iter();
        for c in section.chars() {
            if c.is_ascii_digit() {
                number.push(c);
                continue;
            }
            let scale = allowed
                .by_ref()
                .find(|(unit, _)| *unit == c)
                .map(|(_, s)| *s)
                .ok_or_else(bad)?;
            let n: i64 = number.parse().map_err(|_| bad())?;
            total = n
                .checked_mul(scale)
                .and_then(|v| total.checked_add(v))
                .ok_or_else(bad)?;
            number.clear();
            parts += 1;
        }
        if number.is_empty() {
            Ok(())
        } else {
            Err(bad())
        }
    };
    add(date, &[('W', 7 * DAY), ('D', DAY)])?;
    if let Some(time) = time {
        add(time, &[('H', 3600), ('M', 60), ('S', 1)])?;
    }
    if parts == 0 {
        return Err(bad());
    }
    Ok(total)
}

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

impl Cron {
    /// Parses a five-field expression or a macro (`@yearly`, `@monthly`,
    /// `@weekly`, `@daily`, `@hourly`).
    pub fn parse(expression: &str) -> Result<Cron, String> {
        let expanded = match expression.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, dom, month, dow] = fields[..] else {
            return Err(format!(
                "{expression:?} has {} fields; a cron expression has five (minute hour day-of-month month day-of-week)",
                fields.len()
            ));
        };
        let mut days_of_week = field(dow, 0, 7, &WEEKDAYS, "day-of-week")?;
        if days_of_week.remove(&7) {
            days_of_week.insert(0);
        }
        let cron = Cron {
            minutes: field(minute, 0, 59, &[], "minute")?,
            hours: field(hour, 0, 23, &[], "hour")?,
            days_of_month: field(dom, 1, 31, &[], "day-of-month")?,
            months: field(month, 1, 12, &MONTHS, "month")?,
            days_of_week,
            any_day_of_month: dom == "*" || dom == "?",
            any_day_of_week: dow == "*" || dow == "?",
        };
        if cron.next_after(0).is_none() {
            return Err(format!("{expression:?} never fires"));
        }
        Ok(cron)
    }

    fn day_matches(&self, day_of_month: u32, weekday: u32) -> bool {
        let dom = self.days_of_month.contains(&day_of_month);
        let dow = self.days_of_week.contains(&weekday);
        match (self.any_day_of_month, self.any_day_of_week) {
            (true, true) => true,
            (true, false) => dow,
            (false, true) => dom,
            // Both restricted: standard cron fires on either.
            (false, false) => dom || dow,
        }
    }

    /// The first matching wall-clock minute in `zone` (`None`: UTC)
    /// strictly after the instant `after` (Unix seconds).
    pub fn next_after_in(&self, after: i64, zone: Option<&TimeZone>) -> Option<i64> {
        let Some(zone) = zone else {
            return self.next_after(after);
        };
        let start = wall_clock(zone, after)?;
        let mut cursor = start;
        loop {
            let wall = self.next_after(cursor)?;
            if wall > start.saturating_add(HORIZON_SECONDS) {
                return None;
            }
            // A repeated wall time whose first occurrence is already past
            // does not fire again; look at the next matching minute.
            match instant(zone, wall) {
                Some(at) if at > after => return Some(at),
                _ => cursor = wall,
            }
        }
    }

    /// The first matching minute strictly after `after` (Unix seconds, UTC).
    pub fn next_after(&self, after: i64) -> Option<i64> {
        let mut t = (after.div_euclid(60) + 1) * 60;
        let end = after.saturating_add(HORIZON_SECONDS);
        while t <= end {
            let days = t.div_euclid(DAY);
            let (year, month, day) = civil_from_days(days);
            let day_start = days * DAY;
            if !self.months.contains(&month) {
                let (y, m) = if month == 12 {
                    (year + 1, 1)
                } else {
                    (year, month + 1)
                };
                t = days_from_civil(y, m, 1) * DAY;
                continue;
            }
            // 1970-01-01 was a Thursday (4).
            let weekday = (days + 4).rem_euclid(7) as u32;
            if !self.day_matches(day, weekday) {
                t = day_start + DAY;
                continue;
            }
            let seconds = t - day_start;
            let hour = (seconds / 3600) as u32;
            let minute = ((seconds % 3600) / 60) as u32;
            if !self.hours.contains(&hour) {
                match self.hours.range(hour + 1..).next() {
                    Some(h) => t = day_start + i64::from(*h) * 3600,
                    None => t = day_start + DAY,
                }
                continue;
            }
            match self.minutes.range(minute..).next() {
                Some(m) => return Some(day_start + i64::from(hour) * 3600 + i64::from(*m) * 60),
                None => t = day_start + (i64::from(hour) + 1) * 3600,
            }
        }
        None
    }
}

/// One cron field: `*`, `a`, `a-b`, `*/n`, `a-b/n`, `a/n`, comma lists, names.
fn field(
    text: &str,
    min: u32,
    max: u32,
    names: &[&str],
    what: &str,
) -> Result<BTreeSet<u32>, String> {
    let value = |raw: &str| -> Result<u32, String> {
        let upper = raw.to_ascii_uppercase();
        if let Some(i) = names.iter().position(|n| *n == upper) {
            // Month names start at 1, weekday names at 0.
            return Ok(i as u32 + if names.len() == 12 { 1 } else { 0 });
        }
        let n: u32 = raw
            .parse()
            .map_err(|_| format!("the {what} field has {raw:?}, not a number"))?;
        if n < min || n > max {
            return Err(format!("the {what} field has {n}, outside {min}-{max}"));
        }
        Ok(n)
    };
    let mut out = BTreeSet::new();
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("the {what} field has step {step:?}"))?;
                (range, step)
            }
            None => (item, 1),
        };
        let (low, high) = match range {
            "*" | "?" => (min, max),
            _ => match range.split_once('-') {
                Some((a, b)) => (value(a)?, value(b)?),
                None if step > 1 => (value(range)?, max),
                None => {
                    let v = value(range)?;
                    (v, v)
                }
            },
        };
        if low > high {
            return Err(format!("the {what} field has the empty range {range:?}"));
        }
        out.extend((low..=high).step_by(step as usize));
    }
    Ok(out)
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date (year, month, day) of a day count since 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unix seconds of a UTC civil time.
    fn at(year: i64, month: u32, day: u32, hour: i64, minute: i64) -> i64 {
        days_from_civil(year, month, day) * DAY + hour * 3600 + minute * 60
    }

    #[test]
    fn the_calendar_conversion_round_trips() {
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(
            days_from_civil(2000, 3, 1) - days_from_civil(2000, 2, 28),
            2
        );
    }

    #[test]
    fn cron_next_fires_match_hand_computed_times() {
        let from = at(2026, 12, 1, 7, 40); // a Tuesday
        for (expression, expected) in [
            ("* * * * *", at(2026, 12, 1, 7, 41)),
            ("*/15 * * * *", at(2026, 12, 1, 7, 45)),
            ("0 * * * *", at(2026, 12, 1, 8, 0)),
            ("30 9 * * *", at(2026, 12, 1, 9, 30)),
            ("0 6 * * *", at(2026, 12, 2, 6, 0)),
            ("0 0 * * MON", at(2026, 12, 7, 0, 0)),
            ("0 0 * * 7", at(2026, 12, 6, 0, 0)),
            ("0 12 1 * *", at(2026, 12, 1, 12, 0)),
            ("0 6 1 * *", at(2027, 1, 1, 6, 0)),
            ("0 0 29 2 *", at(2028, 2, 29, 0, 0)),
            ("0 0 1 JAN-MAR/2 *", at(2027, 1, 1, 0, 0)),
            ("15,45 7-9 * * 1-5", at(2026, 12, 1, 7, 45)),
            ("0 0 13 * FRI", at(2026, 12, 4, 0, 0)), // the 13th OR a Friday
            ("@hourly", at(2026, 12, 1, 8, 0)),
            ("@yearly", at(2027, 1, 1, 0, 0)),
        ] {
            let cron = Cron::parse(expression).unwrap();
            assert_eq!(cron.next_after(from), Some(expected), "{expression}");
            // Strictly after: asking at a fire time gives the next one.
            assert!(
                cron.next_after(expected).unwrap() > expected,
                "{expression}"
            );
        }
    }

    #[test]
    fn cron_rules_follow_the_wall_clock_of_their_zone() {
        let kyiv = parse_zone("Europe/Kyiv").unwrap();
        let nine = Cron::parse("0 9 * * *").unwrap();
        // Winter is UTC+2, summer UTC+3.
        assert_eq!(
            nine.next_after_in(at(2027, 1, 15, 0, 0), kyiv.as_ref()),
            Some(at(2027, 1, 15, 7, 0))
        );
        assert_eq!(
            nine.next_after_in(at(2027, 7, 15, 0, 0), kyiv.as_ref()),
            Some(at(2027, 7, 15, 6, 0))
        );
        let york = parse_zone("America/New_York").unwrap();
        // 2026-03-08: 02:00 EST jumps to 03:00 EDT; 02:30 fires at 03:30 EDT.
        let half_two = Cron::parse("30 2 * * *").unwrap();
        let gap = half_two
            .next_after_in(at(2026, 3, 8, 5, 0), york.as_ref())
            .unwrap();
        assert_eq!(gap, at(2026, 3, 8, 7, 30));
        assert_eq!(
            half_two.next_after_in(gap, york.as_ref()),
            Some(at(2026, 3, 9, 6, 30)),
            "the next day is EDT"
        );
        // 2026-11-01: 01:00-01:59 happens twice; 01:30 fires once, in EDT.
        let half_one = Cron::parse("30 1 * * *").unwrap();
        let fold = half_one
            .next_after_in(at(2026, 11, 1, 4, 0), york.as_ref())
            .unwrap();
        assert_eq!(fold, at(2026, 11, 1, 5, 30));
        assert_eq!(
            half_one.next_after_in(fold, york.as_ref()),
            Some(at(2026, 11, 2, 6, 30)),
            "not again at 01:30 EST"
        );
        // Inside the repeated hour, the first occurrence is past: next day.
        assert_eq!(
            half_one.next_after_in(at(2026, 11, 1, 6, 10), york.as_ref()),
            Some(at(2026, 11, 2, 6, 30))
        );
        // An hourly rule in the fold keeps to the wall clock.
        let hourly = Cron::parse("0 * * * *").unwrap();
        assert_eq!(
            hourly.next_after_in(at(2026, 11, 1, 5, 30), york.as_ref()),
            Some(at(2026, 11, 1, 7, 0)),
            "01:00 EST repeats a wall time already fired; 02:00 EST is next"
        );
        // UTC and its aliases need no zone; intervals ignore the zone.
        for utc in ["UTC", "Etc/UTC", "Z"] {
            assert_eq!(parse_zone(utc), Ok(None));
        }
        for bad in ["Mars/Olympus", "", "Europe/"] {
            assert!(parse_zone(bad).is_err(), "{bad:?}");
        }
        let spec = Spec {
            crons: Vec::new(),
            intervals: vec![Interval::parse("PT1H", None).unwrap()],
            zone: kyiv,
        };
        assert_eq!(
            spec.next_after(at(2027, 1, 15, 0, 10)),
            Some(at(2027, 1, 15, 1, 0))
        );
    }

    #[test]
    fn bad_cron_expressions_are_refused_with_the_field() {
        for (expression, needle) in [
            ("* * * *", "has 4 fields"),
            ("60 * * * *", "minute"),
            ("* 24 * * *", "hour"),
            ("* * 0 * *", "day-of-month"),
            ("* * * 13 *", "month"),
            ("* * * * 8", "day-of-week"),
            ("*/0 * * * *", "step"),
            ("5-1 * * * *", "empty range"),
            ("0 0 30 2 *", "never fires"),
            ("x * * * *", "not a number"),
        ] {
            let error = Cron::parse(expression).unwrap_err();
            assert!(error.contains(needle), "{expression}: {error}");
        }
    }

    #[test]
    fn intervals_are_epoch_aligned_with_their_offset() {
        let hourly = Interval::parse("PT1H", Some("PT5M")).unwrap();
        assert_eq!(
            hourly.next_after(at(2026, 12, 1, 7, 40)),
            at(2026, 12, 1, 8, 5)
        );
        assert_eq!(
            hourly.next_after(at(2026, 12, 1, 8, 5)),
            at(2026, 12, 1, 9, 5)
        );
        assert_eq!(parse_duration("P1DT2H3M4S"), Ok(DAY + 7384));
        assert_eq!(parse_duration("P2W"), Ok(14 * DAY));
        assert_eq!(parse_duration("PT30S"), Ok(30));
        for bad in ["", "P", "PT", "1H", "PT1X", "PT1H2", "PTH"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert!(Interval::parse("PT0S", None).is_err());
        assert!(Interval::parse("PT1M", Some("PT1M")).is_err());
        let spec = Spec {
            crons: vec![Cron::parse("0 8 * * *").unwrap()],
            intervals: vec![Interval::parse("PT10M", None).unwrap()],
            zone: None,
        };
        assert_eq!(
            spec.next_after(at(2026, 12, 1, 7, 55)),
            Some(at(2026, 12, 1, 8, 0))
        );
        assert_eq!(
            spec.next_after(at(2026, 12, 1, 7, 41)),
            Some(at(2026, 12, 1, 7, 50))
        );
    }
}
