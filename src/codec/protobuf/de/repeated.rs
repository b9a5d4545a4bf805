//! Repeated and map fields into serde: every record of one such field (`AllDe`) as a sequence
//! of its elements (`Elements`, packed numbers included) or a map of its entries (`Entries`),
//! each value read by `ValueDe`.

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::forward_to_deserialize_any;

use super::{Ctx, Error, Reader, Records, ValueDe, Wire, err, utf8};
use crate::codec::protobuf::schema::{Field, Type};
use crate::codec::skip::{Child, Node};

/// Every record of one repeated or map field, from its first record on.
pub(super) struct AllDe<'de> {
    pub(super) ctx: Ctx<'de>,
    pub(super) field: &'static Field,
    pub(super) records: Records<'de>,
    pub(super) depth: u32,
    /// What is skipped in each element, or which entries of a map (by key) and below them.
    pub(super) skip: Option<&'de Node>,
}

impl<'de> de::Deserializer<'de> for AllDe<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let (ctx, records, depth, skip) = (self.ctx, self.records, self.depth, self.skip);
        match &self.field.ty {
            Type::Map(ty) => visitor.visit_map(Entries { ctx, ty, records, value: None, depth, skip }),
            Type::Repeated(ty) => visitor.visit_seq(Elements { ctx, ty, records, packed: None, depth, skip }),
            _ => err("not a repeated field"),
        }
    }

    shared_methods!(skips_ignored);
}

/// The elements of a repeated field: every record with its number (numbers may also come packed,
/// several varints in one length-delimited record).
pub(super) struct Elements<'de> {
    pub(super) ctx: Ctx<'de>,
    pub(super) ty: &'static Type,
    pub(super) records: Records<'de>,
    pub(super) packed: Option<Reader<'de>>,
    pub(super) depth: u32,
    /// What is skipped in each element.
    pub(super) skip: Option<&'de Node>,
}

impl<'de> Elements<'de> {
    /// The next element, not yet shown to a seed (this part is compiled once, not per seed).
    fn next_value(&mut self) -> Result<Option<ValueDe<'de>>, Error> {
        loop {
            if let Some(packed) = &mut self.packed {
                if !packed.at_end() {
                    let v = packed.varint()?;
                    self.records.values = self.records.values.saturating_sub(1);
                    let (ctx, ty, depth) = (self.ctx, self.ty, self.depth);
                    return Ok(Some(ValueDe { ctx, ty, wire: Wire::Varint(v), depth, skip: None }));
                }
                self.packed = None;
            }
            let Some(wire) = self.records.next()? else { return Ok(None) };
            if let (Type::Int | Type::Bool, Wire::Bytes(b)) = (self.ty, wire) {
                self.packed = Some(Reader::new(b));
                continue;
            }
            self.records.values = self.records.values.saturating_sub(1);
            return Ok(Some(ValueDe { ctx: self.ctx, ty: self.ty, wire, depth: self.depth, skip: self.skip }));
        }
    }
}

impl<'de> SeqAccess<'de> for Elements<'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        match self.next_value()? {
            Some(value) => seed.deserialize(value).map(Some),
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.records.values)
    }
}

/// The entries of a map field: every record with its number, each a message of key (1) and value (2).
struct Entries<'de> {
    ctx: Ctx<'de>,
    ty: &'static Type,
    records: Records<'de>,
    /// The value of the entry whose key was handed out, and what is skipped below it.
    value: Option<(Option<Wire<'de>>, Option<&'de Node>)>,
    depth: u32,
    /// The entries skipped by key, and what is skipped below the others.
    skip: Option<&'de Node>,
}

impl<'de> Entries<'de> {
    /// The next entry's key, its value set aside for `next_value_seed`; `None` at the end.
    /// Not generic, so compiled once: `next_key_seed` only hands the key to its seed.
    fn next_key(&mut self) -> Result<Option<&'de str>, Error> {
        loop {
            let Some(wire) = self.records.next()? else { return Ok(None) };
            let Wire::Bytes(entry) = wire else {
                return err("a map entry that is not length-delimited");
            };
            let (mut key, mut value) = ("", None);
            let mut reader = Reader::new(entry);
            while let Some((n, w)) = reader.next()? {
                match (n, w) {
                    (1, Wire::Bytes(b)) => key = utf8(b)?,
                    (1, _) => return err("a map key that is not a string"),
                    (2, w) => value = Some(w),
                    _ => {}
                }
            }
            let below = match self.skip.and_then(|node| node.child(key)) {
                Some(Child::Skip) => continue,
                Some(Child::Into(below)) => Some(below),
                None => None,
            };
            self.value = Some((value, below));
            return Ok(Some(key));
        }
    }
}

impl<'de> MapAccess<'de> for Entries<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        match self.next_key()? {
            Some(key) => seed.deserialize(de::value::BorrowedStrDeserializer::new(key)).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let Some((value, skip)) = self.value.take() else {
            return err("a map value was asked for before its key");
        };
        // An absent value is the type's zero value: an empty string or message.
        let wire = value.unwrap_or(match self.ty {
            Type::Int | Type::Bool => Wire::Varint(0),
            _ => Wire::Bytes(&[]),
        });
        seed.deserialize(ValueDe { ctx: self.ctx, ty: self.ty, wire, depth: self.depth, skip })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.records.left)
    }
}
