//! The control plane as static pods of the first node, as kubeadm lays it
//! out: one manifest per component in `<data dir>/manifests`, run on an
//! embedded runtime whose images are the components of this process, with
//! mirror pods in `kube-system`.
//!
//! The scheduler and the controller manager are started, restarted and
//! stopped by that node's agent. The store and the API server run before
//! any agent (the agents need them); their containers report them, running
//! while the API server serves.

use std::sync::Arc;

use orchestra_core::auth::UserInfo;
use orchestra_ctrl::controllers::ControllerManagerConfig;
use orchestra_ctrl::informer::SharedInformerFactory;
use orchestra_ctrl::leader::LeaderElector;
use orchestra_node::runtime::embedded::{ComponentContext, EmbeddedRuntime};
use orchestra_sched::config::SchedulerConfiguration;
use orchestra_sched::registry::Registry;
use orchestra_sched::scheduler::SchedulerBuilder;

use super::ControlPlaneError;
use super::handle::Running;
use super::nodes::ControlPlanePods;

/// The runtime handler (`runtimeClassName`) of the control-plane static pods.
pub(crate) const EMBEDDED_HANDLER: &str = "orchestra-embedded";

/// The components the first node runs.
pub(crate) struct Components {
    pub(crate) scheduler: Option<(Registry, SchedulerConfiguration)>,
    pub(crate) controllers: Option<ControllerManagerConfig>,
    pub(crate) identity: String,
}

impl Components {
    /// Writes the manifests and builds the runtime that runs them.
    pub(crate) fn prepare(self, running: &Running) -> Result<ControlPlanePods, ControlPlaneError> {
        let manifests = running.data_dir.join("manifests");
        let url = running.url().unwrap_or_else(|| "in process".into());
        let mut pods = vec![("etcd", "the store"), ("kube-apiserver", url.as_str())];
        if self.controllers.is_some() {
            pods.push(("kube-controller-manager", "the built-in controllers"));
        }
        if self.scheduler.is_some() {
            pods.push(("kube-scheduler", "the default scheduler profile"));
        }
        write_manifests(&manifests, &pods)
            .map_err(ControlPlaneError::io(format!("writing the static pod manifests in {}", manifests.display())))?;
        let runtime = self.runtime(running);
        Ok(ControlPlanePods { manifests, handler: EMBEDDED_HANDLER, runtime: Arc::new(runtime) })
    }

    fn runtime(self, running: &Running) -> EmbeddedRuntime {
        let listeners_stopped = running.listeners_stop.receiver();
        // The store and the API server: running until the listeners stop.
        let attached = move |what: &'static str| {
            let listeners_stopped = listeners_stopped.clone();
            move |mut ctx: ComponentContext| {
                let mut listeners_stopped = listeners_stopped.clone();
                async move {
                    ctx.log.line(format!("{what} is serving in this process"));
                    tokio::select! {
                        () = ctx.stopped() => 0,
                        _ = listeners_stopped.wait_for(|stopped| *stopped) => {
                            ctx.log.line(format!("{what} stopped"));
                            1
                        }
                    }
                }
            }
        };
        let mut runtime = EmbeddedRuntime::new(super::nodes::node_ip(1))
            .component("orchestra/etcd", attached("the store"))
            .component("orchestra/kube-apiserver", attached("the API server"));
        if let Some((registry, config)) = self.scheduler {
            let client = running.client_as(UserInfo::new("system:kube-scheduler", &[]));
            let identity = self.identity.clone();
            runtime = runtime.component("orchestra/kube-scheduler", move |ctx: ComponentContext| {
                let built = SchedulerBuilder::new(client.clone())
                    .registry(registry.clone())
                    .config(config.clone())
                    .identity(&identity)
                    .build();
                async move {
                    let scheduler = match built {
                        Ok(scheduler) => scheduler,
                        Err(error) => {
                            ctx.log.line(format!("cannot build the scheduler: {error}"));
                            return 1;
                        }
                    };
                    ctx.log.line("scheduler started");
                    let stopped = stop_requested(&ctx);
                    match scheduler.run_until(stopped).await {
                        Ok(()) => 0,
                        Err(error) => {
                            ctx.log.line(format!("scheduler stopped: {error}"));
                            1
                        }
                    }
                }
            });
        }
        if let Some(config) = self.controllers {
            let client = running.client_as(UserInfo::new("system:kube-controller-manager", &[]));
            let identity = self.identity;
            runtime = runtime.component("orchestra/kube-controller-manager", move |ctx: ComponentContext| {
                let manager =
                    orchestra_ctrl::controllers::builtin(SharedInformerFactory::new(client.clone()), config.clone());
                let elector =
                    Arc::new(LeaderElector::new(client.clone(), "kube-system", "kube-controller-manager", &identity));
                async move {
                    let manager = match manager {
                        Ok(manager) => manager,
                        Err(error) => {
                            ctx.log.line(format!("controller manager: {error}"));
                            return 1;
                        }
                    };
                    ctx.log.line(format!("controllers: {}", manager.names().join(", ")));
                    let stopped = stop_requested(&ctx);
                    match manager.run_elected(elector, stopped).await {
                        Ok(()) => 0,
                        Err(error) => {
                            ctx.log.line(format!("controller manager stopped: {error}"));
                            1
                        }
                    }
                }
            });
        }
        runtime
    }
}

