//! PodSecurity: the Pod Security Standards, enforced and warned about by
//! namespace labels.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::{AdmissionPlugin, AdmissionRequest, ObjectReader, Operation, ResourceRef};
use crate::api::{ApiError, ErrorTarget, FieldError};

const NAMESPACES: ResourceRef<'static> = ResourceRef::new("", "v1", "namespaces");
const PODS: ResourceRef<'static> = ResourceRef::new("", "v1", "pods");

/// The prefix of the namespace labels that choose the levels.
const LABEL_PREFIX: &str = "pod-security.kubernetes.io/";

/// A level of the Pod Security Standards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PodSecurityLevel {
    /// No restriction.
    Privileged,
    /// Prevents known privilege escalations: no host namespaces, privileged
    /// containers, added capabilities beyond the default set, hostPath
    /// volumes, host ports, unconfined AppArmor or seccomp profiles, custom
    /// SELinux options, unmasked `/proc` or unsafe sysctls.
    Baseline,
    /// Baseline, and hardened: only ephemeral and claim-backed volume
    /// types, containers that run as non-root without privilege escalation,
    /// drop all capabilities and have a RuntimeDefault or Localhost seccomp
    /// profile.
    Restricted,
}

impl PodSecurityLevel {
    /// The level's label value: `privileged`, `baseline` or `restricted`.
    pub fn as_str(self) -> &'static str {
        match self {
            PodSecurityLevel::Privileged => "privileged",
            PodSecurityLevel::Baseline => "baseline",
            PodSecurityLevel::Restricted => "restricted",
        }
    }

    fn parse(value: &str) -> Option<PodSecurityLevel> {
        match value {
            "privileged" => Some(PodSecurityLevel::Privileged),
            "baseline" => Some(PodSecurityLevel::Baseline),
            "restricted" => Some(PodSecurityLevel::Restricted),
            _ => None,
        }
    }
}

/// How [`PodSecurity`] decides (upstream's `PodSecurityConfiguration`):
/// the levels of namespaces without labels, and who and what is exempt.
///
/// ```
/// use orchestra_core::auth::admission::{PodSecurityConfig, PodSecurityLevel};
///
/// let config = PodSecurityConfig::default()
///     .enforce(PodSecurityLevel::Baseline)
///     .warn(PodSecurityLevel::Restricted)
///     .exempt_namespaces(["kube-system"])
///     .exempt_usernames(["system:serviceaccount:kube-system:replicaset-controller"]);
/// assert_eq!(config.audit, PodSecurityLevel::Privileged);
/// assert_eq!(config.exempt_namespaces, ["kube-system"]);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PodSecurityConfig {
    /// The enforced level of namespaces without an `enforce` label.
    pub enforce: PodSecurityLevel,
    /// The audited level of namespaces without an `audit` label.
    pub audit: PodSecurityLevel,
    /// The level warned about in namespaces without a `warn` label.
    pub warn: PodSecurityLevel,
    /// Users whose requests are not checked.
    pub exempt_usernames: Vec<String>,
    /// Namespaces whose pods are not checked.
    pub exempt_namespaces: Vec<String>,
    /// RuntimeClasses whose pods are not checked.
    pub exempt_runtime_classes: Vec<String>,
}

impl Default for PodSecurityConfig {
    /// Every level privileged, nothing exempt, as upstream.
    fn default() -> Self {
        PodSecurityConfig {
            enforce: PodSecurityLevel::Privileged,
            audit: PodSecurityLevel::Privileged,
            warn: PodSecurityLevel::Privileged,
            exempt_usernames: Vec::new(),
            exempt_namespaces: Vec::new(),
            exempt_runtime_classes: Vec::new(),
        }
    }
}

impl PodSecurityConfig {
    /// Sets [`enforce`](Self::enforce).
    pub fn enforce(mut self, level: PodSecurityLevel) -> Self {
        self.enforce = level;
        self
    }

    /// Sets [`audit`](Self::audit).
    pub fn audit(mut self, level: PodSecurityLevel) -> Self {
        self.audit = level;
        self
    }

    /// Sets [`warn`](Self::warn).
    pub fn warn(mut self, level: PodSecurityLevel) -> Self {
        self.warn = level;
        self
    }

    /// Sets [`exempt_usernames`](Self::exempt_usernames).
    pub fn exempt_usernames<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.exempt_usernames = names.into_iter().map(Into::into).collect();
        self
    }

    /// Sets [`exempt_namespaces`](Self::exempt_namespaces).
    pub fn exempt_namespaces<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.exempt_namespaces = names.into_iter().map(Into::into).collect();
        self
    }

    /// Sets [`exempt_runtime_classes`](Self::exempt_runtime_classes).
    pub fn exempt_runtime_classes<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.exempt_runtime_classes = names.into_iter().map(Into::into).collect();
        self
    }
}

/// The admission plugin of the Pod Security Standards, like upstream's
/// `PodSecurity`.
///
/// A namespace chooses its levels with the labels
/// `pod-security.kubernetes.io/enforce`, `.../warn` and `.../audit`
/// (`privileged`, `baseline` or `restricted`; a namespace stored with
/// another value counts as `restricted`), each with a `...-version` label (`latest` or `v1.N`,
/// shown in messages; every version is checked with the rules of the
/// Kubernetes version the server serves).
///
/// - `enforce`: pod creates, and updates that change the pod's spec or
///   annotations, that violate the level are refused with 403, e.g.
///   `pods "x" is forbidden: violates PodSecurity "restricted:latest":
///   allowPrivilegeEscalation != false (container "c" must set
///   securityContext.allowPrivilegeEscalation=false), ...`.
/// - `warn`: such writes get a warning (`would violate PodSecurity ...`,
///   a `Warning` header the API server sends); so do writes of workload
///   objects (Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs,
///   CronJobs, ReplicationControllers, PodTemplates) whose pod template
///   violates the `enforce` or `warn` level: templates are warned about,
///   never refused, as upstream does.
/// - Namespace creates and updates with invalid level or version labels
///   are refused with 422; an update that changes the `enforce` level
///   warns about the existing pods that violate it.
/// - `audit`: a pod write that violates the level is admitted (unless
///   `enforce` refuses it) with the audit annotation
///   `pod-security.kubernetes.io/audit-violations` (`would violate
///   PodSecurity ...`). Every checked pod write is annotated with
///   `pod-security.kubernetes.io/enforce-policy` (`baseline:latest`), an
///   exempt one with `pod-security.kubernetes.io/exempt` (`user`,
///   `namespace` or `runtimeClass`).
///
/// Requests of exempt users, in exempt namespaces, or for pods of exempt
/// RuntimeClasses are not checked.
///
/// ```
/// use std::sync::Arc;
/// use orchestra_core::auth::admission::{AdmissionChain, PodSecurity, PodSecurityConfig, StaticObjects};
///
/// let plugin = PodSecurity::new(Arc::new(StaticObjects::new()), PodSecurityConfig::default());
/// let chain = AdmissionChain::new().with(plugin);
/// assert_eq!(chain.names().collect::<Vec<_>>(), [PodSecurity::NAME]);
/// ```
#[derive(Clone)]
pub struct PodSecurity {
    objects: Arc<dyn ObjectReader>,
    config: PodSecurityConfig,
}

