//! The drift check's comparison: a metadata-only list (key → resourceVersion) against the store.
//!
//! The list is at resourceVersion `list`, and the store's position `pos` is how far its watch is
//! known to have come: every change of the watch's scope up to `pos` has reached it. That is the
//! resume RV, or, when newer, the list version of the last check once a watch opened after that
//! check ended cleanly (a watch is sent every change after its RV first, so it has covered that
//! version even when none of those changes were in its scope: `Machine::drift_position`). The
//! resume RV alone is not enough: lists carry the whole cluster's version, and without bookmarks
//! a quiet scope's resume RV never reaches it. Only differences that no change after `pos` can
//! explain are drift:
//! - a listed object at a version ≤ `pos` must be in the store at exactly that version;
//! - a stored object missing from the list was deleted at some version ≤ `list`. When
//!   `list == pos` that delete should have reached us: drift. Otherwise it may have happened
//!   after `pos`; it becomes a suspect, and is drift if the next check, made once the store has
//!   moved past this list's version, still finds it stored at the same version and unlisted.
//!
//! Comparing positions needs numeric resourceVersions (etcd's are). With opaque ones, only a
//! list at exactly the store's position is compared.

use std::collections::HashMap;

use crate::key::ObjectKey;

/// Stored objects missing from a list, with their stored version and that list's version.
pub(crate) type Suspects = HashMap<ObjectKey, (Box<str>, u64)>;

/// One comparison in progress: feed every stored object to [`Check::stored`], then [`Check::finish`].
pub(crate) struct Check<'a> {
    mode: Mode,
    listed: HashMap<ObjectKey, Box<str>>,
    before: &'a mut Suspects,
    after: Suspects,
    mismatched: usize,
}

#[derive(Clone, Copy)]
enum Mode {
    /// The list is exactly at the store's position: every difference is drift.
    Exact,
    /// The list is newer: `pos < list`, both numeric.
    Ordered { pos: u64, list: u64 },
    /// Nothing can be concluded (opaque versions at different positions).
    Inconclusive,
}

impl<'a> Check<'a> {
    pub(crate) fn new(pos: &str, list: &str, listed: HashMap<ObjectKey, Box<str>>, suspects: &'a mut Suspects) -> Self {
        let mode = if pos == list {
            Mode::Exact
        } else {
            match (pos.parse::<u64>(), list.parse::<u64>()) {
                (Ok(pos), Ok(list)) if pos < list => Mode::Ordered { pos, list },
                _ => Mode::Inconclusive,
            }
        };
        Check { mode, listed, before: suspects, after: Suspects::new(), mismatched: 0 }
    }

    /// One object of the store, with its resourceVersion (`None`: unknown, not compared).
    pub(crate) fn stored(&mut self, key: &ObjectKey, rv: Option<&str>) {
        let listed = self.listed.remove(key);
        let Some(rv) = rv else { return };
        match (self.mode, listed) {
            (Mode::Inconclusive, _) => {}
            (_, Some(listed)) if *listed == *rv => {}
            (Mode::Exact, _) => self.mismatched += 1,
            (Mode::Ordered { pos, .. }, Some(listed)) => {
                // A listed version newer than our position is a change the watch will bring.
                if listed.parse::<u64>().is_ok_and(|v| v <= pos) {
                    self.mismatched += 1;
                }
            }
            (Mode::Ordered { pos, list }, None) => match self.before.get(key) {
                Some((was, seen_at)) if **was == *rv && *seen_at <= pos => self.mismatched += 1,
                _ => {
                    self.after.insert(key.clone(), (rv.into(), list));
                }
            },
        }
    }

    /// Listed objects the store lacks, then the verdict: how many objects are out of step.
    pub(crate) fn finish(mut self) -> usize {
        for rv in self.listed.values() {
            match self.mode {
                Mode::Exact => self.mismatched += 1,
                Mode::Ordered { pos, .. } if rv.parse::<u64>().is_ok_and(|v| v <= pos) => self.mismatched += 1,
                Mode::Ordered { .. } | Mode::Inconclusive => {}
            }
        }
        *self.before = std::mem::take(&mut self.after);
        self.mismatched
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey { namespace: Some("ns".into()), name: name.into() }
    }

    fn listed(items: &[(&str, &str)]) -> HashMap<ObjectKey, Box<str>> {
        items.iter().map(|(n, rv)| (key(n), (*rv).into())).collect()
    }

    fn check(pos: &str, list: &str, server: &[(&str, &str)], store: &[(&str, &str)], s: &mut Suspects) -> usize {
        let mut c = Check::new(pos, list, listed(server), s);
        for (n, rv) in store {
            c.stored(&key(n), Some(rv));
        }
        c.finish()
    }

    #[test]
    fn at_the_same_position_every_difference_is_drift() {
        let mut s = Suspects::new();
        assert_eq!(check("10", "10", &[("a", "5"), ("b", "7")], &[("a", "5"), ("b", "7")], &mut s), 0);
        assert_eq!(check("10", "10", &[("a", "5"), ("b", "8")], &[("a", "5"), ("b", "7")], &mut s), 1);
        assert_eq!(check("10", "10", &[("a", "5")], &[("a", "5"), ("b", "7")], &mut s), 1, "missed delete");
        assert_eq!(check("10", "10", &[("a", "5"), ("c", "9")], &[("a", "5")], &mut s), 1, "missed add");
        assert_eq!(check("opaque", "opaque", &[("a", "x")], &[("a", "y")], &mut s), 1);
    }

    #[test]
    fn changes_newer_than_the_store_are_not_drift() {
        let mut s = Suspects::new();
        // b changed at 12 and c was added at 11, after our position 10: the watch brings them.
        assert_eq!(check("10", "12", &[("a", "5"), ("b", "12"), ("c", "11")], &[("a", "5"), ("b", "7")], &mut s), 0);
        // a changed at 6, before our position, and we still have 5: drift.
        assert_eq!(check("10", "12", &[("a", "6")], &[("a", "5")], &mut s), 1);
        // c was created at 9, before our position, and we lack it: drift.
        assert_eq!(check("10", "12", &[("c", "9")], &[], &mut s), 1);
    }

    #[test]
    fn a_missing_object_is_drift_only_once_the_store_moved_past_the_list() {
        let mut s = Suspects::new();
        // b is gone from a newer list: maybe deleted after our position; suspect only.
        assert_eq!(check("10", "12", &[], &[("b", "7")], &mut s), 0);
        assert!(s.contains_key(&key("b")));
        // Next check at position 15 ≥ 12: the delete should have arrived. Drift.
        assert_eq!(check("15", "16", &[], &[("b", "7")], &mut s), 1);
        // A suspect that went away (delete arrived) is forgotten.
        let mut s = Suspects::new();
        assert_eq!(check("10", "12", &[], &[("b", "7")], &mut s), 0);
        assert_eq!(check("15", "16", &[], &[], &mut s), 0);
        assert!(s.is_empty());
    }

    #[test]
    fn opaque_versions_at_different_positions_conclude_nothing() {
        let mut s = Suspects::new();
        assert_eq!(check("abc", "abd", &[("a", "x")], &[("b", "y")], &mut s), 0);
        // Nor does a list older than the store (a lagging cache).
        assert_eq!(check("10", "9", &[], &[("b", "7")], &mut s), 0);
    }
}
