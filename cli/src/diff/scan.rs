//! The fast reading of a traces file's line: one pass over its bytes that decodes only what a
//! comparison uses (ids, name, times, status and the `gpu.`, `ml.` and `batch_size`
//! attributes) and steps over everything else while checking it is JSON, with no tokens
//! handed through serde and no string copied.
//!
//! It takes a line only as serde_json would read it into the same records: anything it is
//! not sure of (an escape in a string it reads, a `null` where a value is read, a field
//! given twice, a number that is not a plain integer, anything that is not JSON) makes it
//! give the line up, and `wire.rs`'s serde_json reader then reads the line, or names what
//! is wrong with it. The two cannot disagree on a line the scan takes.

use std::borrow::Cow;

use gpuspan::runlog::{SpanReader, SpanRecord};

use super::wire::{self, Attribute, Double, Number, Value};

/// The scan gave the line up, for serde_json to read.
#[derive(Debug)]
pub(super) struct GiveUp;

type Scan<T> = Result<T, GiveUp>;

/// Nesting below which a skipped value is given up rather than followed.
const MAX_DEPTH: usize = 64;

/// A resource's `ml.rank` and how many spans it holds.
pub(super) type Resource = (Option<String>, usize);

/// The export request on `line` (one JSON object, then only whitespace): its spans appended
/// to `spans`, and each resource's rank and count of them. Or [`GiveUp`], `spans` as it was.
///
/// The spans go to one buffer that the caller keeps from line to line, rather than to a
/// new vector of each line's hundreds of spans, which costs fresh pages every line.
pub(super) fn request(line: &str, spans: &mut Vec<SpanRecord>) -> Scan<Vec<Resource>> {
    let before = spans.len();
    let mut at = Cursor {
        text: line,
        bytes: line.as_bytes(),
        at: 0,
        spans: std::mem::take(spans),
    };
    let read = at.request();
    *spans = std::mem::take(&mut at.spans);
    if read.is_err() {
        spans.truncate(before);
    }
    read
}

/// Sets a field that serde's derived reader refuses to see twice.
fn once<T>(slot: &mut Option<T>, value: T) -> Scan<()> {
    match slot {
        Some(_) => Err(GiveUp),
        None => {
            *slot = Some(value);
            Ok(())
        }
    }
}

/// The bytes that end a string read without escapes: its closing quote, or what makes the
/// scan give it up (a backslash, or a control character, which JSON refuses in a string).
const STRING_END: [bool; 256] = {
    let mut end = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        end[byte] = true;
        byte += 1;
    }
    end[b'"' as usize] = true;
    end[b'\\' as usize] = true;
    end
};

/// A place in the line.
struct Cursor<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
    /// The spans read.
    spans: Vec<SpanRecord>,
}

impl<'a> Cursor<'a> {
    /// The request: one object, then only whitespace.
    fn request(&mut self) -> Scan<Vec<Resource>> {
        let mut resources = None;
        self.object(|at, key| match key {
            "resourceSpans" => once(&mut resources, at.array_of(Cursor::resource_spans)?),
            _ => at.skip(0),
        })?;
        self.whitespace();
        if self.at != self.bytes.len() {
            return Err(GiveUp);
        }
        Ok(resources.unwrap_or_default())
    }

    /// Steps over JSON's whitespace.
    fn whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte that is not whitespace, not taken.
    fn peek(&mut self) -> Scan<u8> {
        self.whitespace();
        self.bytes.get(self.at).copied().ok_or(GiveUp)
    }

    /// Takes `byte`, after any whitespace.
    fn expect(&mut self, byte: u8) -> Scan<()> {
        if self.peek()? != byte {
            return Err(GiveUp);
        }
        self.at += 1;
        Ok(())
    }

