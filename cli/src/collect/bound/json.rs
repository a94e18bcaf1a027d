//! The bound of an OTLP/JSON body: the JSON walked by the schema with `serde_json`'s own
//! parser, as the decoder (serde's derived code in `opentelemetry-proto`) reads it, without
//! building anything.
//!
//! Besides the decoded structs, serde copies what a message with a flattened `oneof`
//! (`AnyValue`, `Metric`, `NumberDataPoint`, `Exemplar`) holds outside its plain fields into
//! a generic tree, and reads the message from that copy; a nested one copies its part
//! again. A copy lives while its message is read, so the copies held at once are those of
//! the messages around the value being read: the bound adds the largest such sum.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::schema::{Field, Kind, Message};
use super::{allocation, vector, Tally, ALLOCATION_OVERHEAD};

/// A node of serde's generic tree (`serde::__private::de::Content`: 32 bytes on 64-bit
/// targets).
const NODE: usize = 32;
/// An array's item in a tree: its node, in a vector that doubles as it grows.
const ITEM: usize = 2 * NODE;
/// A map's entry in a tree: its key's and its value's nodes, in a doubling vector.
const ENTRY: usize = 2 * 2 * NODE;
/// A tree's array: its vector's first capacity, 4 nodes.
const ARRAY: usize = 4 * NODE + ALLOCATION_OVERHEAD;
/// A tree's map: its vector's first capacity, 4 entries of two nodes.
const MAP: usize = 4 * 2 * NODE + ALLOCATION_OVERHEAD;

/// Adds what decoding `body` as `root` allocates to `tally`, stopping once it is over its
/// cap.
pub(super) fn walk(root: &'static Message, body: &[u8], tally: &mut Tally) -> Result<(), String> {
    let mut scratch = 0;
    let mut de = serde_json::Deserializer::from_slice(body);
    let walk = Walk {
        kind: Some(Kind::Message(root)),
        tally: &mut *tally,
        scratch: &mut scratch,
    };
    let cost = walk.deserialize(&mut de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    tally.add(cost.copies);
    // serde_json unescapes strings into a buffer of its own, which grows to the longest.
    tally.add(allocation(scratch.saturating_mul(2)));
    Ok(())
}

/// The error that stops a walk over its cap (the caller sees the tally over it).
fn over<E: de::Error>() -> E {
    E::custom("over the cap")
}

/// One JSON value to count, and what the schema expects there (`None`: nothing the decoder
/// keeps). What it holds decoded goes to the tally as it is read.
struct Walk<'t> {
    kind: Option<Kind>,
    tally: &'t mut Tally,
    /// The longest string that had to be unescaped.
    scratch: &'t mut usize,
}

/// A value's cost besides what it holds decoded.
#[derive(Debug, Default, Clone, Copy)]
struct Cost {
    /// What it takes in a generic tree, beyond its own node.
    tree: usize,
    /// The most the copies made while reading it hold at once.
    copies: usize,
}

