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
    /// memory, with its uid and resourceVersion. Invariant: `encoded` decoded as `K` when it
    /// was stored. Shared, so that handing an entry out of the lock (to decode it there) copies
    /// no bytes.
    Compact(Encoded),
}

impl<K: Watchable> Entry<K> {
    /// What the store keeps for `obj`: the object itself, or its encoded form when given (which
    /// holds the object's uid and resourceVersion: `Packer::pack`, `Encoded::plain`).
    pub(crate) fn new(obj: &Arc<K>, encoded: Option<Encoded>) -> Entry<K> {
        match encoded {
            None => Entry::Typed(Arc::clone(obj)),
            Some(encoded) => Entry::Compact(encoded),
        }
    }

    pub(super) fn uid(&self) -> Option<&str> {
        match self {
            Entry::Typed(o) => o.meta().uid.as_deref(),
            Entry::Compact(encoded) => encoded.uid(),
        }
    }

    pub(super) fn resource_version(&self) -> Option<&str> {
        match self {
            Entry::Typed(o) => o.meta().resource_version.as_deref(),
            Entry::Compact(encoded) => encoded.resource_version(),
        }
    }

    /// A second handle on the same entry (an `Arc` clone either way), to decode after the lock
    /// is released.
    pub(crate) fn share(&self) -> Entry<K> {
        match self {
            Entry::Typed(o) => Entry::Typed(Arc::clone(o)),
            Entry::Compact(encoded) => Entry::Compact(encoded.clone()),
        }
    }

    /// The object; a compact entry is decoded (about as costly as decoding it off the wire), so
    /// call this outside the store's lock.
    pub(crate) fn object(&self, decode: Decode<K>) -> Option<Arc<K>> {
        match self {
            Entry::Typed(o) => Some(Arc::clone(o)),
            Entry::Compact(encoded) => {
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