/// A level and the version it is named with, e.g. `restricted:latest`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Policy {
    level: PodSecurityLevel,
    version: String,
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.level.as_str(), self.version)
    }
}

/// The policies of one namespace.
struct Policies {
    enforce: Policy,
    warn: Policy,
    audit: Policy,
}

/// The audit annotations of pod writes: the enforced policy, what the
/// audit level would refuse, and why a pod was not checked.
const ENFORCE_POLICY_ANNOTATION: &str = "pod-security.kubernetes.io/enforce-policy";
const AUDIT_VIOLATIONS_ANNOTATION: &str = "pod-security.kubernetes.io/audit-violations";
const EXEMPT_ANNOTATION: &str = "pod-security.kubernetes.io/exempt";

/// Workload kinds whose pod template is warned about: (group, plural,
/// JSON pointer of the template).
const TEMPLATES: [(&str, &str, &str); 8] = [
    ("", "replicationcontrollers", "/spec/template"),
    ("", "podtemplates", "/template"),
    ("apps", "deployments", "/spec/template"),
    ("apps", "replicasets", "/spec/template"),
    ("apps", "statefulsets", "/spec/template"),
    ("apps", "daemonsets", "/spec/template"),
    ("batch", "jobs", "/spec/template"),
    ("batch", "cronjobs", "/spec/jobTemplate/spec/template"),
];

impl PodSecurity {
    /// The plugin's name.
    pub const NAME: &'static str = "PodSecurity";

    /// The plugin, reading namespaces (and, for namespace updates, their
    /// pods) from `objects`.
    pub fn new(objects: Arc<dyn ObjectReader>, config: PodSecurityConfig) -> PodSecurity {
        PodSecurity { objects, config }
    }

    /// The policy of `mode` a namespace's labels choose.
    /// The policy of one mode, from its level and version labels (e.g.
    /// `pod-security.kubernetes.io/enforce` and `...-version`).
    fn policy(labels: &Value, (level_label, version_label): (&str, &str), default: PodSecurityLevel) -> Policy {
        let level = match labels[level_label].as_str() {
            None => default,
            Some(value) => PodSecurityLevel::parse(value).unwrap_or(PodSecurityLevel::Restricted),
        };
        let version = match labels[version_label].as_str() {
            Some(version) if is_version(version) => version.to_owned(),
            _ => "latest".to_owned(),
        };
        Policy { level, version }
    }

    fn policies(&self, labels: &Value) -> Policies {
        const ENFORCE: (&str, &str) =
            ("pod-security.kubernetes.io/enforce", "pod-security.kubernetes.io/enforce-version");
        const WARN: (&str, &str) = ("pod-security.kubernetes.io/warn", "pod-security.kubernetes.io/warn-version");
        const AUDIT: (&str, &str) = ("pod-security.kubernetes.io/audit", "pod-security.kubernetes.io/audit-version");
        Policies {
            enforce: Self::policy(labels, ENFORCE, self.config.enforce),
            warn: Self::policy(labels, WARN, self.config.warn),
            audit: Self::policy(labels, AUDIT, self.config.audit),
        }
    }

    async fn namespace_policies(&self, namespace: &str) -> Result<Policies, ApiError> {
        let object = self.objects.get(NAMESPACES, None, namespace).await?;
        Ok(self.policies(object.as_ref().map_or(&Value::Null, |ns| &ns["metadata"]["labels"])))
    }

    fn exempt_runtime_class(&self, spec: &Value) -> bool {
        spec["runtimeClassName"]
            .as_str()
            .is_some_and(|class| self.config.exempt_runtime_classes.iter().any(|c| c == class))
    }

    /// Pods: enforce, then warn and audit.
    async fn check_pod(&self, request: &AdmissionRequest<'_>, namespace: &str, pod: &Value) -> Result<(), ApiError> {
        if !significant(pod, request.old_object) {
            return Ok(());
        }
        if self.exempt_runtime_class(&pod["spec"]) {
            return exempt(request, "runtimeClass");
        }
        let policies = self.namespace_policies(namespace).await?;
        annotate(request, ENFORCE_POLICY_ANNOTATION, policies.enforce.to_string());
        let enforced = violations(policies.enforce.level, &pod["metadata"], &pod["spec"]);
        let allowed = enforced.is_empty();
        let audited = match policies.audit == policies.enforce {
            true => enforced.clone(),
            false => violations(policies.audit.level, &pod["metadata"], &pod["spec"]),
        };
        if !audited.is_empty() {
            let violations =
                format!("would violate PodSecurity {:?}: {}", policies.audit.to_string(), details(&audited));
            annotate(request, AUDIT_VIOLATIONS_ANNOTATION, violations);
        }
        if policies.warn != policies.enforce || allowed {
            let warned = violations(policies.warn.level, &pod["metadata"], &pod["spec"]);
            if !warned.is_empty() {
                request.warn(format!(
                    "would violate PodSecurity {:?}: {}",
                    policies.warn.to_string(),
                    details(&warned)
                ));
            }
        }
        match allowed {
            true => Ok(()),
            false => Err(request.forbidden(format!(
                "violates PodSecurity {:?}: {}",
                policies.enforce.to_string(),
                details(&enforced)
            ))),
        }
    }

    /// Workload templates: warnings only, at the stricter of the enforce and warn levels.
    async fn check_template(
        &self,
        request: &AdmissionRequest<'_>,
        namespace: &str,
        pointer: &str,
    ) -> Result<(), ApiError> {
        let Some(template) = request.object.as_ref().and_then(|o| o.pointer(pointer)) else { return Ok(()) };
        let old = request.old_object.and_then(|o| o.pointer(pointer));
        if self.exempt_runtime_class(&template["spec"]) || !significant(template, old) {
            return Ok(());
        }
        let policies = self.namespace_policies(namespace).await?;
        let mut checked = Vec::new();
        for policy in [&policies.enforce, &policies.warn] {
            if checked.contains(&policy) {
                continue;
            }
            checked.push(policy);
            let found = violations(policy.level, &template["metadata"], &template["spec"]);
            if !found.is_empty() {
                request.warn(format!("would violate PodSecurity {:?}: {}", policy.to_string(), details(&found)));
            }
        }
        Ok(())
    }

