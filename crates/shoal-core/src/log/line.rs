//! One log record, taken out of a `tracing` event, and its line of text.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Level};

use super::Who;

/// A record as shoal writes or forwards it.
#[derive(Clone, Debug)]
pub struct Record {
    pub level: Level,
    /// Where it was made: a module path such as `shoal_core::ina`.
    pub target: String,
    /// The message, followed by the event's other fields as ` key=value`.
    pub message: String,
    /// Seconds since the Unix epoch.
    pub time: f64,
    pub who: Option<Who>,
}

impl Record {
    pub fn of(event: &Event<'_>, who: Option<Who>) -> Record {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        Record {
            level: *event.metadata().level(),
            target: event.metadata().target().to_string(),
            message: fields.message + &fields.rest,
            time,
            who,
        }
    }

    /// `2026-11-23T12:36:19.123Z  WARN shoal[rank 1] shoal_core::ina: message`.
    pub fn line(&self) -> String {
        let who = self.who.map_or_else(|| "?".into(), Who::label);
        format!(
            "{} {:>5} shoal[{who}] {}: {}",
            utc_timestamp(self.time),
            self.level,
            self.target,
            self.message
        )
    }
}

/// Collects the `message` field and the others as ` key=value`.
#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        }
    }
}

/// RFC 3339 in UTC with milliseconds, from seconds since the epoch.
fn utc_timestamp(secs: f64) -> String {
    let millis = (secs * 1000.0) as i64;
    let (days, ms_of_day) = (millis.div_euclid(86_400_000), millis.rem_euclid(86_400_000));
    let (y, m, d) = civil_from_days(days);
    let s = ms_of_day / 1000;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        s / 3600,
        s / 60 % 60,
        s % 60,
        ms_of_day % 1000
    )
}

/// The proleptic Gregorian date of a day number (days since 1970-01-01),
/// after Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_dates() {
        assert_eq!(utc_timestamp(0.0), "1970-01-01T00:00:00.000Z");
        // 2024-02-29 23:59:59.250, a leap day.
        assert_eq!(utc_timestamp(1_709_251_199.25), "2024-02-29T23:59:59.250Z");
        assert_eq!(utc_timestamp(1_795_437_379.5), "2026-11-23T12:36:19.500Z");
    }

    #[test]
    fn a_line_names_the_process_level_and_target() {
        let r = Record {
            level: Level::WARN,
            target: "shoal_core::ina".into(),
            message: "switch unreachable".into(),
            time: 0.0,
            who: Some(Who::Rank(2)),
        };
        assert_eq!(
            r.line(),
            "1970-01-01T00:00:00.000Z  WARN shoal[rank 2] shoal_core::ina: switch unreachable"
        );
    }
}
