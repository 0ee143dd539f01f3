//! One shared copy of each string, string list and string map that many cached objects carry.
//!
//! Most strings of a cached claim or volume are the same in thousands of objects: the
//! namespace, the class, the driver, the annotation keys and most of their values, the
//! finalizers, the access modes, the `v1` and `PersistentVolumeClaim` of every claimRef, and
//! often the whole list of them. A `String` costs 24 bytes inline and an allocation of at least
//! 32 bytes (glibc's smallest chunk); an `Arc<str>` handed out by an [`Interner`] costs 16 bytes
//! inline, and nothing more once another object holds the same text. docs/bench.md ("Shared
//! strings and a compact metadata") has what this saved.
//!
//! A PV's `spec.nodeAffinity` is shared the same way: volumes of one zone, or of one node for a
//! node-local driver, carry the same terms, and k8s-openapi reads each term into three nested
//! `Vec`s with room for four items each (serde's growth from empty), some 600 bytes per volume.
//!
//! The interner forgets what no cached object holds any more: when a table has doubled since it
//! was last swept, it drops the values only it holds, so unique values (names, volume handles,
//! a selected node that is never reused) cost a slot until the next sweep, not for ever, and a
//! long-running sidecar's tables stay within twice what its cache holds.

use std::collections::BTreeMap;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::ops::Deref;
use std::sync::Arc;

use hashbrown::HashTable;
use k8s_openapi::api::core::v1::{NodeSelectorRequirement, VolumeNodeAffinity};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A shared list of strings.
pub type SharedList = Arc<[Arc<str>]>;

/// A shared string map, as a list of pairs sorted by key.
pub type SharedPairs = Arc<[(Arc<str>, Arc<str>)]>;

/// Hands out one `Arc` per distinct string, string list and string map. One per cache: it is
/// owned by the informer task that fills the cache, so it needs no lock.
#[derive(Default)]
pub struct Interner {
    strs: Table<str>,
    lists: Table<[Arc<str>]>,
    pairs: Table<[(Arc<str>, Arc<str>)]>,
    affinities: Table<NodeAffinity>,
}

/// A shared `VolumeNodeAffinity` ([`Interner::node_affinity`]); it reads as one through
/// `Deref`.
#[derive(Debug, PartialEq)]
pub struct NodeAffinity(VolumeNodeAffinity);

impl Deref for NodeAffinity {
    type Target = VolumeNodeAffinity;

    fn deref(&self) -> &VolumeNodeAffinity {
        &self.0
    }
}

// Every field is a string, a list or an option of them: equality is an equivalence.
impl Eq for NodeAffinity {}

/// k8s-openapi's types are not `Hash`: this hashes the fields their `PartialEq` compares, so
/// equal affinities hash alike.
impl Hash for NodeAffinity {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let terms = self.0.required.as_ref().map(|r| &r.node_selector_terms);
        terms.map(Vec::len).hash(state);
        for term in terms.into_iter().flatten() {
            hash_requirements(term.match_expressions.as_deref(), state);
            hash_requirements(term.match_fields.as_deref(), state);
        }
    }
}

fn hash_requirements<H: Hasher>(requirements: Option<&[NodeSelectorRequirement]>, state: &mut H) {
    requirements.map(<[_]>::len).hash(state);
    for r in requirements.into_iter().flatten() {
        r.key.hash(state);
        r.operator.hash(state);
        r.values.hash(state);
    }
}

impl fmt::Debug for Interner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Interner")
            .field("strs", &self.strs.set.len())
            .field("lists", &self.lists.set.len())
            .field("pairs", &self.pairs.set.len())
            .field("affinities", &self.affinities.set.len())
            .finish()
    }
}

impl Interner {
    /// The shared copy of `value`.
    pub fn str(&mut self, value: &str) -> Arc<str> {
        self.strs.get_or_insert(value, |v| Arc::from(v))
    }