    /// Namespace updates: warnings about the existing pods a new, stricter
    /// enforce level refuses.
    async fn check_namespace(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        let Some(new) = request.object.as_ref() else { return Ok(()) };
        let labels = &new["metadata"]["labels"];
        let changed =
            request.old_object.is_none_or(|old| policy_labels(&old["metadata"]["labels"]) != policy_labels(labels));
        let invalid = invalid_labels(labels);
        if changed && !invalid.is_empty() {
            let target = ErrorTarget {
                resource: "namespaces".into(),
                kind: "Namespace".into(),
                name: request.name.to_owned(),
                ..Default::default()
            };
            return Err(ApiError::invalid(&target, invalid));
        }
        let (Some(old), name) = (request.old_object, request.name) else { return Ok(()) };
        if self.config.exempt_namespaces.iter().any(|n| n == name)
            || self.config.exempt_usernames.contains(&request.user.name)
        {
            return Ok(());
        }
        let policy = self.policies(&new["metadata"]["labels"]).enforce;
        let old_policy = self.policies(&old["metadata"]["labels"]).enforce;
        if policy == old_policy || policy.level == PodSecurityLevel::Privileged {
            return Ok(());
        }
        // Pods with the same violations are reported together, under the first one's name.
        let mut groups: Vec<(String, usize, String)> = Vec::new();
        for pod in self.objects.list(PODS, Some(name)).await? {
            if self.exempt_runtime_class(&pod["spec"]) {
                continue;
            }
            let found = violations(policy.level, &pod["metadata"], &pod["spec"]);
            if found.is_empty() {
                continue;
            }
            let reasons = found.iter().map(|v| v.reason.as_str()).collect::<Vec<_>>().join(", ");
            match groups.iter_mut().find(|(_, _, r)| *r == reasons) {
                Some((_, others, _)) => *others += 1,
                None => groups.push((pod["metadata"]["name"].as_str().unwrap_or_default().to_owned(), 0, reasons)),
            }
        }
        if groups.is_empty() {
            return Ok(());
        }
        request.warn(format!(
            "existing pods in namespace {name:?} violate the new PodSecurity enforce level {:?}",
            policy.to_string()
        ));
        for (pod, others, reasons) in groups {
            match others {
                0 => request.warn(format!("{pod}: {reasons}")),
                1 => request.warn(format!("{pod} (and 1 other pod): {reasons}")),
                n => request.warn(format!("{pod} (and {n} other pods): {reasons}")),
            }
        }
        Ok(())
    }
}

#[async_trait]
impl AdmissionPlugin for PodSecurity {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn handles(&self, operation: Operation) -> bool {
        matches!(operation, Operation::Create | Operation::Update)
    }

    async fn validate(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        if request.writes("", "namespaces") {
            return self.check_namespace(request).await;
        }
        let pod = request.writes("", "pods");
        if self.config.exempt_usernames.contains(&request.user.name) {
            return if pod { exempt(request, "user") } else { Ok(()) };
        }
        let Some(namespace) = request.namespace.filter(|_| request.resource.namespaced) else { return Ok(()) };
        if self.config.exempt_namespaces.iter().any(|n| n == namespace) {
            return if pod { exempt(request, "namespace") } else { Ok(()) };
        }
        if request.writes("", "pods") {
            let Some(pod) = request.object.as_ref() else { return Ok(()) };
            return self.check_pod(request, namespace, pod).await;
        }
        let resource = &request.resource;
        match TEMPLATES.iter().find(|(group, plural, _)| resource.group == *group && resource.plural == *plural) {
            Some((group, plural, pointer)) if request.writes(group, plural) => {
                self.check_template(request, namespace, pointer).await
            }
            _ => Ok(()),
        }
    }
}

/// Records a pod write's audit annotation (the keys are well-formed, and
/// each is set once per write).
fn annotate(request: &AdmissionRequest<'_>, key: &str, value: String) {
    if let Err(error) = request.annotate(key, value) {
        tracing::warn!(%error, "PodSecurity could not annotate the audit event");
    }
}

/// A pod write not checked because `what` (user, namespace, runtimeClass)
/// is exempt: admitted, and so annotated.
fn exempt(request: &AdmissionRequest<'_>, what: &str) -> Result<(), ApiError> {
    annotate(request, EXEMPT_ANNOTATION, what.to_owned());
    Ok(())
}

/// `latest` or `v1.N` (no leading zero).
fn is_version(version: &str) -> bool {
    version == "latest"
        || version.strip_prefix("v1.").is_some_and(|minor| {
            !minor.is_empty() && minor.bytes().all(|b| b.is_ascii_digit()) && (minor == "0" || !minor.starts_with('0'))
        })
}

/// The `pod-security.kubernetes.io/` labels of a namespace.
fn policy_labels(labels: &Value) -> Vec<(&String, &Value)> {
    labels.as_object().into_iter().flatten().filter(|(key, _)| key.starts_with(LABEL_PREFIX)).collect()
}

/// The level and version labels whose values are not ones (upstream
/// refuses such namespaces with 422).
fn invalid_labels(labels: &Value) -> Vec<FieldError> {
    let mut invalid = Vec::new();
    for mode in ["enforce", "audit", "warn"] {
        let level = format!("{LABEL_PREFIX}{mode}");
        if let Some(value) = labels[&level].as_str().filter(|v| PodSecurityLevel::parse(v).is_none()) {
            invalid.push(FieldError::invalid(
                format!("metadata.labels[{level}]"),
                value,
                "must be one of privileged, baseline, restricted",
            ));
        }
        let version = format!("{level}-version");
        if let Some(value) = labels[&version].as_str().filter(|v| !is_version(v)) {
            invalid.push(FieldError::invalid(
                format!("metadata.labels[{version}]"),
                value,
                r#"must be "latest" or "v1.x""#,
            ));
        }
    }
    invalid
}

/// Whether a write of `pod` (or a pod template) over `old` needs a check:
/// creates do, updates that change the spec or the annotations do.
fn significant(pod: &Value, old: Option<&Value>) -> bool {
    old.is_none_or(|old| pod["spec"] != old["spec"] || pod["metadata"]["annotations"] != old["metadata"]["annotations"])
}

/// One failed check: upstream's `ForbiddenReason` and `ForbiddenDetail`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Violation {
    reason: String,
    detail: String,
}

fn violation(reason: impl Into<String>, detail: impl Into<String>) -> Option<Violation> {
    Some(Violation { reason: reason.into(), detail: detail.into() })
}