    /// An object, each field's value read by `field` from after its colon.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Scan<()>) -> Scan<()> {
        self.expect(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Ok(());
        }
        loop {
            let key = self.string()?;
            self.expect(b':')?;
            field(self, key)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(GiveUp),
            }
        }
    }

    /// An array, each item read by `item`.
    fn array(&mut self, mut item: impl FnMut(&mut Self) -> Scan<()>) -> Scan<()> {
        self.expect(b'[')?;
        if self.peek()? == b']' {
            self.at += 1;
            return Ok(());
        }
        loop {
            item(self)?;
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(GiveUp),
            }
        }
    }

    /// An array whose items `item` reads, collected.
    fn array_of<T>(&mut self, mut item: impl FnMut(&mut Self) -> Scan<T>) -> Scan<Vec<T>> {
        let mut out = Vec::new();
        self.array(|at| {
            out.push(item(at)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// A string without escapes, borrowed from the line.
    fn string(&mut self) -> Scan<&'a str> {
        self.expect(b'"')?;
        let start = self.at;
        let rest = &self.bytes[start..];
        // One look-up a byte: the strings read are short, too short for a vector search.
        let len = rest
            .iter()
            .position(|&c| STRING_END[usize::from(c)])
            .ok_or(GiveUp)?;
        if rest[len] != b'"' {
            return Err(GiveUp);
        }
        self.at = start + len + 1;
        // Both quotes are ASCII, so both ends are character boundaries.
        self.text.get(start..start + len).ok_or(GiveUp)
    }

    /// Steps over a string, escapes and all, as serde_json checks one it skips.
    fn skip_string(&mut self) -> Scan<()> {
        self.expect(b'"')?;
        loop {
            match self.bytes.get(self.at) {
                Some(b'"') => {
                    self.at += 1;
                    return Ok(());
                }
                Some(b'\\') => match self.bytes.get(self.at + 1) {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.at += 2,
                    Some(b'u') => {
                        let hex = self.bytes.get(self.at + 2..self.at + 6).ok_or(GiveUp)?;
                        if !hex.iter().all(u8::is_ascii_hexdigit) {
                            return Err(GiveUp);
                        }
                        self.at += 6;
                    }
                    _ => return Err(GiveUp),
                },
                Some(0..=0x1f) | None => return Err(GiveUp),
                Some(_) => self.at += 1,
            }
        }
    }

    /// Steps over any value, checking it is JSON.
    fn skip(&mut self, depth: usize) -> Scan<()> {
        if depth > MAX_DEPTH {
            return Err(GiveUp);
        }
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' => self.object(|at, _| at.skip(depth + 1)),
            b'[' => self.array(|at| at.skip(depth + 1)),
            b't' => self.word("true"),
            b'f' => self.word("false"),
            b'n' => self.word("null"),
            b'-' | b'0'..=b'9' => self.number().map(|_| ()),
            _ => Err(GiveUp),
        }
    }

    /// Takes the literal `word`.
    fn word(&mut self, word: &str) -> Scan<()> {
        if !self.bytes[self.at..].starts_with(word.as_bytes()) {
            return Err(GiveUp);
        }
        self.at += word.len();
        Ok(())
    }

    /// A JSON number's text: `-`, then `0` or digits not led by `0`, then an optional
    /// fraction and exponent.
    fn number(&mut self) -> Scan<&'a str> {
        self.whitespace();
        let start = self.at;
        if self.bytes.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        match self.bytes.get(self.at) {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(GiveUp),
        }
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            self.some_digits()?;
        }
        if let Some(b'e' | b'E') = self.bytes.get(self.at) {
            self.at += 1;
            if let Some(b'+' | b'-') = self.bytes.get(self.at) {
                self.at += 1;
            }
            self.some_digits()?;
        }
        self.text.get(start..self.at).ok_or(GiveUp)
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    fn some_digits(&mut self) -> Scan<()> {
        let start = self.at;
        self.digits();
        if self.at == start {
            return Err(GiveUp);
        }
        Ok(())
    }

    /// An integer as OTLP/JSON writes one (`"123"` or `123`), as [`Number`] reads it.
    fn integer(&mut self) -> Scan<Number> {
        if self.peek()? == b'"' {
            return Ok(Number(self.string()?.parse().ok()));
        }
        Ok(Number(Some(self.plain_integer()?)))
    }

    /// A number that serde_json reads as an integer: no fraction or exponent, within u64,
    /// or below zero within i64. It reads any other (`-0` too) as a float: left to it.
    fn plain_integer(&mut self) -> Scan<i128> {
        let text = self.number()?;
        let value: i128 = text.parse().map_err(|_| GiveUp)?;
        let fits = if text.starts_with('-') {
            value < 0 && value >= i128::from(i64::MIN)
        } else {
            value <= i128::from(u64::MAX)
        };
        if !fits {
            return Err(GiveUp);
        }
        Ok(value)
    }

    /// A float as OTLP/JSON writes one (a number, or a string), as [`Double`] reads it.
    fn double(&mut self) -> Scan<Double> {
        if self.peek()? == b'"' {
            return Ok(Double(self.string()?.parse().ok()));
        }
        let text = self.number()?;
        // serde_json's own parse of the number, so the float is the same to the bit.
        serde_json::from_str::<f64>(text)
            .map(|v| Double(Some(v)))
            .map_err(|_| GiveUp)
    }

    /// An attribute's value: its integer, string and float, the other kinds skipped.
    fn value(&mut self) -> Scan<Value<'a>> {
        let mut value = Value::default();
        let (mut int, mut string, mut double) = (None, None, None);
        self.object(|at, key| match key {
            "intValue" => once(&mut int, at.integer()?),
            "stringValue" => once(&mut string, at.string()?),
            "doubleValue" => once(&mut double, at.double()?),
            _ => at.skip(1),
        })?;
        value.int = int;
        value.string = string.map(Cow::Borrowed);
        value.double = double;
        Ok(value)
    }

    /// One attribute, key and value.
    fn attribute(&mut self) -> Scan<Attribute<'a>> {
        let (mut key, mut value) = (None, None);
        self.object(|at, field| match field {
            "key" => once(&mut key, at.string()?),
            "value" => once(&mut value, at.value()?),
            _ => at.skip(1),
        })?;
        Ok(Attribute {
            key: Cow::Borrowed(key.ok_or(GiveUp)?),
            value,
        })
    }

    /// One resource's spans, with the resource's `ml.rank`.
    fn resource_spans(&mut self) -> Scan<Resource> {
        let before = self.spans.len();
        let (mut rank, mut scopes) = (None, None);
        self.object(|at, key| match key {
            "resource" => {
                let mut attributes = None;
                at.object(|at, key| match key {
                    "attributes" => once(&mut attributes, at.array_of(Cursor::attribute)?),
                    _ => at.skip(1),
                })?;
                once(&mut rank, wire::rank_in(&attributes.unwrap_or_default()))
            }
            "scopeSpans" => {
                once(&mut scopes, ())?;
                at.array(Cursor::scope_spans)
            }
            _ => at.skip(1),
        })?;
        Ok((rank.flatten(), self.spans.len() - before))
    }

    /// One scope's spans.
    fn scope_spans(&mut self) -> Scan<()> {
        let mut spans = None;
        self.object(|at, key| match key {
            "spans" => {
                once(&mut spans, ())?;
                at.array(|at| {
                    let span = at.span()?;
                    at.spans.push(span);
                    Ok(())
                })
            }
            _ => at.skip(1),
        })
    }

    /// One span, its attributes handed to the reader as they are met.
    fn span(&mut self) -> Scan<SpanRecord> {
        let mut reader = SpanReader::default();
        let (mut trace_id, mut span_id, mut parent, mut name) = (None, None, None, None);
        let (mut start, mut end, mut status, mut attributes) = (None, None, None, None);
        self.object(|at, key| match key {
            "traceId" => once(&mut trace_id, at.string()?),
            "spanId" => once(&mut span_id, at.string()?),
            "parentSpanId" => once(&mut parent, at.string()?),
            "name" => once(&mut name, at.string()?),
            "startTimeUnixNano" => once(&mut start, at.integer()?),
            "endTimeUnixNano" => once(&mut end, at.integer()?),
            "status" => once(&mut status, at.status()?),
            "attributes" => {
                once(&mut attributes, ())?;
                at.array(|at| {
                    let attribute = at.attribute()?;
                    wire::offer(&mut reader, &attribute.key, attribute.value.as_ref());
                    Ok(())
                })
            }
            _ => at.skip(1),
        })?;
        Ok(wire::finish(
            reader,
            name.unwrap_or_default(),
            (
                trace_id.unwrap_or_default(),
                span_id.unwrap_or_default(),
                parent.unwrap_or_default(),
            ),
            (start.unwrap_or_default(), end.unwrap_or_default()),
            status,
        ))
    }

    /// A span's status: its code and message.
    fn status(&mut self) -> Scan<(i32, &'a str)> {
        let (mut code, mut message) = (None, None);
        self.object(|at, key| match key {
            "code" => {
                let value = at.plain_integer()?;
                once(&mut code, i32::try_from(value).map_err(|_| GiveUp)?)
            }
            "message" => once(&mut message, at.string()?),
            _ => at.skip(1),
        })?;
        Ok((code.unwrap_or_default(), message.unwrap_or_default()))
    }
}

#[cfg(test)]
mod tests;
