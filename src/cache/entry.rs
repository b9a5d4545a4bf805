//! How the store holds one object: shared and decoded, or encoded (JSON or protobuf) and decoded
//! on access.

use std::sync::Arc;

use super::compact::Encoded;
use crate::resource::Watchable;

/// Decodes a compact entry's bytes (the wire layer's decoder, handed to the store; compact
/// store mode only). `Err` carries the parser's message.
pub(crate) type Decode<K> = fn(&[u8]) -> std::result::Result<K, String>;

/// How the store holds one object.
pub(crate) enum Entry<K> {
    /// Decoded once and shared with the events (the default).
    Typed(Arc<K>),
    /// The object encoded (its JSON, or protobuf in the envelope a GET answer carries), possibly
    /// compressed, decoded on access (compact and compressed store modes): a fraction of the
    /// memory. Invariant: `encoded` decoded as `K` when it was stored.
    /// Shared, so that handing an entry out of the lock (to decode it there) copies no bytes.
    Compact { encoded: Encoded, ids: Ids },
}

/// A compact entry's uid and resourceVersion, which the cache reads without decoding the
/// entry (to tell versions and incarnations apart), in one allocation.
#[derive(Clone)]
pub(crate) struct Ids {
    /// The uid, then the resourceVersion.
    text: Box<str>,
    /// The uid's length in `text`; [`Ids::NONE`]: the object has no uid.
    uid: u32,
    /// Whether the object has a resourceVersion (the rest of `text`).
    rv: bool,
}

impl Ids {
    const NONE: u32 = u32::MAX;

    fn new(uid: Option<&str>, rv: Option<&str>) -> Ids {
        let mut text = String::with_capacity(uid.map_or(0, str::len) + rv.map_or(0, str::len));
        text.push_str(uid.unwrap_or_default());
        text.push_str(rv.unwrap_or_default());
        // A uid is far shorter than 4 GiB (an object is at most `Config::max_line` bytes): one
        // that is not would read as none, which only makes its entry look changed.
        let uid = uid.map_or(Ids::NONE, |u| u32::try_from(u.len()).unwrap_or(Ids::NONE));
        Ids { text: text.into(), uid, rv: rv.is_some() }
    }

    fn uid(&self) -> Option<&str> {
        (self.uid != Ids::NONE).then(|| self.text.get(..self.uid as usize)).flatten()
    }

    fn resource_version(&self) -> Option<&str> {
        let start = if self.uid == Ids::NONE { 0 } else { self.uid as usize };
        self.rv.then(|| self.text.get(start..)).flatten()
    }
}

impl<K: Watchable> Entry<K> {
    /// What the store keeps for `obj`: the object itself, or its encoded form when given.
    pub(crate) fn new(obj: &Arc<K>, encoded: Option<Encoded>) -> Entry<K> {
        match encoded {
            None => Entry::Typed(Arc::clone(obj)),
            Some(encoded) => {
                let meta = obj.meta();
                Entry::Compact { encoded, ids: Ids::new(meta.uid.as_deref(), meta.resource_version.as_deref()) }
            }
        }
    }

    pub(super) fn uid(&self) -> Option<&str> {
        match self {
            Entry::Typed(o) => o.meta().uid.as_deref(),
            Entry::Compact { ids, .. } => ids.uid(),
        }
    }

    pub(super) fn resource_version(&self) -> Option<&str> {
        match self {
            Entry::Typed(o) => o.meta().resource_version.as_deref(),
            Entry::Compact { ids, .. } => ids.resource_version(),
        }
    }

    /// A second handle on the same entry (an `Arc` clone either way), to decode after the lock
    /// is released.
    pub(crate) fn share(&self) -> Entry<K> {
        match self {
            Entry::Typed(o) => Entry::Typed(Arc::clone(o)),
            Entry::Compact { encoded, ids } => Entry::Compact { encoded: encoded.clone(), ids: ids.clone() },
        }
    }

    /// The object; a compact entry is decoded (about as costly as decoding it off the wire), so
    /// call this outside the store's lock.
    pub(crate) fn object(&self, decode: Decode<K>) -> Option<Arc<K>> {
        match self {
            Entry::Typed(o) => Some(Arc::clone(o)),
            Entry::Compact { encoded, .. } => {
                match encoded.bytes().and_then(|bytes| decode(&bytes)) {
                    Ok(o) => Some(Arc::new(o)),
                    Err(e) => {
                        // Cannot happen: an entry is only stored after it decoded as K.
                        log::error!("bug: a compact store entry no longer decodes: {e}");
                        None
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Ids;

    #[test]
    fn ids_read_back_as_given_absent_and_empty_told_apart() {
        for (uid, rv) in [
            (Some("6f1c2a8e-0d1b-4c55-9b8e-000000000001"), Some("12345")),
            (None, Some("7")),
            (Some("u"), None),
            (None, None),
            (Some(""), Some("")),
            (Some(""), None),
            (None, Some("")),
        ] {
            let ids = Ids::new(uid, rv);
            assert_eq!((ids.uid(), ids.resource_version()), (uid, rv));
        }
    }
}