/// `reason (detail), reason (detail)`, as upstream joins failed checks.
fn details(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| match v.detail.is_empty() {
            true => v.reason.clone(),
            false => format!("{} ({})", v.reason, v.detail),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A check of the standards on a pod's metadata and spec.
type Check = fn(&Value, &Value) -> Option<Violation>;

/// The baseline checks, in upstream's order (by check id).
const BASELINE: [(&str, Check); 11] = [
    ("appArmorProfile", app_armor_profile),
    ("capabilities_baseline", capabilities_baseline),
    ("hostNamespaces", host_namespaces),
    ("hostPathVolumes", host_path_volumes),
    ("hostPorts", host_ports),
    ("privileged", privileged),
    ("procMount", proc_mount),
    ("seLinuxOptions", se_linux_options),
    ("seccompProfile_baseline", seccomp_baseline),
    ("sysctls", sysctls),
    ("windowsHostProcess", windows_host_process),
];

/// The restricted checks, in upstream's order, with the baseline check
/// each one replaces.
const RESTRICTED: [(&str, Option<&str>, Check); 6] = [
    ("allowPrivilegeEscalation", None, allow_privilege_escalation),
    ("capabilities_restricted", Some("capabilities_baseline"), capabilities_restricted),
    ("restrictedVolumes", Some("hostPathVolumes"), restricted_volumes),
    ("runAsNonRoot", None, run_as_non_root),
    ("runAsUser", None, run_as_user),
    ("seccompProfile_restricted", Some("seccompProfile_baseline"), seccomp_restricted),
];

/// The failed checks of `level` on a pod: baseline checks first, then the
/// restricted ones.
fn violations(level: PodSecurityLevel, metadata: &Value, spec: &Value) -> Vec<Violation> {
    let baseline = BASELINE.iter().filter(|(id, _)| {
        level == PodSecurityLevel::Baseline || !RESTRICTED.iter().any(|(_, replaced, _)| *replaced == Some(id))
    });
    let checks: Vec<Check> = match level {
        PodSecurityLevel::Privileged => return Vec::new(),
        PodSecurityLevel::Baseline => baseline.map(|(_, check)| *check).collect(),
        PodSecurityLevel::Restricted => {
            baseline.map(|(_, check)| *check).chain(RESTRICTED.iter().map(|(_, _, check)| *check)).collect()
        }
    };
    checks.iter().filter_map(|check| check(metadata, spec)).collect()
}

/// Every container of a pod: init containers, containers, ephemeral containers.
fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(move |field| spec[field].as_array().into_iter().flatten())
}

fn container_name(container: &Value) -> String {
    container["name"].as_str().unwrap_or_default().to_owned()
}

/// The names of the containers `bad` picks.
fn bad_containers(spec: &Value, mut bad: impl FnMut(&Value) -> bool) -> Vec<String> {
    containers(spec).filter(|c| bad(c)).map(container_name).collect()
}

fn pluralize<'a>(singular: &'a str, plural: &'a str, count: usize) -> &'a str {
    if count == 1 { singular } else { plural }
}

/// `"a", "b"`.
fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    items.iter().map(|item| format!("{:?}", item.as_ref())).collect::<Vec<_>>().join(", ")
}

/// `container "a"` or `containers "a", "b"`.
fn containers_phrase(names: &[String]) -> String {
    format!("{} {}", pluralize("container", "containers", names.len()), join_quote(names))
}

/// `securityContext.<path>` of a pod's spec or a container.
fn security<'a>(holder: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(&holder["securityContext"], |value, key| &value[key])
}

fn is_windows(spec: &Value) -> bool {
    spec["os"]["name"] == "windows"
}

const APP_ARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

