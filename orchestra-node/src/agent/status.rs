//! Pod status computation, as the kubelet's `generateAPIPodStatus`: container
//! statuses from the runtime's view, the phase (`getPhase`), and the
//! conditions with their transition times.

use std::time::SystemTime;

use k8s_openapi::api::core::v1::{
    Container, ContainerState as K8sState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus as K8sContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::runtime::{ContainerState, ContainerStatus};

/// Prefix of `containerID`s: `orchestra://<id>`.
pub const CONTAINER_ID_SCHEME: &str = "orchestra://";

/// A timestamp as the API shows it (whole seconds).
pub fn time(at: SystemTime) -> Time {
    let secs = at.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    Time(Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// Now, in whole seconds.
pub fn now() -> Time {
    time(SystemTime::now())
}

/// A waiting reason and message (`CrashLoopBackOff`, `ErrImagePull`...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: Option<String>,
}

impl Waiting {
    /// A reason with no message.
    pub fn reason(reason: &str) -> Self {
        Self { reason: reason.into(), message: None }
    }

    /// A reason with a message.
    pub fn new(reason: &str, message: impl Into<String>) -> Self {
        Self { reason: reason.into(), message: Some(message.into()) }
    }
}

/// What the agent knows of one container of the spec.
#[derive(Debug, Clone, Default)]
pub struct ContainerView {
    /// The runtime's latest instance.
    pub current: Option<ContainerStatus>,
    /// The instance before it (for `lastState`).
    pub previous: Option<ContainerStatus>,
    /// Why it is waiting, if it is (overrides an exited `current` shown as
    /// terminated: the container is about to be restarted).
    pub waiting: Option<Waiting>,
    /// The default waiting reason when nothing runs yet
    /// (`ContainerCreating`, `PodInitializing`).
    pub default_waiting: &'static str,
    /// Readiness.
    pub ready: bool,
    /// Startup probe passed (or none).
    pub started: bool,
}

fn terminated(c: &ContainerStatus) -> ContainerStateTerminated {
    let code = c.exit_code.unwrap_or(0);
    ContainerStateTerminated {
        container_id: Some(format!("{CONTAINER_ID_SCHEME}{}", c.id)),
        exit_code: code,
        reason: Some(c.reason.clone().unwrap_or_else(|| if code == 0 { "Completed".into() } else { "Error".into() })),
        message: c.message.clone(),
        signal: None,
        started_at: c.started_at.map(time),
        finished_at: c.finished_at.map(time),
    }
}

/// The API status of one container.
pub fn container_status(spec: &Container, view: &ContainerView) -> K8sContainerStatus {
    let waiting = |w: &Waiting| K8sState {
        waiting: Some(ContainerStateWaiting { reason: Some(w.reason.clone()), message: w.message.clone() }),
        ..Default::default()
    };
    let previous_terminated = view
        .previous
        .as_ref()
        .filter(|p| p.state == ContainerState::Exited)
        .map(|p| K8sState { terminated: Some(terminated(p)), ..Default::default() });
    let default_waiting = Waiting::reason(view.default_waiting);
    let (state, last_state, running) = match &view.current {
        Some(c) if c.state == ContainerState::Running => (
            K8sState {
                running: Some(ContainerStateRunning { started_at: c.started_at.map(time) }),
                ..Default::default()
            },
            previous_terminated,
            true,
        ),
        Some(c) if c.state == ContainerState::Exited => match &view.waiting {
            Some(w) => (waiting(w), Some(K8sState { terminated: Some(terminated(c)), ..Default::default() }), false),
            None => (K8sState { terminated: Some(terminated(c)), ..Default::default() }, previous_terminated, false),
        },
        _ => (waiting(view.waiting.as_ref().unwrap_or(&default_waiting)), previous_terminated, false),
    };
    let restart_count = match (&view.current, &view.previous) {
        (Some(c), _) => c.attempt as i32,
        (None, Some(p)) => p.attempt as i32 + 1,
        _ => 0,
    };
    K8sContainerStatus {
        name: spec.name.clone(),
        image: spec.image.clone().unwrap_or_default(),
        image_id: view.current.as_ref().map(|c| c.image_ref.clone()).unwrap_or_default(),
        container_id: view.current.as_ref().map(|c| format!("{CONTAINER_ID_SCHEME}{}", c.id)),
        state: Some(state),
        last_state: Some(last_state.unwrap_or_default()),
        ready: running && view.ready,
        started: Some(running && view.started),
        restart_count,
        ..Default::default()
    }
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

fn terminated_code(s: &K8sContainerStatus) -> Option<i32> {
    s.state.as_ref().and_then(|st| st.terminated.as_ref()).map(|t| t.exit_code)
}

fn last_terminated_code(s: &K8sContainerStatus) -> Option<i32> {
    s.last_state.as_ref().and_then(|st| st.terminated.as_ref()).map(|t| t.exit_code)
}

fn is_running(s: &K8sContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.running.is_some())
}

/// Whether every (non-sidecar) init container completed successfully and
/// every sidecar started.
pub fn initialized(pod: &Pod, init: &[K8sContainerStatus]) -> bool {
    incomplete_init(pod, init).is_empty()
}

fn incomplete_init(pod: &Pod, init: &[K8sContainerStatus]) -> Vec<String> {
    let spec = pod.spec.as_ref();
    spec.iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .filter(|c| {
            let status = init.iter().find(|s| s.name == c.name);
            match status {
                None => true,
                Some(s) if is_sidecar(c) => !(is_running(s) && s.started == Some(true)),
                Some(s) => terminated_code(s) != Some(0),
            }
        })
        .map(|c| c.name.clone())
        .collect()
}

/// The pod phase, as the kubelet's `getPhase`. `terminating`: the pod is
/// being stopped for good (deleted), so stopped containers will not restart
/// and the phase is Succeeded or Failed whatever the restart policy.
pub fn pod_phase(
    pod: &Pod,
    init: &[K8sContainerStatus],
    app: &[K8sContainerStatus],
    terminating: bool,
) -> &'static str {
    let Some(spec) = pod.spec.as_ref() else { return "Pending" };
    let policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let mut pending_init = 0;
    let mut failed_init = 0;
    for c in spec.init_containers.iter().flatten() {
        let Some(s) = init.iter().find(|s| s.name == c.name) else {
            pending_init += 1;
            continue;
        };
        if is_sidecar(c) {
            if !is_running(s) {
                pending_init += 1;
            }
            continue;
        }
        match terminated_code(s) {
            Some(0) => {}
            Some(_) => failed_init += 1,
            None if is_running(s) => pending_init += 1,
            None => match last_terminated_code(s) {
                Some(code) if code != 0 => failed_init += 1,
                _ => pending_init += 1,
            },
        }
    }
    if failed_init > 0 && policy == "Never" {
        return "Failed";
    }
    let (mut running, mut waiting, mut stopped, mut succeeded, mut unknown) = (0, 0, 0, 0, 0);
    let mut any_started = false;
    for c in &spec.containers {
        let Some(s) = app.iter().find(|s| s.name == c.name) else {
            unknown += 1;
            continue;
        };
        let state = s.state.clone().unwrap_or_default();
        if state.running.is_some() {
            running += 1;
            any_started = true;
        } else if let Some(t) = &state.terminated {
            stopped += 1;
            any_started = true;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if last_terminated_code(s).is_some() {
            stopped += 1;
            any_started = true;
        } else {
            waiting += 1;
        }
    }
    if (pending_init > 0 && !any_started) || waiting > 0 {
        return "Pending";
    }
    if running > 0 && unknown == 0 {
        return "Running";
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        if terminating {
            return if stopped == succeeded { "Succeeded" } else { "Failed" };
        }
        if policy == "Always" {
            return "Running";
        }
        if stopped == succeeded {
            return "Succeeded";
        }
        if policy == "Never" {
            return "Failed";
        }
        return "Running";
    }
    "Pending"
}

/// What a pod's status is computed from, besides the pod.
#[derive(Debug, Clone, Default)]
pub struct PodObservation {
    /// The sandbox exists with its network (`PodReadyToStartContainers`).
    pub sandbox_ready: bool,
    /// The pod IP.
    pub pod_ip: Option<String>,
    /// The node's IP.
    pub host_ip: String,
    /// Init container statuses, in spec order.
    pub init: Vec<K8sContainerStatus>,
    /// App container statuses, in spec order.
    pub app: Vec<K8sContainerStatus>,
    /// The pod is being stopped for good (see [`pod_phase`]).
    pub terminating: bool,
    /// A phase forced by the agent (`Failed` on admission rejection or an
    /// exceeded deadline) with reason and message.
    pub forced: Option<(String, String, String)>,
}

fn condition(
    old: Option<&PodStatus>,
    type_: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
    now: &Time,
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let previous = old.and_then(|s| s.conditions.iter().flatten().find(|c| c.type_ == type_));
    let since = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone().unwrap_or_else(|| now.clone()),
        _ => now.clone(),
    };
    PodCondition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.map(str::to_owned),
        message,
        last_transition_time: Some(since),
        last_probe_time: None,
        observed_generation: None,
    }
}

