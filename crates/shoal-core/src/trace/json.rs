//! The little JSON the trace files need, written by hand: a trace line is
//! a flat object of numbers and short strings.

use std::fmt::Write;

/// One JSON object, built field by field.
pub struct Obj(String);

impl Obj {
    pub fn new() -> Obj {
        Obj(String::from("{"))
    }

    fn key(&mut self, k: &str) {
        if self.0.len() > 1 {
            self.0.push(',');
        }
        string(&mut self.0, k);
        self.0.push(':');
    }

    pub fn str(mut self, k: &str, v: &str) -> Obj {
        self.key(k);
        string(&mut self.0, v);
        self
    }

    pub fn int(mut self, k: &str, v: u64) -> Obj {
        self.key(k);
        let _ = write!(self.0, "{v}");
        self
    }

    pub fn signed(mut self, k: &str, v: i64) -> Obj {
        self.key(k);
        let _ = write!(self.0, "{v}");
        self
    }

    /// Nanoseconds as microseconds (the format's unit), to the nanosecond.
    pub fn micros(mut self, k: &str, ns: u64) -> Obj {
        self.key(k);
        let _ = write!(self.0, "{}.{:03}", ns / 1000, ns % 1000);
        self
    }

    pub fn obj(mut self, k: &str, v: Obj) -> Obj {
        self.key(k);
        self.0.push_str(&v.end());
        self
    }

    pub fn end(mut self) -> String {
        self.0.push('}');
        self.0
    }
}

/// `s` as a JSON string.
fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_json() {
        let o = Obj::new()
            .str("name", "a\"b\\c\n")
            .int("n", 7)
            .signed("s", -3)
            .micros("ts", 1_234_567)
            .obj("args", Obj::new().int("x", 1))
            .end();
        assert_eq!(
            o,
            r#"{"name":"a\"b\\c\u000a","n":7,"s":-3,"ts":1234.567,"args":{"x":1}}"#
        );
    }
}