fn app_armor_profile(metadata: &Value, spec: &Value) -> Option<Violation> {
    let allowed_type = |t: &Value| t.is_null() || t == "RuntimeDefault" || t == "Localhost";
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    if !allowed_type(security(spec, "appArmorProfile.type")) {
        setters.push("pod".to_owned());
        values.insert(security(spec, "appArmorProfile.type").as_str().unwrap_or_default().to_owned());
    }
    let bad = bad_containers(spec, |c| !allowed_type(security(c, "appArmorProfile.type")));
    for container in containers(spec).filter(|c| !allowed_type(security(c, "appArmorProfile.type"))) {
        values.insert(security(container, "appArmorProfile.type").as_str().unwrap_or_default().to_owned());
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    let mut values: Vec<String> = values.into_iter().collect();
    let mut annotations: Vec<String> = metadata["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(key, _)| key.starts_with(APP_ARMOR_ANNOTATION_PREFIX))
        .filter_map(|(key, value)| {
            let value = value.as_str().unwrap_or_default();
            let allowed = value.is_empty() || value == "runtime/default" || value.starts_with("localhost/");
            (!allowed).then(|| format!("{key}={value:?}"))
        })
        .collect();
    if !annotations.is_empty() {
        annotations.sort();
        setters.push(pluralize("annotation", "annotations", annotations.len()).to_owned());
        values.extend(annotations);
    }
    if setters.is_empty() {
        return None;
    }
    violation(
        pluralize("forbidden AppArmor profile", "forbidden AppArmor profiles", values.len()),
        format!("{} must not set AppArmor profile type to {}", setters.join(" and "), join_quote(&values)),
    )
}

/// The capabilities a container may add at the baseline level.
const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Containers adding capabilities `allowed` refuses, and those capabilities.
fn added_capabilities(spec: &Value, allowed: &[&str]) -> Option<String> {
    let mut added = BTreeSet::new();
    let bad = bad_containers(spec, |c| {
        let mut bad = false;
        for capability in security(c, "capabilities.add").as_array().into_iter().flatten() {
            let capability = capability.as_str().unwrap_or_default();
            if !allowed.contains(&capability) {
                added.insert(capability.to_owned());
                bad = true;
            }
        }
        bad
    });
    if bad.is_empty() {
        return None;
    }
    let added: Vec<String> = added.into_iter().collect();
    Some(format!(
        "{} must not include {} in securityContext.capabilities.add",
        containers_phrase(&bad),
        join_quote(&added)
    ))
}

fn capabilities_baseline(_: &Value, spec: &Value) -> Option<Violation> {
    violation("non-default capabilities", added_capabilities(spec, &BASELINE_CAPABILITIES)?)
}

fn host_namespaces(_: &Value, spec: &Value) -> Option<Violation> {
    let set: Vec<String> = ["hostNetwork", "hostPID", "hostIPC"]
        .iter()
        .filter(|f| spec[**f] == true)
        .map(|f| format!("{f}=true"))
        .collect();
    if set.is_empty() {
        return None;
    }
    violation("host namespaces", set.join(", "))
}

fn host_path_volumes(_: &Value, spec: &Value) -> Option<Violation> {
    let names: Vec<&str> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| !v["hostPath"].is_null())
        .map(|v| v["name"].as_str().unwrap_or_default())
        .collect();
    if names.is_empty() {
        return None;
    }
    violation("hostPath volumes", format!("{} {}", pluralize("volume", "volumes", names.len()), join_quote(&names)))
}

fn host_ports(_: &Value, spec: &Value) -> Option<Violation> {
    let mut ports = BTreeSet::new();
    let bad = bad_containers(spec, |c| {
        let mut bad = false;
        for port in c["ports"].as_array().into_iter().flatten() {
            if let Some(host_port) = port["hostPort"].as_i64().filter(|p| *p != 0) {
                ports.insert(host_port.to_string());
                bad = true;
            }
        }
        bad
    });
    if bad.is_empty() {
        return None;
    }
    let ports: Vec<String> = ports.into_iter().collect();
    violation(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

fn privileged(_: &Value, spec: &Value) -> Option<Violation> {
    let bad = bad_containers(spec, |c| *security(c, "privileged") == true);
    if bad.is_empty() {
        return None;
    }
    violation("privileged", format!("{} must not set securityContext.privileged=true", containers_phrase(&bad)))
}

fn proc_mount(_: &Value, spec: &Value) -> Option<Violation> {
    let mut values = BTreeSet::new();
    let bad = bad_containers(spec, |c| match security(c, "procMount").as_str() {
        None | Some("Default") => false,
        Some(other) => {
            values.insert(other.to_owned());
            true
        }
    });
    if bad.is_empty() {
        return None;
    }
    let values: Vec<String> = values.into_iter().collect();
    violation(
        "procMount",
        format!("{} must not set securityContext.procMount to {}", containers_phrase(&bad), join_quote(&values)),
    )
}

fn se_linux_options(_: &Value, spec: &Value) -> Option<Violation> {
    const ALLOWED_TYPES: [&str; 5] = ["", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"];
    let (mut types, mut user, mut role) = (BTreeSet::new(), false, false);
    let mut bad = |holder: &Value| {
        let options = security(holder, "seLinuxOptions");
        let mut valid = true;
        let kind = options["type"].as_str().unwrap_or_default();
        if !ALLOWED_TYPES.contains(&kind) {
            types.insert(kind.to_owned());
            valid = false;
        }
        if !options["user"].as_str().unwrap_or_default().is_empty() {
            user = true;
            valid = false;
        }
        if !options["role"].as_str().unwrap_or_default().is_empty() {
            role = true;
            valid = false;
        }
        !valid
    };
    let mut setters = Vec::new();
    if bad(spec) {
        setters.push("pod".to_owned());
    }
    let names: Vec<String> = containers(spec).filter(|c| bad(c)).map(container_name).collect();
    if !names.is_empty() {
        setters.push(containers_phrase(&names));
    }
    if setters.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !types.is_empty() {
        let types: Vec<String> = types.into_iter().collect();
        data.push(format!("{} {}", pluralize("type", "types", types.len()), join_quote(&types)));
    }
    if user {
        data.push("user may not be set".to_owned());
    }
    if role {
        data.push("role may not be set".to_owned());
    }
    violation(
        "seLinuxOptions",
        format!("{} set forbidden securityContext.seLinuxOptions: {}", setters.join(" and "), data.join("; ")),
    )
}

/// The seccomp profile types a pod or container sets that `allowed`
/// refuses: who sets them (`pod`, `containers "a"`) and the types; and the
/// containers that set none while the pod sets none either.
fn seccomp(spec: &Value, allowed: fn(&str) -> bool) -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut values = BTreeSet::new();
    let mut setters = Vec::new();
    let pod_set = match security(spec, "seccompProfile.type").as_str() {
        None => false,
        Some(kind) if allowed(kind) => true,
        Some(kind) => {
            setters.push("pod".to_owned());
            values.insert(kind.to_owned());
            false
        }
    };
    let (mut explicit, mut implicit) = (Vec::new(), Vec::new());
    for container in containers(spec) {
        match security(container, "seccompProfile.type").as_str() {
            None if !pod_set => implicit.push(container_name(container)),
            None => {}
            Some(kind) if allowed(kind) => {}
            Some(kind) => {
                explicit.push(container_name(container));
                values.insert(kind.to_owned());
            }
        }
    }
    if !explicit.is_empty() {
        setters.push(containers_phrase(&explicit));
    }
    (setters, values.into_iter().collect(), implicit)
}

/// `pod and container "c" must not set securityContext.seccompProfile.type to "Unconfined"`.
fn seccomp_setters(setters: &[String], values: &[String]) -> Option<Violation> {
    violation(
        "seccompProfile",
        format!("{} must not set securityContext.seccompProfile.type to {}", setters.join(" and "), join_quote(values)),
    )
}

fn seccomp_baseline(_: &Value, spec: &Value) -> Option<Violation> {
    let (setters, values, _) = seccomp(spec, |kind| kind != "Unconfined");
    if setters.is_empty() {
        return None;
    }
    seccomp_setters(&setters, &values)
}

fn seccomp_restricted(_: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    let (setters, values, implicit) = seccomp(spec, |kind| kind == "RuntimeDefault" || kind == "Localhost");
    if !setters.is_empty() {
        return seccomp_setters(&setters, &values);
    }
    if implicit.is_empty() {
        return None;
    }
    violation(
        "seccompProfile",
        format!(
            "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
            containers_phrase(&implicit)
        ),
    )
}

/// Sysctls any pod may set.
const SAFE_SYSCTLS: [&str; 12] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

fn sysctls(_: &Value, spec: &Value) -> Option<Violation> {
    let forbidden: Vec<&str> = security(spec, "sysctls")
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| s["name"].as_str().unwrap_or_default())
        .filter(|name| !SAFE_SYSCTLS.contains(name))
        .collect();
    if forbidden.is_empty() {
        return None;
    }
    violation("forbidden sysctls", forbidden.join(", "))
}

fn windows_host_process(_: &Value, spec: &Value) -> Option<Violation> {
    let host_process = |holder: &Value| *security(holder, "windowsOptions.hostProcess") == true;
    let mut setters = Vec::new();
    if host_process(spec) {
        setters.push("pod".to_owned());
    }
    let bad = bad_containers(spec, host_process);
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    violation(
        "hostProcess",
        format!("{} must not set securityContext.windowsOptions.hostProcess=true", setters.join(" and ")),
    )
}

fn allow_privilege_escalation(_: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    let bad = bad_containers(spec, |c| *security(c, "allowPrivilegeEscalation") != false);
    if bad.is_empty() {
        return None;
    }
    violation(
        "allowPrivilegeEscalation != false",
        format!("{} must set securityContext.allowPrivilegeEscalation=false", containers_phrase(&bad)),
    )
}

fn capabilities_restricted(_: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) {
        return None;
    }
    let drops_all =
        |c: &Value| security(c, "capabilities.drop").as_array().is_some_and(|d| d.iter().any(|c| c == "ALL"));
    let not_dropping = bad_containers(spec, |c| !drops_all(c));
    let mut details = Vec::new();
    if !not_dropping.is_empty() {
        details
            .push(format!("{} must set securityContext.capabilities.drop=[\"ALL\"]", containers_phrase(&not_dropping)));
    }
    details.extend(added_capabilities(spec, &["NET_BIND_SERVICE"]));
    if details.is_empty() {
        return None;
    }
    violation("unrestricted capabilities", details.join("; "))
}

/// The volume types the restricted level allows.
const ALLOWED_VOLUME_TYPES: [&str; 8] =
    ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"];

fn restricted_volumes(_: &Value, spec: &Value) -> Option<Violation> {
    let mut types = BTreeSet::new();
    let mut names = Vec::new();
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        let Some(source) = volume.as_object() else { continue };
        let kind = source.iter().find(|(key, value)| *key != "name" && !value.is_null()).map(|(key, _)| key.as_str());
        match kind {
            Some(kind) if ALLOWED_VOLUME_TYPES.contains(&kind) => {}
            other => {
                types.insert(other.unwrap_or("unknown").to_owned());
                names.push(volume["name"].as_str().unwrap_or_default().to_owned());
            }
        }
    }
    if names.is_empty() {
        return None;
    }
    let types: Vec<String> = types.into_iter().collect();
    violation(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", names.len()),
            join_quote(&names),
            pluralize("uses", "use", names.len()),
            pluralize("restricted volume type", "restricted volume types", types.len()),
            join_quote(&types)
        ),
    )
}

