//! Kinds that share their storage with another kind, as upstream's
//! cohabiting resources do: `events.k8s.io/v1` Events are kept as `core/v1`
//! Events, so an event recorded through either API is seen through both
//! (`kubectl describe` reads `core/v1`, recorders write `events.k8s.io/v1`).

use serde_json::{Map, Value};

/// How a served kind is kept in another kind's storage: where, and the two
/// conversions applied on every write and every read.
#[derive(Debug, Clone, Copy)]
pub struct StorageConversion {
    /// Group of the storing resource ("" for core).
    pub group: &'static str,
    /// Plural of the storing resource, e.g. `events`.
    pub plural: &'static str,
    /// `apiVersion` of the stored shape, e.g. `v1`.
    pub api_version: &'static str,
    /// Kind of the stored shape.
    pub kind: &'static str,
    /// Served shape → stored shape (`apiVersion` and `kind` are set by the caller).
    pub to_storage: fn(&mut Map<String, Value>),
    /// Stored shape → served shape (`apiVersion` and `kind` are set by the caller).
    pub from_storage: fn(&mut Map<String, Value>),
}

impl StorageConversion {
    /// The stored form of a served object.
    pub fn stored(&self, mut object: Value) -> Value {
        if let Some(map) = object.as_object_mut() {
            (self.to_storage)(map);
            map.insert("apiVersion".into(), self.api_version.into());
            map.insert("kind".into(), self.kind.into());
        }
        object
    }

    /// The served form (`api_version`, `kind`) of a stored object.
    pub fn served(&self, object: &mut Value, api_version: &str, kind: &str) {
        if let Some(map) = object.as_object_mut() {
            (self.from_storage)(map);
            map.insert("apiVersion".into(), api_version.into());
            map.insert("kind".into(), kind.into());
        }
    }
}

/// `events.k8s.io/v1` field ↔ `core/v1` field, as upstream's conversion
/// (`pkg/apis/events/v1`) maps them; every other field has the same name.
const EVENT_FIELDS: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn rename(map: &mut Map<String, Value>, from: &str, to: &str) {
    match map.remove(from) {
        Some(value) => {
            map.insert(to.into(), value);
        }
        None => {
            map.remove(to);
        }
    }
}

/// `events.k8s.io/v1` Events stored as `core/v1` Events.
pub const EVENTS: StorageConversion = StorageConversion {
    group: "",
    plural: "events",
    api_version: "v1",
    kind: "Event",
    to_storage: |map| {
        for (served, stored) in EVENT_FIELDS {
            rename(map, served, stored);
        }
    },
    from_storage: |map| {
        for (served, stored) in EVENT_FIELDS {
            rename(map, stored, served);
        }
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::{core::v1 as core, events::v1 as events};
    use serde_json::json;

    fn new_style() -> Value {
        json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": "web.1", "namespace": "default"},
            "eventTime": "2026-11-30T08:00:00.000000Z",
            "series": {"count": 3, "lastObservedTime": "2026-11-30T08:01:00.000000Z"},
            "reportingController": "orchestra.io/node",
            "reportingInstance": "node-a",
            "action": "Pulling",
            "reason": "Pulled",
            "regarding": {"kind": "Pod", "name": "web", "namespace": "default", "uid": "u1"},
            "related": {"kind": "Node", "name": "node-a"},
            "note": "Container image \"orchestra/echo\" already present on machine",
            "type": "Normal",
            "deprecatedSource": {"component": "kubelet", "host": "node-a"},
            "deprecatedFirstTimestamp": "2026-11-30T08:00:00Z",
            "deprecatedLastTimestamp": "2026-11-30T08:01:00Z",
            "deprecatedCount": 3
        })
    }

    #[test]
    fn events_k8s_io_events_round_trip_through_core_storage() {
        let stored = EVENTS.stored(new_style());
        let core: core::Event = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(core.involved_object.name.as_deref(), Some("web"));
        assert_eq!(core.involved_object.uid.as_deref(), Some("u1"));
        assert_eq!(core.message.as_deref(), Some("Container image \"orchestra/echo\" already present on machine"));
        assert_eq!(core.reporting_component.as_deref(), Some("orchestra.io/node"));
        assert_eq!(core.reporting_instance.as_deref(), Some("node-a"));
        assert_eq!(core.source.and_then(|s| s.component).as_deref(), Some("kubelet"));
        assert_eq!(core.count, Some(3));
        assert_eq!(core.series.and_then(|s| s.count), Some(3));
        assert!(core.first_timestamp.is_some() && core.last_timestamp.is_some());

        let mut served = stored;
        EVENTS.served(&mut served, "events.k8s.io/v1", "Event");
        assert_eq!(served, new_style());
        serde_json::from_value::<events::Event>(served).unwrap();
    }

    #[test]
    fn a_core_event_reads_as_events_k8s_io() {
        let mut object = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "x.1", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "x"},
            "message": "Successfully assigned default/x to node-a",
            "reason": "Scheduled",
            "source": {"component": "default-scheduler"},
            "count": 1,
            "type": "Normal"
        });
        EVENTS.served(&mut object, "events.k8s.io/v1", "Event");
        let event: events::Event = serde_json::from_value(object.clone()).unwrap();
        assert_eq!(event.regarding.and_then(|r| r.name).as_deref(), Some("x"));
        assert_eq!(event.note.as_deref(), Some("Successfully assigned default/x to node-a"));
        assert_eq!(event.deprecated_count, Some(1));
        assert!(object.get("involvedObject").is_none() && object.get("message").is_none());
    }
}
