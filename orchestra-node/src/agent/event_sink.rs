//! Events of the agent and its workers: queued without waiting, published
//! one after the other by one task through the event recorder.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use k8s_openapi::api::core::v1::ObjectReference;
use orchestra_ctrl::events::{EventType, Recorder};
use tokio::sync::mpsc;

use super::Stats;

pub(super) struct EventMsg {
    regarding: ObjectReference,
    type_: EventType,
    reason: String,
    note: String,
}

/// Events queued for the publisher task.
pub(crate) struct EventSink {
    pub(super) tx: mpsc::Sender<EventMsg>,
    pub(super) stats: Arc<Stats>,
}

impl EventSink {
    pub(crate) fn send(&self, regarding: ObjectReference, type_: EventType, reason: &str, note: String) {
        let msg = EventMsg { regarding, type_, reason: reason.into(), note };
        if self.tx.try_send(msg).is_err() {
            self.stats.events_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

pub(super) async fn publish_events(mut rx: mpsc::Receiver<EventMsg>, recorder: Recorder) {
    while let Some(msg) = rx.recv().await {
        if let Err(e) = recorder.publish(msg.regarding, msg.type_, &msg.reason, &msg.reason, &msg.note).await {
            tracing::debug!(error = %e, reason = %msg.reason, "event not recorded");
        }
    }
}