fn run_as_non_root(_: &Value, spec: &Value) -> Option<Violation> {
    let mut setters = Vec::new();
    let pod = security(spec, "runAsNonRoot");
    if *pod == false {
        setters.push("pod".to_owned());
    }
    let pod_non_root = *pod == true;
    let explicit = bad_containers(spec, |c| *security(c, "runAsNonRoot") == false);
    let implicit = bad_containers(spec, |c| security(c, "runAsNonRoot").is_null() && !pod_non_root);
    if !explicit.is_empty() {
        setters.push(containers_phrase(&explicit));
    }
    if !setters.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!("{} must not set securityContext.runAsNonRoot=false", setters.join(" and ")),
        );
    }
    if implicit.is_empty() {
        return None;
    }
    violation(
        "runAsNonRoot != true",
        format!("pod or {} must set securityContext.runAsNonRoot=true", containers_phrase(&implicit)),
    )
}

fn run_as_user(_: &Value, spec: &Value) -> Option<Violation> {
    let mut setters = Vec::new();
    if *security(spec, "runAsUser") == 0 {
        setters.push("pod".to_owned());
    }
    let bad = bad_containers(spec, |c| *security(c, "runAsUser") == 0);
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    violation("runAsUser=0", format!("{} must not set runAsUser=0", setters.join(" and ")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::ResourceInfo;
    use crate::auth::UserInfo;
    use crate::auth::admission::StaticObjects;
    use crate::auth::admission::testing::{admit, admit_noted, pods};

    /// A pod the restricted level admits, changed by `edit`.
    fn pod(edit: impl FnOnce(&mut Value)) -> Value {
        let mut pod = json!({
            "metadata": {"name": "p"},
            "spec": {
                "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "c",
                    "image": "busybox",
                    "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
                }],
            },
        });
        edit(&mut pod);
        pod
    }

    #[test]
    fn each_check_finds_its_violation() {
        #[rustfmt::skip]
        let cases: Vec<(Value, PodSecurityLevel, &str)> = vec![
            (pod(|_| {}), PodSecurityLevel::Restricted, ""),
            (json!({"metadata": {}, "spec": {"containers": [{"name": "c"}]}}), PodSecurityLevel::Baseline, ""),
            (json!({"metadata": {}, "spec": {"containers": [{"name": "c"}]}}), PodSecurityLevel::Restricted,
             r#"allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#),
            (pod(|p| { p["spec"]["hostNetwork"] = true.into(); p["spec"]["hostPID"] = true.into(); }), PodSecurityLevel::Baseline,
             "host namespaces (hostNetwork=true, hostPID=true)"),
            (pod(|p| p["spec"]["containers"][0]["securityContext"]["privileged"] = true.into()), PodSecurityLevel::Baseline,
             r#"privileged (container "c" must not set securityContext.privileged=true)"#),
            (pod(|p| p["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = json!(["SYS_TIME", "CHOWN", "NET_ADMIN"])), PodSecurityLevel::Baseline,
             r#"non-default capabilities (container "c" must not include "NET_ADMIN", "SYS_TIME" in securityContext.capabilities.add)"#),
            (pod(|p| p["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = json!(["CHOWN"])), PodSecurityLevel::Restricted,
             r#"unrestricted capabilities (container "c" must not include "CHOWN" in securityContext.capabilities.add)"#),
            (pod(|p| p["spec"]["volumes"] = json!([{"name": "root", "hostPath": {"path": "/"}}, {"name": "tmp", "emptyDir": {}}])), PodSecurityLevel::Baseline,
             r#"hostPath volumes (volume "root")"#),
            (pod(|p| p["spec"]["volumes"] = json!([{"name": "root", "hostPath": {"path": "/"}}, {"name": "share", "nfs": {}}, {"name": "tmp", "emptyDir": {}}])), PodSecurityLevel::Restricted,
             r#"restricted volume types (volumes "root", "share" use restricted volume types "hostPath", "nfs")"#),
            (pod(|p| p["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80, "hostPort": 8080}])), PodSecurityLevel::Baseline,
             r#"hostPort (container "c" uses hostPort 8080)"#),
            (pod(|p| p["metadata"]["annotations"] = json!({"container.apparmor.security.beta.kubernetes.io/c": "unconfined"})), PodSecurityLevel::Baseline,
             r#"forbidden AppArmor profile (annotation must not set AppArmor profile type to "container.apparmor.security.beta.kubernetes.io/c=\"unconfined\"")"#),
            (pod(|p| p["spec"]["securityContext"]["seLinuxOptions"] = json!({"type": "spc_t", "user": "root"})), PodSecurityLevel::Baseline,
             r#"seLinuxOptions (pod set forbidden securityContext.seLinuxOptions: type "spc_t"; user may not be set)"#),
            (pod(|p| p["spec"]["containers"][0]["securityContext"]["procMount"] = "Unmasked".into()), PodSecurityLevel::Baseline,
             r#"procMount (container "c" must not set securityContext.procMount to "Unmasked")"#),
            (pod(|p| p["spec"]["securityContext"]["seccompProfile"]["type"] = "Unconfined".into()), PodSecurityLevel::Baseline,
             r#"seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")"#),
            (pod(|p| p["spec"]["securityContext"]["seccompProfile"]["type"] = "Unconfined".into()), PodSecurityLevel::Restricted,
             r#"seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")"#),
            (pod(|p| p["spec"]["securityContext"]["sysctls"] = json!([{"name": "net.ipv4.tcp_syncookies", "value": "1"}, {"name": "kernel.msgmax", "value": "1"}])), PodSecurityLevel::Baseline,
             "forbidden sysctls (kernel.msgmax)"),
            (pod(|p| p["spec"]["containers"][0]["securityContext"]["windowsOptions"] = json!({"hostProcess": true})), PodSecurityLevel::Baseline,
             r#"hostProcess (container "c" must not set securityContext.windowsOptions.hostProcess=true)"#),
            (pod(|p| p["spec"]["securityContext"]["runAsNonRoot"] = false.into()), PodSecurityLevel::Restricted,
             "runAsNonRoot != true (pod must not set securityContext.runAsNonRoot=false)"),
            (pod(|p| p["spec"]["containers"][0]["securityContext"]["runAsUser"] = 0.into()), PodSecurityLevel::Restricted,
             r#"runAsUser=0 (container "c" must not set runAsUser=0)"#),
            // Two containers: init containers are listed first.
            (pod(|p| {
                p["spec"]["initContainers"] = json!([{"name": "init", "securityContext": {"privileged": true}}]);
                p["spec"]["containers"][0]["securityContext"]["privileged"] = true.into();
            }), PodSecurityLevel::Baseline,
             r#"privileged (containers "init", "c" must not set securityContext.privileged=true)"#),
        ];
        for (pod, level, expected) in cases {
            let found = violations(level, &pod["metadata"], &pod["spec"]);
            assert_eq!(details(&found), expected, "{level:?}: {pod}");
        }
    }

    fn namespace(labels: Value) -> Value {
        json!({"metadata": {"name": "apps", "labels": labels}})
    }

    fn plugin(labels: Value, config: PodSecurityConfig) -> PodSecurity {
        let objects = StaticObjects::new();
        objects.insert(NAMESPACES, namespace(labels));
        PodSecurity::new(Arc::new(objects), config)
    }

    /// Namespace labels, configuration, user and pod; the refusal's message
    /// or `Ok`, and the warnings.
    type Case<'a> = (Value, PodSecurityConfig, &'a UserInfo, &'a Value, Result<(), &'a str>, &'a [&'a str]);

    #[test]
    fn namespace_labels_choose_what_is_refused_and_warned() {
        let privileged = pod(|p| p["spec"]["containers"][0]["securityContext"]["privileged"] = true.into());
        let refused = r#"pods "p" is forbidden: violates PodSecurity "baseline:v1.30": privileged (container "c" must not set securityContext.privileged=true)"#;
        let warned = r#"would violate PodSecurity "restricted:latest": privileged (container "c" must not set securityContext.privileged=true)"#;
        let user = UserInfo::anonymous();
        let admin = UserInfo::new("admin", &[]);
        let config = || PodSecurityConfig::default().exempt_usernames(["admin"]).exempt_runtime_classes(["kata"]);
        let kata = pod(|p| {
            p["spec"]["containers"][0]["securityContext"]["privileged"] = true.into();
            p["spec"]["runtimeClassName"] = "kata".into();
        });
        let enforce = json!({"pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/enforce-version": "v1.30"});
        let warn = json!({"pod-security.kubernetes.io/warn": "restricted"});
        #[rustfmt::skip]
        let cases: [Case<'_>; 8] = [
            (json!({}), config(), &user, &privileged, Ok(()), &[]),
            (enforce.clone(), config(), &user, &privileged, Err(refused), &[]),
            (enforce.clone(), config(), &admin, &privileged, Ok(()), &[]),
            (enforce.clone(), config(), &user, &kata, Ok(()), &[]),
            (warn.clone(), config(), &user, &privileged, Ok(()), &[warned]),
            // The default level of unlabelled namespaces.
            (json!({}), config().enforce(PodSecurityLevel::Baseline), &user, &privileged,
             Err(r#"pods "p" is forbidden: violates PodSecurity "baseline:latest": privileged (container "c" must not set securityContext.privileged=true)"#), &[]),
            // An invalid level counts as restricted.
            (json!({"pod-security.kubernetes.io/enforce": "strict"}), config(), &user, &pod(|_| {}), Ok(()), &[]),
            (json!({"pod-security.kubernetes.io/enforce": "strict"}), config(), &user, &privileged,
             Err(r#"pods "p" is forbidden: violates PodSecurity "restricted:latest": privileged (container "c" must not set securityContext.privileged=true)"#), &[]),
        ];
        for (labels, config, user, object, expected, warnings) in cases {
            let plugin = plugin(labels.clone(), config);
            let (admitted, found) =
                admit(&plugin, Operation::Create, &pods(), Some("apps"), user, Some(object.clone()), None);
            assert_eq!(
                admitted.as_ref().map(|_| ()).map_err(|e| e.message.as_str()),
                expected,
                "{labels} {}",
                user.name
            );
            assert_eq!(found, warnings, "{labels}");
        }
        let exempt = plugin(enforce.clone(), config().exempt_namespaces(["apps"]));
        let (admitted, _) =
            admit(&exempt, Operation::Create, &pods(), Some("apps"), &user, Some(privileged.clone()), None);
        assert!(admitted.is_ok(), "exempt namespace");
        // Updates that leave the spec and annotations alone pass.
        let mut relabelled = privileged.clone();
        relabelled["metadata"]["labels"] = json!({"a": "b"});
        let enforcing = plugin(enforce, config());
        let (admitted, _) =
            admit(&enforcing, Operation::Update, &pods(), Some("apps"), &user, Some(relabelled), Some(&privileged));
        assert!(admitted.is_ok());
        let (admitted, _) = admit(
            &enforcing,
            Operation::Update,
            &pods(),
            Some("apps"),
            &user,
            Some(privileged.clone()),
            Some(&pod(|_| {})),
        );
        assert_eq!(admitted.unwrap_err().code, 403);
    }

    /// Namespace labels, configuration, user and pod; the audit annotations.
    type AnnotatedCase<'a> = (Value, PodSecurityConfig, &'a UserInfo, &'a Value, &'a [(&'a str, &'a str)]);

    #[test]
    fn pod_writes_are_annotated_for_the_audit_log() {
        let privileged = pod(|p| p["spec"]["containers"][0]["securityContext"]["privileged"] = true.into());
        let sandboxed = pod(|p| p["spec"]["runtimeClassName"] = "sandbox".into());
        let fine = pod(|_| {});
        let anyone = UserInfo::anonymous();
        let installer = UserInfo::new("installer", &[]);
        let config = || PodSecurityConfig::default().enforce(PodSecurityLevel::Baseline);
        let violation = r#"would violate PodSecurity "restricted:latest": privileged (container "c" must not set securityContext.privileged=true)"#;
        #[rustfmt::skip]
        let cases: [AnnotatedCase<'_>; 6] = [
            (json!({}), config(), &anyone, &fine, &[(ENFORCE_POLICY_ANNOTATION, "baseline:latest")]),
            (json!({"pod-security.kubernetes.io/enforce": "privileged", "pod-security.kubernetes.io/audit": "restricted"}),
             config(), &anyone, &privileged,
             &[(ENFORCE_POLICY_ANNOTATION, "privileged:latest"), (AUDIT_VIOLATIONS_ANNOTATION, violation)]),
            // Refused, and still annotated.
            (json!({"pod-security.kubernetes.io/audit": "restricted"}), config(), &anyone, &privileged,
             &[(ENFORCE_POLICY_ANNOTATION, "baseline:latest"), (AUDIT_VIOLATIONS_ANNOTATION, violation)]),
            (json!({}), config().exempt_usernames(["installer"]), &installer, &privileged,
             &[(EXEMPT_ANNOTATION, "user")]),
            (json!({}), config().exempt_namespaces(["apps"]), &anyone, &privileged, &[(EXEMPT_ANNOTATION, "namespace")]),
            (json!({}), config().exempt_runtime_classes(["sandbox"]), &anyone, &sandboxed,
             &[(EXEMPT_ANNOTATION, "runtimeClass")]),
        ];
        for (labels, config, user, object, expected) in cases {
            let plugin = plugin(labels.clone(), config);
            let (_, notes) =
                admit_noted(&plugin, Operation::Create, &pods(), Some("apps"), user, Some(object.clone()), None);
            let expected: Vec<(String, String)> =
                expected.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
            assert_eq!(notes.audit_annotations, expected, "{labels} {}", user.name);
        }
    }

    #[test]
    fn workload_templates_are_warned_about_not_refused() {
        let deployments = ResourceInfo::new("apps", "v1", "Deployment", "deployments", true);
        let cronjobs = ResourceInfo::new("batch", "v1", "CronJob", "cronjobs", true);
        let privileged = pod(|p| p["spec"]["containers"][0]["securityContext"]["privileged"] = true.into());
        let deployment = json!({"metadata": {"name": "d"}, "spec": {"template": privileged.clone()}});
        let cronjob = json!({"metadata": {"name": "j"}, "spec": {"jobTemplate": {"spec": {"template": privileged}}}});
        let labels =
            json!({"pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/warn": "restricted"});
        let plugin = plugin(labels, PodSecurityConfig::default());
        let user = UserInfo::anonymous();
        let detail = r#"privileged (container "c" must not set securityContext.privileged=true)"#;
        for (resource, object) in [(&deployments, deployment), (&cronjobs, cronjob)] {
            let (admitted, warnings) =
                admit(&plugin, Operation::Create, resource, Some("apps"), &user, Some(object), None);
            assert!(admitted.is_ok());
            assert_eq!(
                warnings,
                [
                    format!(r#"would violate PodSecurity "baseline:latest": {detail}"#),
                    format!(r#"would violate PodSecurity "restricted:latest": {detail}"#)
                ],
                "{}",
                resource.plural
            );
        }
    }

    #[test]
    fn a_stricter_namespace_warns_about_its_pods() {
        let objects = StaticObjects::new();
        let privileged = |name: &str| {
            let mut pod = pod(|p| p["spec"]["containers"][0]["securityContext"]["privileged"] = true.into());
            pod["metadata"] = json!({"name": name, "namespace": "apps"});
            pod
        };
        for name in ["a", "b", "c"] {
            objects.insert(PODS, privileged(name));
        }
        let mut host = privileged("d");
        host["spec"]["hostNetwork"] = true.into();
        objects.insert(PODS, host);
        let mut fine = pod(|_| {});
        fine["metadata"] = json!({"name": "e", "namespace": "apps"});
        objects.insert(PODS, fine);
        let plugin = PodSecurity::new(Arc::new(objects), PodSecurityConfig::default());
        let namespaces = ResourceInfo::new("", "v1", "Namespace", "namespaces", false);
        let old = namespace(json!({}));
        let new = namespace(json!({"pod-security.kubernetes.io/enforce": "baseline"}));
        let user = UserInfo::anonymous();
        let (admitted, warnings) =
            admit(&plugin, Operation::Update, &namespaces, None, &user, Some(new.clone()), Some(&old));
        assert!(admitted.is_ok());
        assert_eq!(
            warnings,
            [
                r#"existing pods in namespace "apps" violate the new PodSecurity enforce level "baseline:latest""#,
                "a (and 2 other pods): privileged",
                "d: host namespaces, privileged",
            ]
        );
        let (_, unchanged) = admit(&plugin, Operation::Update, &namespaces, None, &user, Some(new.clone()), Some(&new));
        assert!(unchanged.is_empty());
    }

    #[test]
    fn namespaces_need_valid_labels() {
        let plugin = PodSecurity::new(Arc::new(StaticObjects::new()), PodSecurityConfig::default());
        let namespaces = ResourceInfo::new("", "v1", "Namespace", "namespaces", false);
        let user = UserInfo::anonymous();
        let invalid = |labels: Value| namespace(labels);
        #[rustfmt::skip]
        let cases = [
            (json!({"pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/enforce-version": "v1.30"}), Ok(())),
            (json!({"pod-security.kubernetes.io/warn-version": "v1.0"}), Ok(())),
            (json!({"pod-security.kubernetes.io/enforce": "strict"}),
             Err(r#"Namespace "apps" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict": must be one of privileged, baseline, restricted"#)),
            (json!({"pod-security.kubernetes.io/audit-version": "v1.07"}),
             Err(r#"Namespace "apps" is invalid: metadata.labels[pod-security.kubernetes.io/audit-version]: Invalid value: "v1.07": must be "latest" or "v1.x""#)),
        ];
        for (labels, expected) in cases {
            let (admitted, _) =
                admit(&plugin, Operation::Create, &namespaces, None, &user, Some(invalid(labels.clone())), None);
            assert_eq!(admitted.as_ref().map(|_| ()).map_err(|e| e.message.as_str()), expected, "{labels}");
        }
        // An update that leaves invalid labels as they were is let through.
        let stored = namespace(json!({"pod-security.kubernetes.io/enforce": "strict"}));
        let mut relabelled = stored.clone();
        relabelled["metadata"]["labels"]["team"] = "a".into();
        let (admitted, _) =
            admit(&plugin, Operation::Update, &namespaces, None, &user, Some(relabelled), Some(&stored));
        assert!(admitted.is_ok());
    }
}