impl Walk<'_> {
    /// A string of `len` bytes (after unescaping), `escaped` when serde_json had to copy it.
    fn string(self, len: usize, escaped: bool) -> Cost {
        if escaped {
            *self.scratch = (*self.scratch).max(len);
        }
        self.tally.add(match self.kind {
            Some(Kind::Text | Kind::Bytes) => allocation(len),
            // The base64 text, then the bytes decoded from it.
            Some(Kind::Base64) => 2 * allocation(len),
            _ => 0,
        });
        // A tree borrows the strings serde_json did not have to unescape.
        Cost {
            tree: if escaped { allocation(len) } else { 0 },
            copies: 0,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = Cost;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Cost, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = Cost;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an OTLP/JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Cost, E> {
        Ok(Cost::default())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Cost, E> {
        Ok(Cost::default())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Cost, E> {
        Ok(Cost::default())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Cost, E> {
        Ok(Cost::default())
    }

    fn visit_unit<E: de::Error>(self) -> Result<Cost, E> {
        Ok(Cost::default())
    }

    fn visit_borrowed_str<E: de::Error>(self, value: &'de str) -> Result<Cost, E> {
        Ok(self.string(value.len(), false))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Cost, E> {
        Ok(self.string(value.len(), true))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Cost, A::Error> {
        let Walk {
            kind,
            tally,
            scratch,
        } = self;
        let (element, size) = match kind {
            Some(Kind::Messages(message)) => (Some(Kind::Message(message)), message.size),
            Some(Kind::Texts) => (Some(Kind::Text), std::mem::size_of::<String>()),
            Some(Kind::Numbers { .. }) => (Some(Kind::Scalar), 8),
            Some(Kind::Message(_)) => {
                return Err(de::Error::custom(
                    "a message is an array where OTLP/JSON has an object",
                ))
            }
            _ => (None, 0),
        };
        let mut cost = Cost {
            tree: ARRAY,
            copies: 0,
        };
        let mut n = 0usize;
        while let Some(item) = seq.next_element_seed(Walk {
            kind: element,
            tally: &mut *tally,
            scratch: &mut *scratch,
        })? {
            n += 1;
            cost.tree = cost.tree.saturating_add(ITEM + item.tree);
            cost.copies = cost.copies.max(item.copies);
            if n % 1024 == 0 && tally.bytes.saturating_add(vector(n, size, false)) > tally.cap {
                tally.add(vector(n, size, false));
                return Err(over());
            }
        }
        if size > 0 {
            tally.add(vector(n, size, false));
        }
        Ok(cost)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Cost, A::Error> {
        let Walk {
            kind,
            tally,
            scratch,
        } = self;
        let message = match kind {
            Some(Kind::Message(message)) => Some(message),
            _ => None,
        };
        let flattened = message.is_some_and(|m| m.flattened);
        let mut cost = Cost {
            tree: MAP,
            copies: 0,
        };
        // The copy a flattened message makes of its entries, and the most that the
        // copies made while reading its values hold at once.
        let (mut own_copy, mut inner_copies) = (0usize, 0usize);
        if flattened {
            own_copy = MAP;
        }
        while let Some(key) = map.next_key_seed(KeySeed { message })? {
            if key.escaped {
                *scratch = (*scratch).max(key.len);
            }
            let copied = flattened && key.field.is_none_or(|f| f.oneof);
            let walk = Walk {
                kind: key.field.map(|f| f.kind),
                tally: &mut *tally,
                scratch: &mut *scratch,
            };
            let value = if key.field.is_none() && message.is_some() && !copied {
                // A field the decoder skips, as it does.
                map.next_value::<IgnoredAny>()?;
                Cost::default()
            } else {
                map.next_value_seed(walk)?
            };
            let key_copy = if key.escaped { allocation(key.len) } else { 0 };
            let entry = ENTRY.saturating_add(key_copy).saturating_add(value.tree);
            cost.tree = cost.tree.saturating_add(entry);
            if copied {
                // Its copy, and the untagged `intValue` that buffers its value once more.
                own_copy = own_copy.saturating_add(entry).saturating_add(ENTRY);
            }
            inner_copies = inner_copies.max(value.copies);
            if tally.over() {
                return Err(over());
            }
        }
        cost.copies = own_copy.saturating_add(inner_copies);
        Ok(cost)
    }
}

/// A map key, looked up in the message's fields.
struct Key {
    field: Option<&'static Field>,
    len: usize,
    escaped: bool,
}

struct KeySeed {
    message: Option<&'static Message>,
}

impl KeySeed {
    fn key(&self, name: &str, escaped: bool) -> Key {
        Key {
            field: self.message.and_then(|m| m.by_json(name)),
            len: name.len(),
            escaped,
        }
    }
}

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Key, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_borrowed_str<E: de::Error>(self, name: &'de str) -> Result<Key, E> {
        Ok(self.key(name, false))
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<Key, E> {
        Ok(self.key(name, true))
    }
}
