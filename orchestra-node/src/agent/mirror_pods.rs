//! The static pods' source and their mirror pods: the manifest directory
//! rescanned, and mirror pods created, replaced and deleted through the API
//! to match it.

use std::collections::HashSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use orchestra_ctrl::informer::ObjectKey;
use tokio::sync::mpsc;

use super::Shared;
use super::pod_source::PodView;
use super::static_pods::{self, StaticPod};

pub(super) async fn scan_static_pods(
    dir: std::path::PathBuf,
    node_name: String,
    every: Duration,
    tx: mpsc::UnboundedSender<Vec<StaticPod>>,
) {
    let mut last: Option<Vec<StaticPod>> = None;
    loop {
        let (dir2, node2) = (dir.clone(), node_name.clone());
        let scanned = tokio::task::spawn_blocking(move || static_pods::load_dir(&dir2, &node2)).await;
        if let Ok((pods, errors)) = scanned {
            for e in errors {
                tracing::warn!(error = %e, "static pod manifest ignored");
            }
            if last.as_ref() != Some(&pods) {
                if tx.send(pods.clone()).is_err() {
                    return;
                }
                last = Some(pods);
            }
        }
        tokio::time::sleep(every).await;
    }
}

pub(super) async fn reconcile_mirrors(shared: &Shared, informer: &PodView, statics: &[Pod], static_seen: bool) {
    let node_uid = shared.node.lock().uid.clone();
    let Some(node_uid) = node_uid else { return };
    let node = &shared.config.node_name;
    let wanted: HashSet<(String, String)> = statics
        .iter()
        .map(|p| (p.metadata.namespace.clone().unwrap_or_default(), p.metadata.name.clone().unwrap_or_default()))
        .collect();
    for p in statics {
        let namespace = p.metadata.namespace.clone().unwrap_or_default();
        let name = p.metadata.name.clone().unwrap_or_default();
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(shared.client.clone(), &namespace);
        let existing = informer.get(&ObjectKey::new(namespace.clone(), name.clone()));
        if let Some(existing) = &existing {
            let ok = static_pods::mirror_hash(existing) == Some(uid.as_str())
                && existing.metadata.deletion_timestamp.is_none();
            if ok {
                continue;
            }
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: existing
                    .metadata
                    .uid
                    .clone()
                    .map(|u| Preconditions { uid: Some(u), resource_version: None }),
                ..Default::default()
            };
            if let Err(e) = api.delete(&name, &params).await
                && !matches!(&e, kube::Error::Api(s) if s.code == 404)
            {
                tracing::debug!(pod = %name, error = %e, "deleting a stale mirror pod failed");
                continue;
            }
        }
        let mirror = static_pods::mirror_pod(p, node, &node_uid);
        match api.create(&PostParams::default(), &mirror).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => tracing::debug!(pod = %name, error = %e, "creating a mirror pod failed"),
        }
    }
    if !static_seen {
        return;
    }
    // Mirror pods whose manifest is gone.
    for pod in informer.list() {
        if !static_pods::is_mirror(&pod) {
            continue;
        }
        let key = (pod.metadata.namespace.clone().unwrap_or_default(), pod.metadata.name.clone().unwrap_or_default());
        if wanted.contains(&key) {
            continue;
        }
        let api: Api<Pod> = Api::namespaced(shared.client.clone(), &key.0);
        let params = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
        let _ = api.delete(&key.1, &params).await;
    }
}