    /// The shared copy of each string of `values`, and of the list (in its order).
    pub fn list<'a>(&mut self, values: impl IntoIterator<Item = &'a str>) -> SharedList {
        let items: Vec<Arc<str>> = values.into_iter().map(|v| self.str(v)).collect();
        self.lists.get_or_insert(&items[..], |v| Arc::from(v))
    }

    /// The shared copy of each key and value of a map, and of the whole map. `sorted` yields the
    /// entries sorted by key, as a `BTreeMap` iterates; [`to_map`] makes the map again.
    pub fn pairs<'a>(
        &mut self,
        sorted: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> SharedPairs {
        let items: Vec<(Arc<str>, Arc<str>)> = sorted
            .into_iter()
            .map(|(k, v)| (self.str(k), self.str(v)))
            .collect();
        self.pairs.get_or_insert(&items[..], |v| Arc::from(v))
    }

    /// [`Interner::str`] of an optional string.
    pub fn opt_str(&mut self, value: Option<String>) -> Option<Arc<str>> {
        value.map(|v| self.str(&v))
    }

    /// [`Interner::list`] of an optional list.
    pub fn opt_list(&mut self, values: Option<Vec<String>>) -> Option<SharedList> {
        values.map(|v| self.list(v.iter().map(String::as_str)))
    }

    /// [`Interner::pairs`] of an optional string map.
    pub fn opt_map(&mut self, map: Option<BTreeMap<String, String>>) -> Option<SharedPairs> {
        map.map(|m| self.pairs(m.iter().map(|(k, v)| (k.as_str(), v.as_str()))))
    }

    /// [`Interner::pairs`] of an optional map of quantities (a capacity, requests): most
    /// objects of a cache have one of a few sizes. [`to_quantities`] makes the map again.
    pub fn quantities(&mut self, map: Option<BTreeMap<String, Quantity>>) -> Option<SharedPairs> {
        map.map(|m| self.pairs(m.iter().map(|(k, q)| (k.as_str(), q.0.as_str()))))
    }

    /// The shared copy of a PV's node affinity. Its strings are not shared with the other
    /// tables: a copy per distinct affinity is what is kept, and that copy is a clone, whose
    /// lists have no room to spare.
    pub fn node_affinity(&mut self, value: VolumeNodeAffinity) -> Arc<NodeAffinity> {
        let value = NodeAffinity(value);
        self.affinities
            .get_or_insert(&value, |v| Arc::new(NodeAffinity(v.0.clone())))
    }

    /// How many values the tables hold (strings, lists, maps, affinities).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.strs.set.len()
            + self.lists.set.len()
            + self.pairs.set.len()
            + self.affinities.set.len()
    }
}

/// A projection for `informer::projected_informer`: `make` with an [`Interner`] of its own,
/// which the informer task that fills the cache owns.
pub fn with_interner<W, C>(make: fn(W, &mut Interner) -> C) -> impl FnMut(W) -> C + Send {
    let mut interner = Interner::default();
    move |wire| make(wire, &mut interner)
}

/// The map `pairs` holds, its values made by `value` (a `String`, a `Quantity`, ...).
pub fn to_map<V>(pairs: &[(Arc<str>, Arc<str>)], value: impl Fn(&str) -> V) -> BTreeMap<String, V> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), value(v)))
        .collect()
}

/// The map of quantities `pairs` holds ([`Interner::quantities`]).
#[must_use]
pub fn to_quantities(pairs: &[(Arc<str>, Arc<str>)]) -> BTreeMap<String, Quantity> {
    to_map(pairs, |q| Quantity(q.to_owned()))
}

/// The strings of `list`, owned.
#[must_use]
pub fn to_vec(list: &[Arc<str>]) -> Vec<String> {
    list.iter().map(ToString::to_string).collect()
}

/// The smallest table size at which a sweep runs: below it the table costs less than the
/// sweeps would.
const SWEEP_FLOOR: usize = 64;

/// The values of one kind, and the size at which the next sweep runs.
struct Table<T: ?Sized> {
    set: HashTable<Arc<T>>,
    hasher: RandomState,
    sweep_at: usize,
}

impl<T: ?Sized> Default for Table<T> {
    fn default() -> Self {
        Self {
            set: HashTable::new(),
            hasher: RandomState::new(),
            sweep_at: SWEEP_FLOOR,
        }
    }
}

impl<T: ?Sized + Hash + Eq> Table<T> {
    /// The shared copy of `value`, made by `make` if there is none.
    fn get_or_insert(&mut self, value: &T, make: impl FnOnce(&T) -> Arc<T>) -> Arc<T> {
        // `Arc<T>` hashes as `T` does, so a value and its shared copy hash alike.
        let hash = self.hasher.hash_one(value);
        if let Some(found) = self.set.find(hash, |v| **v == *value) {
            return Arc::clone(found);
        }
        if self.set.len() >= self.sweep_at {
            self.sweep();
        }
        let shared = make(value);
        let hasher = &self.hasher;
        self.set
            .insert_unique(hash, Arc::clone(&shared), |v| hasher.hash_one(&**v));
        shared
    }

    /// Drops the values no one else holds and gives the table's room back.
    fn sweep(&mut self) {
        self.set.retain(|v| Arc::strong_count(v) > 1);
        let hasher = &self.hasher;
        self.set.shrink_to_fit(|v| hasher.hash_one(&**v));
        self.sweep_at = next_sweep(self.set.len());
    }
}

/// The table size at which the next sweep runs, after one left `live` values: twice that, so
/// the sweeps cost O(1) per insert and the table holds at most twice the live values (or
/// [`SWEEP_FLOOR`]).
fn next_sweep(live: usize) -> usize {
    live.saturating_mul(2).max(SWEEP_FLOOR)
}

#[cfg(test)]
mod tests;
