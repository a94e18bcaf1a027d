//! The bound of a protobuf body: its wire format walked by the schema, as prost would
//! decode it (unknown fields skipped, the same nesting limit), without building anything.

use super::schema::{Kind, Message, MAX_FIELDS};
use super::{text, vector, Tally};

/// Nesting prost decodes (its recursion limit), one more for the request itself.
const MAX_DEPTH: u32 = 101;

/// Why a body is not protobuf.
pub(super) type WireError = &'static str;

/// Adds what decoding `body` as `root` allocates to `tally`, stopping once it is over its
/// cap.
pub(super) fn walk(
    root: &'static Message,
    body: &[u8],
    tally: &mut Tally,
) -> Result<(), WireError> {
    message(tally, root, body, false, 0)
}

/// One field's value on the wire.
enum Value<'a> {
    Varint,
    Fixed64,
    Fixed32,
    Delimited(&'a [u8]),
    Group,
}

/// Reads fields off a message's bytes.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, WireError> {
        let mut value = 0u64;
        for (i, &byte) in self.rest.iter().enumerate().take(10) {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                self.rest = &self.rest[i + 1..];
                return Ok(value);
            }
        }
        Err("a varint is cut short or longer than 10 bytes")
    }

    fn skip(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if n > self.rest.len() {
            return Err("a field is longer than what is left of its message");
        }
        let (taken, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(taken)
    }

    /// The next field's tag and value, or `None` at the end.
    fn field(&mut self, depth: u32) -> Result<Option<(u32, Value<'a>)>, WireError> {
        if self.rest.is_empty() {
            return Ok(None);
        }
        let (tag, wire) = self.key()?;
        Ok(Some((tag, self.value(tag, wire, depth)?)))
    }

    fn key(&mut self) -> Result<(u32, u8), WireError> {
        let key = self.varint()?;
        let tag = u32::try_from(key >> 3).map_err(|_| "a field tag is out of range")?;
        if tag == 0 {
            return Err("a field has tag 0");
        }
        Ok((tag, (key & 7) as u8))
    }

    fn value(&mut self, tag: u32, wire: u8, depth: u32) -> Result<Value<'a>, WireError> {
        Ok(match wire {
            0 => {
                self.varint()?;
                Value::Varint
            }
            1 => {
                self.skip(8)?;
                Value::Fixed64
            }
            2 => {
                let len = self.varint()?;
                let len = usize::try_from(len).map_err(|_| "a length is out of range")?;
                Value::Delimited(self.skip(len)?)
            }
            3 => {
                self.group(tag, depth + 1)?;
                Value::Group
            }
            5 => {
                self.skip(4)?;
                Value::Fixed32
            }
            4 => return Err("a group ends that was not started"),
            _ => return Err("a field has an unknown wire type"),
        })
    }

    /// Skips a group up to its end marker.
    fn group(&mut self, tag: u32, depth: u32) -> Result<(), WireError> {
        if depth > MAX_DEPTH {
            return Err("groups are nested too deep");
        }
        loop {
            if self.rest.is_empty() {
                return Err("a group does not end");
            }
            let (inner, wire) = self.key()?;
            if wire == 4 {
                return if inner == tag {
                    Ok(())
                } else {
                    Err("a group ends with another group's tag")
                };
            }
            self.value(inner, wire, depth)?;
        }
    }
}

/// Elements in a packed run of numbers.
fn packed(bytes: &[u8], varint: bool) -> Result<usize, WireError> {
    if varint {
        if bytes.last().is_some_and(|&b| b >= 0x80) {
            return Err("a packed varint is cut short");
        }
        Ok(bytes.iter().filter(|&&b| b < 0x80).count())
    } else if bytes.len() % 8 == 0 {
        Ok(bytes.len() / 8)
    } else {
        Err("packed 8-byte numbers are not a multiple of 8 bytes")
    }
}

/// Counts one message: what its fields allocate, nested messages included. `merged`: it is
/// one of several occurrences of a field that prost merges into one value, so its vectors
/// and strings may be filled in parts.
fn message(
    tally: &mut Tally,
    schema: &'static Message,
    bytes: &[u8],
    merged: bool,
    depth: u32,
) -> Result<(), WireError> {
    if depth > MAX_DEPTH {
        return Err("messages are nested too deep");
    }
    // Elements of each vector, occurrences of each single field, and the first occurrence
    // of each single message (counted again as merged if another follows).
    let mut counts = [0usize; MAX_FIELDS];
    let mut first: [&[u8]; MAX_FIELDS] = [&[]; MAX_FIELDS];
    let mut reader = Reader { rest: bytes };
    while let Some((tag, value)) = reader.field(depth)? {
        let Some((i, field)) = schema.by_tag(tag) else {
            continue;
        };
        let Some(count) = counts.get_mut(i) else {
            return Err("the schema lists more fields than the bound counts");
        };
        match (field.kind, value) {
            (Kind::Numbers { varint }, Value::Delimited(run)) => *count += packed(run, varint)?,
            (Kind::Numbers { varint: true }, Value::Varint)
            | (Kind::Numbers { varint: false }, Value::Fixed64) => *count += 1,
            (Kind::Text | Kind::Bytes | Kind::Base64, Value::Delimited(inner)) => {
                *count += 1;
                tally.add(text(inner.len(), merged || *count > 1));
            }
            (Kind::Texts, Value::Delimited(inner)) => {
                *count += 1;
                tally.add(text(inner.len(), false));
            }
            (Kind::Messages(element), Value::Delimited(inner)) => {
                *count += 1;
                let n = *count;
                message(tally, element, inner, false, depth + 1)?;
                // A long run of small messages: stop as soon as its vector is over.
                if n % 4096 == 0
                    && tally.bytes.saturating_add(vector(n, element.size, merged)) > tally.cap
                {
                    tally.add(vector(n, element.size, merged));
                    return Ok(());
                }
            }
            (Kind::Message(nested), Value::Delimited(inner)) => {
                *count += 1;
                match *count {
                    1 => {
                        first[i] = inner;
                        message(tally, nested, inner, merged, depth + 1)?;
                    }
                    n => {
                        if n == 2 {
                            message(tally, nested, first[i], true, depth + 1)?;
                        }
                        message(tally, nested, inner, true, depth + 1)?;
                    }
                }
            }
            // A known field of the wrong wire type: prost refuses the body.
            _ => {}
        }
        if tally.over() {
            return Ok(());
        }
    }
    for (field, &n) in schema.fields.iter().zip(&counts) {
        tally.add(match field.kind {
            Kind::Messages(element) => vector(n, element.size, merged),
            Kind::Texts => vector(n, std::mem::size_of::<String>(), merged),
            Kind::Numbers { .. } => vector(n, 8, merged),
            _ => 0,
        });
    }
    Ok(())
}
