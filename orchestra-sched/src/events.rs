//! Events: `core/v1` Events about pods (FailedScheduling, Scheduled,
//! Preempted), created off the scheduling loop; dropped when the API cannot
//! keep up, as client-go's broadcaster does.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, PostParams};
use tokio::sync::mpsc;

/// One event to record.
#[derive(Debug, Clone)]
pub struct Record {
    /// The pod it is about.
    pub pod: ObjectReference,
    /// Normal or Warning.
    pub type_: &'static str,
    /// Reason (Scheduled, FailedScheduling, Preempted).
    pub reason: &'static str,
    /// Action (Scheduling, Binding, Preempting).
    pub action: &'static str,
    /// Message.
    pub message: String,
    /// The reporting scheduler (profile name).
    pub component: String,
}

/// Sends events to the API asynchronously.
#[derive(Clone)]
pub struct EventRecorder {
    tx: Option<mpsc::Sender<Record>>,
}

/// A reference to `pod` for an event.
pub fn pod_ref(pod: &Pod) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: pod.metadata.name.clone(),
        namespace: pod.metadata.namespace.clone(),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        ..Default::default()
    }
}

impl EventRecorder {
    /// A recorder that drops everything.
    pub fn disabled() -> EventRecorder {
        EventRecorder { tx: None }
    }

    /// Starts the sender task (`concurrency` creates in flight).
    pub fn start(client: kube::Client, identity: String, concurrency: usize) -> EventRecorder {
        let (tx, mut rx) = mpsc::channel::<Record>(4096);
        tokio::spawn(async move {
            let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
            let mut seq: u64 = 0;
            while let Some(r) = rx.recv().await {
                seq += 1;
                let Ok(permit) = sem.clone().acquire_owned().await else { break };
                let client = client.clone();
                let identity = identity.clone();
                tokio::spawn(async move {
                    let ns = r.pod.namespace.clone().unwrap_or_else(|| "default".into());
                    let now = k8s_openapi::jiff::Timestamp::now();
                    let name = format!(
                        "{}.{:x}{:04x}",
                        r.pod.name.as_deref().unwrap_or("pod"),
                        now.as_nanosecond() as u64,
                        seq & 0xffff
                    );
                    let event = Event {
                        metadata: ObjectMeta { name: Some(name), namespace: Some(ns.clone()), ..Default::default() },
                        involved_object: r.pod,
                        reason: Some(r.reason.into()),
                        message: Some(r.message),
                        type_: Some(r.type_.into()),
                        action: Some(r.action.into()),
                        count: Some(1),
                        first_timestamp: Some(Time(now)),
                        last_timestamp: Some(Time(now)),
                        event_time: Some(MicroTime(now)),
                        source: Some(EventSource { component: Some(r.component.clone()), host: None }),
                        reporting_component: Some(r.component),
                        reporting_instance: Some(identity),
                        ..Default::default()
                    };
                    let api: Api<Event> = Api::namespaced(client, &ns);
                    if let Err(e) = api.create(&PostParams::default(), &event).await {
                        tracing::debug!("event not recorded: {e}");
                    }
                    drop(permit);
                });
            }
        });
        EventRecorder { tx: Some(tx) }
    }

    /// Queues an event (dropped if the queue is full).
    pub fn record(&self, r: Record) {
        if let Some(tx) = &self.tx {
            let _ = tx.try_send(r);
        }
    }
}
