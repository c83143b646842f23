//! Maps keyed by three names (group, version and plural or kind) that are
//! looked up with borrowed `&str`s, so a lookup on the request path
//! allocates nothing.
//!
//! A `BTreeMap<(String, String, String), V>` can only be searched with a key
//! of its own type, which costs three `String`s per lookup. [`Triple`]
//! lets both the owned key and a tuple of `&str`s be seen as one trait
//! object with one order and one hash, which `Borrow` then bridges: the
//! same borrowed key finds owned keys in a `BTreeMap` and in a `HashMap`.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};

/// A key of three names, owned or borrowed.
pub(crate) trait Triple {
    /// The three names.
    fn names(&self) -> (&str, &str, &str);
}

impl Triple for (String, String, String) {
    fn names(&self) -> (&str, &str, &str) {
        (&self.0, &self.1, &self.2)
    }
}

impl Triple for (&str, &str, &str) {
    fn names(&self) -> (&str, &str, &str) {
        *self
    }
}

impl<'a> Borrow<dyn Triple + 'a> for (String, String, String) {
    fn borrow(&self) -> &(dyn Triple + 'a) {
        self
    }
}

impl PartialEq for dyn Triple + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.names() == other.names()
    }
}

impl Eq for dyn Triple + '_ {}

impl PartialOrd for dyn Triple + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn Triple + '_ {
    // The tuples' own order, so borrowed lookups agree with the owned keys.
    fn cmp(&self, other: &Self) -> Ordering {
        self.names().cmp(&other.names())
    }
}

impl Hash for dyn Triple + '_ {
    // The tuples' own hash (`String` hashes as `str`), so borrowed lookups
    // find owned keys in hash maps too.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.names().hash(state);
    }
}

/// A hash map of three-name keys, for lookups on the request path (a
/// `BTreeMap` of them compares three strings through a vtable at every
/// step of a search).
pub(crate) type TripleHashMap<V> = foldhash::HashMap<(String, String, String), V>;

/// The borrowed form of a three-name key, for `get` on a map of owned keys.
pub(crate) fn key<'a>(names: &'a (&'a str, &'a str, &'a str)) -> &'a (dyn Triple + 'a) {
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn borrowed_lookups_find_what_owned_keys_hold() {
        let owned = |g: &str, v: &str, n: &str| (g.to_owned(), v.to_owned(), n.to_owned());
        let mut map = BTreeMap::new();
        for (i, (g, v, n)) in
            [("", "v1", "pods"), ("apps", "v1", "deployments"), ("", "v1", "podtemplates"), ("a", "", "b")]
                .into_iter()
                .enumerate()
        {
            map.insert(owned(g, v, n), i);
        }
        assert_eq!(map.get(key(&("", "v1", "pods"))), Some(&0));
        assert_eq!(map.get(key(&("apps", "v1", "deployments"))), Some(&1));
        assert_eq!(map.get(key(&("", "v1", "podtemplates"))), Some(&2));
        assert_eq!(map.get(key(&("a", "", "b"))), Some(&3));
        // Near misses: the names are compared one by one, not concatenated.
        assert_eq!(map.get(key(&("", "v1", "pod"))), None);
        assert_eq!(map.get(key(&("a", "b", ""))), None);
        assert_eq!(map.get(key(&("apps", "v1beta1", "deployments"))), None);
    }

    #[test]
    fn borrowed_lookups_find_owned_keys_in_hash_maps() {
        let owned = |g: &str, v: &str, n: &str| (g.to_owned(), v.to_owned(), n.to_owned());
        let mut map = TripleHashMap::default();
        for (i, (g, v, n)) in
            [("", "v1", "pods"), ("apps", "v1", "deployments"), ("a", "", "b")].into_iter().enumerate()
        {
            map.insert(owned(g, v, n), i);
        }
        assert_eq!(map.get(key(&("", "v1", "pods"))), Some(&0));
        assert_eq!(map.get(key(&("apps", "v1", "deployments"))), Some(&1));
        assert_eq!(map.get(key(&("a", "", "b"))), Some(&2));
        assert_eq!(map.get(key(&("a", "b", ""))), None);
        assert_eq!(map.get(key(&("", "v1", "pod"))), None);
    }
}
