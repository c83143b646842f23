//! An event recorder writing `events.k8s.io/v1` Events, aggregating repeats
//! into one Event's `series` like client-go's `events` package.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use parking_lot::Mutex;

/// `Normal` or `Warning`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Nothing wrong.
    Normal,
    /// Something may need attention.
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

#[derive(Clone, Hash, PartialEq, Eq)]
struct SeriesKey {
    uid: String,
    type_: EventType,
    reason: String,
    action: String,
    note: String,
}

/// How long a repeat still joins an Event's series (client-go's window for
/// isomorphic events); a later repeat starts a new Event.
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// Most series a recorder remembers (client-go keeps an LRU of 4096). A node
/// agent records several events for every pod it starts; without a bound the
/// recorder would hold one entry per event for the life of the process.
pub const MAX_SERIES: usize = 4096;

/// The Event a series went to, and its count so far.
#[derive(Clone)]
struct Series {
    namespace: String,
    name: String,
    count: i32,
    observed: Instant,
}

/// The series a recorder can still extend: bounded by [`MAX_SERIES`] and
/// [`SERIES_WINDOW`].
#[derive(Default)]
struct SeriesCache(HashMap<SeriesKey, Series>);

impl SeriesCache {
    /// The series `key` belongs to, if it was observed within the window.
    fn get(&self, key: &SeriesKey, now: Instant) -> Option<Series> {
        self.0.get(key).filter(|s| now.duration_since(s.observed) < SERIES_WINDOW).cloned()
    }

    /// Remembers `series` under `key`; past [`MAX_SERIES`], forgets the
    /// series outside the window, then the older half of the rest.
    fn insert(&mut self, key: SeriesKey, series: Series, now: Instant) {
        self.0.insert(key, series);
        if self.0.len() <= MAX_SERIES {
            return;
        }
        self.0.retain(|_, s| now.duration_since(s.observed) < SERIES_WINDOW);
        if self.0.len() > MAX_SERIES {
            let mut observed: Vec<Instant> = self.0.values().map(|s| s.observed).collect();
            observed.sort_unstable();
            let keep_from = observed[observed.len() - MAX_SERIES / 2];
            self.0.retain(|_, s| s.observed >= keep_from);
        }
    }
}

/// Records events about objects on behalf of a controller.
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    controller: String,
    instance: String,
    series: Arc<Mutex<SeriesCache>>,
    /// Held while an event is published: two repeats published at once
    /// would otherwise both find no series and create two Events (controllers
    /// publish from tasks of their own).
    publishing: Arc<tokio::sync::Mutex<()>>,
}

/// A reference to `object` for an Event's `regarding`.
pub fn reference<K: Resource<DynamicType = ()>>(object: &K) -> ObjectReference {
    let meta = object.meta();
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        field_path: None,
    }
}

impl Recorder {
    /// A recorder for `controller` (e.g. `deployment-controller`).
    pub fn new(client: Client, controller: &str, instance: &str) -> Self {
        Self {
            client,
            controller: controller.into(),
            instance: instance.into(),
            series: Arc::default(),
            publishing: Arc::default(),
        }
    }

    /// Records an event; a repeat of the same (object, type, reason, action,
    /// note) bumps the existing Event's `series.count` instead of creating one.
    pub async fn publish(
        &self,
        regarding: ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        let namespace = regarding.namespace.clone().unwrap_or_else(|| "default".into());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let key = SeriesKey {
            uid: regarding.uid.clone().unwrap_or_default(),
            type_,
            reason: reason.into(),
            action: action.into(),
            note: note.into(),
        };
        let _one_at_a_time = self.publishing.lock().await;
        let now = MicroTime(Timestamp::now());
        let existing = self.series.lock().get(&key, Instant::now());
        if let Some(series) = existing {
            let count = series.count + 1;
            let patch = serde_json::json!({
                "series": EventSeries { count, last_observed_time: now.clone() }
            });
            let api: Api<Event> = Api::namespaced(self.client.clone(), &series.namespace);
            if api.patch(&series.name, &PatchParams::default(), &Patch::Merge(&patch)).await.is_ok() {
                let observed = Instant::now();
                self.series.lock().insert(key, Series { count, observed, ..series }, observed);
                return Ok(());
            }
        }
        let base = regarding.name.clone().unwrap_or_default();
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{base}.")),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            event_time: Some(now),
            type_: Some(type_.as_str().into()),
            reason: Some(reason.into()),
            action: Some(action.into()),
            note: Some(note.into()),
            regarding: Some(regarding),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        };
        let created = api.create(&PostParams::default(), &event).await?;
        let name = created.metadata.name.unwrap_or_default();
        let observed = Instant::now();
        self.series.lock().insert(key, Series { namespace, name, count: 1, observed }, observed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: usize) -> SeriesKey {
        SeriesKey {
            uid: format!("uid-{n}"),
            type_: EventType::Normal,
            reason: "Started".into(),
            action: "Start".into(),
            note: "Started container c".into(),
        }
    }

    fn series(observed: Instant) -> Series {
        Series { namespace: "default".into(), name: "e".into(), count: 1, observed }
    }

    #[test]
    fn a_series_ends_with_its_window() {
        let start = Instant::now();
        let mut cache = SeriesCache::default();
        cache.insert(key(1), series(start), start);
        assert!(cache.get(&key(1), start + SERIES_WINDOW / 2).is_some());
        assert!(cache.get(&key(1), start + SERIES_WINDOW).is_none(), "a repeat after the window starts a new Event");
    }

    #[test]
    fn the_cache_stays_bounded_and_keeps_the_newest() {
        let start = Instant::now();
        let mut cache = SeriesCache::default();
        for n in 0..3 * MAX_SERIES {
            let at = start + Duration::from_millis(n as u64);
            cache.insert(key(n), series(at), at);
            assert!(cache.0.len() <= MAX_SERIES);
        }
        let now = start + Duration::from_millis(3 * MAX_SERIES as u64);
        assert!(cache.get(&key(3 * MAX_SERIES - 1), now).is_some(), "the newest series is kept");
        assert!(cache.get(&key(0), now).is_none(), "the oldest is forgotten");
        // Series past the window go first, whatever their number.
        let mut filler = 0;
        while cache.0.len() < MAX_SERIES {
            filler += 1;
            cache.insert(key(10 * MAX_SERIES + filler), series(now), now);
        }
        let later = now + SERIES_WINDOW;
        cache.insert(key(usize::MAX), series(later), later);
        assert_eq!(cache.0.len(), 1, "only the series within the window is left");
        assert!(cache.get(&key(usize::MAX), later).is_some());
    }
}
