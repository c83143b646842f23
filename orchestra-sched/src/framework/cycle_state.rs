//! Per-cycle state that plugins share for one pod's scheduling attempt.

use std::any::Any;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// Typed data that plugins write in PreFilter/PreScore and read in
/// Filter/Score/Reserve/...; one per scheduling attempt, dropped after binding.
#[derive(Default, Clone)]
pub struct CycleState {
    data: HashMap<&'static str, Arc<dyn Any + Send + Sync>, BuildHasherDefault<KeyHasher>>,
    /// PreFilter plugins that returned Skip: their Filter is not run.
    pub skip_filter: std::collections::HashSet<&'static str>,
    /// PreScore plugins that returned Skip: their Score is not run.
    pub skip_score: std::collections::HashSet<&'static str>,
    snapshot: Option<crate::snapshot::Snapshot>,
}

/// FNV-1a over the few short, trusted keys of a cycle state: plugins read
/// it for every node they filter or score, and SipHash (the default,
/// resistant to crafted keys these are not) cost more than the reads.
#[derive(Clone, Copy)]
struct KeyHasher(u64);

impl Default for KeyHasher {
    fn default() -> KeyHasher {
        KeyHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl std::fmt::Debug for CycleState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CycleState").field("keys", &self.data.keys().collect::<Vec<_>>()).finish()
    }
}

impl CycleState {
    /// An empty state.
    pub fn new() -> CycleState {
        CycleState::default()
    }
    /// Stores `value` under `key` (usually the plugin's name).
    pub fn write<T: Any + Send + Sync>(&mut self, key: &'static str, value: T) {
        self.data.insert(key, Arc::new(value));
    }
    /// Reads the value under `key` if it has type `T`.
    pub fn read<T: Any + Send + Sync>(&self, key: &'static str) -> Option<&T> {
        self.data.get(key).and_then(|v| v.downcast_ref::<T>())
    }
    /// The snapshot the cycle decides on: every node, for plugins whose
    /// PreScore or Score looks beyond the nodes they are given (set by the
    /// algorithm before PreFilter; gone in the binding cycle).
    pub fn snapshot(&self) -> Option<&crate::snapshot::Snapshot> {
        self.snapshot.as_ref()
    }
    /// Sets the cycle's snapshot.
    pub fn set_snapshot(&mut self, snapshot: crate::snapshot::Snapshot) {
        self.snapshot = Some(snapshot);
    }
    /// Removes the cycle's snapshot (the scheduler does before binding, so
    /// that the next cycle can update its snapshot in place).
    pub fn take_snapshot(&mut self) -> Option<crate::snapshot::Snapshot> {
        self.snapshot.take()
    }
    /// Removes the value under `key`.
    pub fn delete(&mut self, key: &'static str) {
        self.data.remove(key);
    }
}