/// Condition types the agent owns; others (set by the scheduler or
/// controllers) are kept as they are.
pub const OWNED_CONDITIONS: [&str; 4] = ["PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"];

/// The whole status of `pod`.
pub fn pod_status(pod: &Pod, obs: PodObservation, now: &Time) -> PodStatus {
    let old = pod.status.as_ref();
    let spec = pod.spec.clone().unwrap_or_default();
    let phase = match &obs.forced {
        Some((phase, _, _)) => phase.clone(),
        None => pod_phase(pod, &obs.init, &obs.app, obs.terminating).to_owned(),
    };
    let mut conditions: Vec<PodCondition> = Vec::new();
    let mut others: Vec<PodCondition> = old
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .filter(|c| !OWNED_CONDITIONS.contains(&c.type_.as_str()))
        .cloned()
        .collect();
    if !others.iter().any(|c| c.type_ == "PodScheduled") {
        others.insert(0, condition(None, "PodScheduled", true, None, None, now));
    }
    let terminal = phase == "Succeeded" || phase == "Failed";
    conditions.push(condition(old, "PodReadyToStartContainers", obs.sandbox_ready && !terminal, None, None, now));
    let incomplete = incomplete_init(pod, &obs.init);
    let any_app_started = obs
        .app
        .iter()
        .any(|s| s.state.as_ref().is_some_and(|st| st.waiting.is_none()) || last_terminated_code(s).is_some());
    let init_done = incomplete.is_empty() || any_app_started || phase == "Succeeded";
    conditions.push(if init_done {
        condition(old, "Initialized", true, None, None, now)
    } else {
        condition(
            old,
            "Initialized",
            false,
            Some("ContainersNotInitialized"),
            Some(format!("containers with incomplete status: [{}]", incomplete.join(" "))),
            now,
        )
    });
    let unready: Vec<String> = spec
        .containers
        .iter()
        .filter(|c| !obs.app.iter().any(|s| s.name == c.name && s.ready))
        .map(|c| c.name.clone())
        .collect();
    let (containers_ready, reason, message) = if phase == "Succeeded" {
        (false, Some("PodCompleted"), None)
    } else if unready.is_empty() {
        (true, None, None)
    } else {
        (false, Some("ContainersNotReady"), Some(format!("containers with unready status: [{}]", unready.join(" "))))
    };
    conditions.push(condition(old, "ContainersReady", containers_ready, reason, message.clone(), now));
    let missing_gate = spec
        .readiness_gates
        .iter()
        .flatten()
        .find(|g| !others.iter().any(|c| c.type_ == g.condition_type && c.status == "True"));
    conditions.push(match missing_gate {
        Some(gate) if containers_ready => condition(
            old,
            "Ready",
            false,
            Some("ReadinessGatesNotReady"),
            Some(format!("corresponding condition of pod readiness gate {:?} does not exist.", gate.condition_type)),
            now,
        ),
        _ => condition(old, "Ready", containers_ready, reason, message, now),
    });
    others.extend(conditions);
    let host_ips = (!obs.host_ip.is_empty()).then(|| vec![HostIP { ip: obs.host_ip.clone() }]);
    let pod_ips = obs.pod_ip.clone().map(|ip| vec![PodIP { ip }]);
    let (reason, message) = match &obs.forced {
        Some((_, reason, message)) => (Some(reason.clone()), Some(message.clone())),
        None => (old.and_then(|s| s.reason.clone()), old.and_then(|s| s.message.clone())),
    };
    PodStatus {
        phase: Some(phase),
        conditions: Some(others),
        host_ip: (!obs.host_ip.is_empty()).then(|| obs.host_ip.clone()),
        host_ips,
        pod_ip: obs.pod_ip.clone(),
        pod_ips,
        start_time: old.and_then(|s| s.start_time.clone()).or_else(|| Some(now.clone())),
        init_container_statuses: (!obs.init.is_empty()).then_some(obs.init),
        container_statuses: Some(obs.app),
        qos_class: Some(super::resources::qos_class(pod).into()),
        reason,
        message,
        nominated_node_name: old.and_then(|s| s.nominated_node_name.clone()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn rt(name: &str, attempt: u32, state: ContainerState, exit: Option<i32>) -> ContainerStatus {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        ContainerStatus {
            id: format!("{name}-{attempt}"),
            sandbox_id: "s".into(),
            name: name.into(),
            attempt,
            state,
            image: "img".into(),
            image_ref: "sha256:1".into(),
            created_at: t,
            started_at: Some(t),
            finished_at: exit.map(|_| t + Duration::from_secs(5)),
            exit_code: exit,
            reason: None,
            message: None,
            log_path: Default::default(),
            pid: None,
            labels: BTreeMap::new(),
        }
    }

    fn spec_container(name: &str) -> Container {
        Container { name: name.into(), image: Some("img".into()), ..Default::default() }
    }

    fn pod(policy: &str, init: &[&str], app: &[&str]) -> Pod {
        Pod {
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                init_containers: Some(init.iter().map(|n| spec_container(n)).collect()),
                containers: app.iter().map(|n| spec_container(n)).collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn view(current: Option<ContainerStatus>, waiting: Option<Waiting>) -> ContainerView {
        ContainerView {
            current,
            waiting,
            default_waiting: "ContainerCreating",
            ready: true,
            started: true,
            ..Default::default()
        }
    }

    fn status(name: &str, v: ContainerView) -> K8sContainerStatus {
        container_status(&spec_container(name), &v)
    }

    #[test]
    fn container_states_from_runtime() {
        let s = status("c", view(None, None));
        assert_eq!(s.state.unwrap().waiting.unwrap().reason.as_deref(), Some("ContainerCreating"));
        assert!(!s.ready);
        let s = status("c", view(Some(rt("c", 2, ContainerState::Running, None)), None));
        assert!(s.state.unwrap().running.is_some());
        assert_eq!((s.restart_count, s.ready, s.started), (2, true, Some(true)));
        assert_eq!(s.container_id.as_deref(), Some("orchestra://c-2"));
        assert_eq!(s.image_id, "sha256:1");
        let crash = Waiting::new("CrashLoopBackOff", "back-off 10s restarting failed container=c pod=p_ns(u)");
        let s = status("c", view(Some(rt("c", 1, ContainerState::Exited, Some(2))), Some(crash)));
        assert_eq!(s.state.unwrap().waiting.unwrap().reason.as_deref(), Some("CrashLoopBackOff"));
        let last = s.last_state.unwrap().terminated.unwrap();
        assert_eq!((last.exit_code, last.reason.as_deref()), (2, Some("Error")));
        let mut v = view(Some(rt("c", 1, ContainerState::Running, None)), None);
        v.previous = Some(rt("c", 0, ContainerState::Exited, Some(0)));
        let s = status("c", v);
        assert_eq!(s.last_state.unwrap().terminated.unwrap().reason.as_deref(), Some("Completed"));
    }

    fn pod_phase_of(pod: &Pod, init: &[K8sContainerStatus], app: &[K8sContainerStatus]) -> &'static str {
        pod_phase(pod, init, app, false)
    }

    #[test]
    fn phases_follow_the_kubelet() {
        let running = status("a", view(Some(rt("a", 0, ContainerState::Running, None)), None));
        let ok = status("a", view(Some(rt("a", 0, ContainerState::Exited, Some(0))), None));
        let bad = status("a", view(Some(rt("a", 0, ContainerState::Exited, Some(1))), None));
        let creating = status("a", view(None, None));
        let backoff = status(
            "a",
            view(Some(rt("a", 0, ContainerState::Exited, Some(1))), Some(Waiting::reason("CrashLoopBackOff"))),
        );
        let p = |policy| pod(policy, &[], &["a"]);
        assert_eq!(pod_phase_of(&p("Always"), &[], std::slice::from_ref(&creating)), "Pending");
        assert_eq!(pod_phase_of(&p("Always"), &[], std::slice::from_ref(&running)), "Running");
        assert_eq!(pod_phase_of(&p("Never"), &[], std::slice::from_ref(&ok)), "Succeeded");
        assert_eq!(pod_phase_of(&p("Never"), &[], std::slice::from_ref(&bad)), "Failed");
        assert_eq!(pod_phase_of(&p("OnFailure"), &[], std::slice::from_ref(&ok)), "Succeeded");
        assert_eq!(pod_phase_of(&p("OnFailure"), &[], std::slice::from_ref(&backoff)), "Running");
        assert_eq!(pod_phase_of(&p("Always"), &[], std::slice::from_ref(&ok)), "Running");
        assert_eq!(pod_phase(&p("Always"), &[], std::slice::from_ref(&ok), true), "Succeeded");
        assert_eq!(pod_phase(&p("Always"), &[], std::slice::from_ref(&bad), true), "Failed");
        // Init containers.
        let init_bad = status("i", view(Some(rt("i", 0, ContainerState::Exited, Some(1))), None));
        let init_running = status("i", view(Some(rt("i", 0, ContainerState::Running, None)), None));
        let init_ok = status("i", view(Some(rt("i", 0, ContainerState::Exited, Some(0))), None));
        let waiting_app = status("a", ContainerView { default_waiting: "PodInitializing", ..Default::default() });
        let with_init = |policy| pod(policy, &["i"], &["a"]);
        assert_eq!(
            pod_phase_of(&with_init("Never"), std::slice::from_ref(&init_bad), std::slice::from_ref(&waiting_app)),
            "Failed"
        );
        assert_eq!(pod_phase_of(&with_init("Always"), &[init_bad], std::slice::from_ref(&waiting_app)), "Pending");
        assert_eq!(pod_phase_of(&with_init("Always"), &[init_running], std::slice::from_ref(&waiting_app)), "Pending");
        assert_eq!(pod_phase_of(&with_init("Always"), &[init_ok], std::slice::from_ref(&running)), "Running");
    }

    #[test]
    fn conditions_and_transition_times() {
        let p = pod("Always", &["i"], &["a", "b"]);
        let t1 = time(SystemTime::UNIX_EPOCH + Duration::from_secs(100));
        let t2 = time(SystemTime::UNIX_EPOCH + Duration::from_secs(200));
        let init_running = status("i", view(Some(rt("i", 0, ContainerState::Running, None)), None));
        let waiting = |n: &str| status(n, ContainerView { default_waiting: "PodInitializing", ..Default::default() });
        let obs = PodObservation {
            sandbox_ready: true,
            pod_ip: Some("10.0.0.5".into()),
            host_ip: "192.168.1.1".into(),
            init: vec![init_running],
            app: vec![waiting("a"), waiting("b")],
            terminating: false,
            forced: None,
        };
        let s1 = pod_status(&p, obs, &t1);
        let get =
            |s: &PodStatus, t: &str| s.conditions.as_ref().unwrap().iter().find(|c| c.type_ == t).unwrap().clone();
        assert_eq!(s1.phase.as_deref(), Some("Pending"));
        assert_eq!(get(&s1, "Initialized").message.as_deref(), Some("containers with incomplete status: [i]"));
        assert_eq!(get(&s1, "Ready").message.as_deref(), Some("containers with unready status: [a b]"));
        assert_eq!(get(&s1, "PodScheduled").status, "True");
        assert_eq!(s1.qos_class.as_deref(), Some("BestEffort"));
        let mut p2 = p.clone();
        p2.status = Some(s1.clone());
        let init_ok = status("i", view(Some(rt("i", 0, ContainerState::Exited, Some(0))), None));
        let run = |n: &str| status(n, view(Some(rt(n, 0, ContainerState::Running, None)), None));
        let obs = PodObservation {
            sandbox_ready: true,
            pod_ip: Some("10.0.0.5".into()),
            host_ip: "192.168.1.1".into(),
            init: vec![init_ok],
            app: vec![run("a"), run("b")],
            terminating: false,
            forced: None,
        };
        let s2 = pod_status(&p2, obs, &t2);
        assert_eq!(s2.phase.as_deref(), Some("Running"));
        assert_eq!(get(&s2, "Ready").status, "True");
        assert_eq!(get(&s2, "Ready").last_transition_time, Some(t2.clone()));
        assert_eq!(get(&s2, "PodReadyToStartContainers").last_transition_time, Some(t1.clone()));
        assert_eq!(s2.start_time, Some(t1));
        assert_eq!(s2.pod_ips.unwrap()[0].ip, "10.0.0.5");
    }
}
