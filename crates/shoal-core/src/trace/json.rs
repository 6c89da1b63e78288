//! The little JSON the trace files need, appended straight to the output
//! text: a trace line is a flat object of numbers and short strings, and
//! writing it is most of what tracing costs, so events are not built as
//! values first. Strings are escaped by serde_json (through
//! `shoal_plan::json::write_string`); numbers are plain decimals.

use std::fmt::Write;

use shoal_plan::json::write_string;

/// One JSON object being appended to `out`, field by field.
pub struct Obj<'a> {
    out: &'a mut String,
    empty: bool,
}

impl<'a> Obj<'a> {
    pub fn open(out: &'a mut String) -> Obj<'a> {
        out.push('{');
        Obj { out, empty: true }
    }

    fn key(&mut self, k: &str) {
        if !self.empty {
            self.out.push(',');
        }
        self.empty = false;
        write_string(self.out, k);
        self.out.push(':');
    }

    pub fn str(mut self, k: &str, v: &str) -> Obj<'a> {
        self.key(k);
        write_string(self.out, v);
        self
    }

    pub fn int(mut self, k: &str, v: u64) -> Obj<'a> {
        self.key(k);
        decimal(self.out, v);
        self
    }

    pub fn signed(mut self, k: &str, v: i64) -> Obj<'a> {
        self.key(k);
        let _ = write!(self.out, "{v}");
        self
    }

    /// Nanoseconds as microseconds (the format's unit), to the nanosecond.
    pub fn micros(mut self, k: &str, ns: u64) -> Obj<'a> {
        self.key(k);
        decimal(self.out, ns / 1000);
        let frac = ns % 1000;
        self.out.push('.');
        for digit in [frac / 100, frac / 10 % 10, frac % 10] {
            self.out.push((b'0' + digit as u8) as char);
        }
        self
    }

    /// A nested object, filled by `fill`.
    pub fn obj(mut self, k: &str, fill: impl for<'b> FnOnce(Obj<'b>) -> Obj<'b>) -> Obj<'a> {
        self.key(k);
        fill(Obj::open(self.out)).close();
        self
    }

    pub fn close(self) {
        self.out.push('}');
    }
}

/// `v` in decimal, without `fmt`'s machinery (a trace writes millions).
fn decimal(out: &mut String, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    // SAFETY: ASCII digits are UTF-8.
    out.push_str(unsafe { std::str::from_utf8_unchecked(&digits[i..]) });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_json() {
        let mut o = String::new();
        Obj::open(&mut o)
            .str("name", "a\"b\\c\n")
            .int("n", 7)
            .signed("s", -3)
            .micros("ts", 1_234_567)
            .micros("dur", 5)
            .int("zero", 0)
            .int("max", u64::MAX)
            .obj("args", |a| a.int("x", 1))
            .close();
        assert_eq!(
            o,
            r#"{"name":"a\"b\\c\n","n":7,"s":-3,"ts":1234.567,"dur":0.005,"zero":0,"max":18446744073709551615,"args":{"x":1}}"#
        );
    }
}