/// Completes when the component's container is asked to stop; owned, so
/// that the component can keep writing to its log meanwhile.
fn stop_requested(ctx: &ComponentContext) -> impl Future<Output = ()> + Send + 'static + use<> {
    let mut stop = ctx.stop.clone();
    async move {
        let _ = stop.wait_for(|stop| *stop).await;
    }
}

/// The components that may have a manifest, whether or not they run now.
const COMPONENTS: [&str; 4] = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"];

/// One manifest per `(name, description)`, rewritten only when it changed
/// (the agent restarts a static pod whose manifest changes); the manifest
/// of a component that no longer runs is removed, so that its pod goes.
/// Other files in `dir` (static pods of the user's) are left alone.
fn write_manifests(dir: &std::path::Path, pods: &[(&str, &str)]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for component in COMPONENTS.iter().filter(|c| !pods.iter().any(|(name, _)| name == *c)) {
        match std::fs::remove_file(dir.join(format!("{component}.json"))) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
            _ => {}
        }
    }
    for (name, about) in pods {
        let manifest = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "kube-system",
                "labels": {"component": name, "tier": "control-plane"},
                "annotations": {"orchestra.dev/component": about},
            },
            "spec": {
                "runtimeClassName": EMBEDDED_HANDLER,
                "hostNetwork": true,
                "priorityClassName": "system-node-critical",
                "priority": 2000001000,
                "containers": [{"name": name, "image": format!("orchestra/{name}")}],
            },
        });
        let text = serde_json::to_string_pretty(&manifest).expect("a manifest serializes");
        let path = dir.join(format!("{name}.json"));
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            std::fs::write(path, text)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn manifests_follow_the_components_that_run() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path()).unwrap();
        std::fs::write(dir.path().join("mine.yaml"), "a static pod of the user's").unwrap();
        let all = [("etcd", "s"), ("kube-apiserver", "a"), ("kube-controller-manager", "c"), ("kube-scheduler", "k")];
        for (pods, expected) in [
            (&all[..], vec!["etcd.json", "kube-apiserver.json", "kube-controller-manager.json", "kube-scheduler.json"]),
            (&all[..2], vec!["etcd.json", "kube-apiserver.json"]),
            (&all[..3], vec!["etcd.json", "kube-apiserver.json", "kube-controller-manager.json"]),
        ] {
            write_manifests(dir.path(), pods).unwrap();
            let mut expected: Vec<String> = expected.into_iter().map(String::from).collect();
            expected.push("mine.yaml".into());
            expected.sort();
            assert_eq!(names(dir.path()), expected, "{pods:?}");
        }
        let manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("kube-controller-manager.json")).unwrap())
                .unwrap();
        assert_eq!(manifest["spec"]["containers"][0]["image"], "orchestra/kube-controller-manager");
        assert_eq!(manifest["spec"]["runtimeClassName"], EMBEDDED_HANDLER);
    }
}
