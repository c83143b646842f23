//! An event recorder writing `events.k8s.io/v1` Events, aggregating repeats
//! into one Event's `series` like client-go's `events` package.

use std::collections::HashMap;
use std::sync::Arc;

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

/// Records events about objects on behalf of a controller.
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    controller: String,
    instance: String,
    series: Arc<Mutex<HashMap<SeriesKey, (String, String, i32)>>>,
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
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let key = SeriesKey {
            uid: regarding.uid.clone().unwrap_or_default(),
            type_,
            reason: reason.into(),
            action: action.into(),
            note: note.into(),
        };
        let now = MicroTime(Timestamp::now());
        let existing = self.series.lock().get(&key).cloned();
        if let Some((ns, name, count)) = existing {
            let count = count + 1;
            let patch = serde_json::json!({
                "series": EventSeries { count, last_observed_time: now.clone() }
            });
            let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
            if api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .is_ok()
            {
                self.series.lock().insert(key, (ns, name, count));
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
        self.series.lock().insert(key, (namespace, name, 1));
        Ok(())
    }
}
