//! The resource registry: every kind the API server serves.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::{
    admissionregistration::v1 as admission, apps::v1 as apps, batch::v1 as batch, coordination::v1 as coordination,
    core::v1 as core, discovery::v1 as discovery, events::v1 as events, policy::v1 as policy, rbac::v1 as rbac,
    scheduling::v1 as scheduling, storage::v1 as storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;

use super::resource::ResourceInfo;
use super::validation;

/// How long an Event is kept after its last write (upstream's `--event-ttl` default).
pub const EVENT_TTL: std::time::Duration = std::time::Duration::from_secs(60 * 60);

/// Kinds by group, version and plural, in registration order per group.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    resources: BTreeMap<(String, String, String), Arc<ResourceInfo>>,
    /// The same kinds hashed, for [`get`](Self::get) on every request.
    index: super::triple::TripleHashMap<Arc<ResourceInfo>>,
    /// Group names in the order they were first registered (discovery order).
    groups: Vec<String>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Every built-in kind of the reference system.
    pub fn builtin() -> Registry {
        let mut r = Registry::new();
        // core/v1
        r.register(
            ResourceInfo::of::<core::Pod>()
                .validated_by(validation::pod)
                .short_names(&["po"])
                .in_all()
                .with_status()
                .with_subresource("binding", "", "v1", "Binding", &["create"])
                .with_subresource("eviction", "policy", "v1", "Eviction", &["create"])
                .with_subresource("log", "", "v1", "Pod", &["get"])
                .with_subresource("exec", "", "v1", "PodExecOptions", &["create", "get"]),
        );
        r.register(ResourceInfo::of::<core::Node>().short_names(&["no"]).with_status());
        r.register(ResourceInfo::of::<core::Service>().short_names(&["svc"]).in_all().with_status());
        r.register(ResourceInfo::of::<core::Endpoints>().short_names(&["ep"]));
        r.register(ResourceInfo::of::<core::Namespace>().short_names(&["ns"]).with_status().with_subresource(
            "finalize",
            "",
            "v1",
            "Namespace",
            &["update"],
        ));
        r.register(ResourceInfo::of::<core::ConfigMap>().short_names(&["cm"]));
        r.register(ResourceInfo::of::<core::Secret>());
        r.register(ResourceInfo::of::<core::ServiceAccount>().short_names(&["sa"]).with_subresource(
            "token",
            "authentication.k8s.io",
            "v1",
            "TokenRequest",
            &["create"],
        ));
        r.register(ResourceInfo::of::<core::Event>().short_names(&["ev"]).expiring_after(EVENT_TTL));
        r.register(ResourceInfo::of::<core::PersistentVolume>().short_names(&["pv"]).with_status());
        r.register(ResourceInfo::of::<core::PersistentVolumeClaim>().short_names(&["pvc"]).with_status());
        r.register(ResourceInfo::of::<core::LimitRange>().short_names(&["limits"]));
        r.register(ResourceInfo::of::<core::ResourceQuota>().short_names(&["quota"]).with_status());
        r.register(
            ResourceInfo::of::<core::ReplicationController>().short_names(&["rc"]).in_all().with_status().with_scale(),
        );
        // apps/v1
        r.register(
            ResourceInfo::of::<apps::Deployment>()
                .validated_by(validation::workload)
                .short_names(&["deploy"])
                .in_all()
                .with_status()
                .with_scale(),
        );
        r.register(
            ResourceInfo::of::<apps::ReplicaSet>()
                .validated_by(validation::workload)
                .short_names(&["rs"])
                .in_all()
                .with_status()
                .with_scale(),
        );
        r.register(
            ResourceInfo::of::<apps::StatefulSet>()
                .validated_by(validation::workload)
                .short_names(&["sts"])
                .in_all()
                .with_status()
                .with_scale(),
        );
        r.register(
            ResourceInfo::of::<apps::DaemonSet>()
                .validated_by(validation::workload)
                .short_names(&["ds"])
                .in_all()
                .with_status(),
        );
        r.register(ResourceInfo::of::<apps::ControllerRevision>());
        // batch/v1
        r.register(ResourceInfo::of::<batch::Job>().validated_by(validation::job).in_all().with_status());
        r.register(ResourceInfo::of::<batch::CronJob>().short_names(&["cj"]).in_all().with_status());
        // the other groups
        r.register(ResourceInfo::of::<discovery::EndpointSlice>());
        r.register(ResourceInfo::of::<coordination::Lease>());
        r.register(ResourceInfo::of::<rbac::Role>());
        r.register(ResourceInfo::of::<rbac::RoleBinding>());
        r.register(ResourceInfo::of::<rbac::ClusterRole>());
        r.register(ResourceInfo::of::<rbac::ClusterRoleBinding>());
        r.register(ResourceInfo::of::<storage::StorageClass>().short_names(&["sc"]));
        r.register(ResourceInfo::of::<scheduling::PriorityClass>().short_names(&["pc"]));
        r.register(ResourceInfo::of::<policy::PodDisruptionBudget>().short_names(&["pdb"]).with_status());
        r.register(
            ResourceInfo::of::<events::Event>()
                .short_names(&["ev"])
                .stored_as(super::conversion::EVENTS)
                .expiring_after(EVENT_TTL),
        );
        r.register(
            ResourceInfo::of::<admission::MutatingWebhookConfiguration>()
                .validated_by(validation::mutating_webhook_configuration),
        );
        r.register(
            ResourceInfo::of::<admission::ValidatingWebhookConfiguration>()
                .validated_by(validation::validating_webhook_configuration),
        );
        r.register(
            ResourceInfo::of::<apiextensions::CustomResourceDefinition>().short_names(&["crd", "crds"]).with_status(),
        );
        // certificates.k8s.io/v1: `approval` is where `kubectl certificate
        // approve|deny` writes; requests are checked with the TLS stack.
        #[cfg(feature = "tls")]
        r.register(
            ResourceInfo::of::<k8s_openapi::api::certificates::v1::CertificateSigningRequest>()
                .validated_by(super::certificates::validate)
                .short_names(&["csr"])
                .with_status()
                .with_subresource(
                    "approval",
                    "certificates.k8s.io",
                    "v1",
                    "CertificateSigningRequest",
                    &["get", "patch", "update"],
                ),
        );
        // authorization.k8s.io and authentication.k8s.io: create-only reviews.
        for review in super::review::resources() {
            r.register(review);
        }
        r
    }

    /// Adds (or replaces) a kind.
    pub fn register(&mut self, info: ResourceInfo) {
        if !self.groups.contains(&info.group) {
            self.groups.push(info.group.clone());
        }
        let key = (info.group.clone(), info.version.clone(), info.plural.clone());
        let info = Arc::new(info);
        self.index.insert(key.clone(), info.clone());
        self.resources.insert(key, info);
    }

    /// Removes a kind; returns it if it was registered.
    pub fn unregister(&mut self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        let key = (group.to_owned(), version.to_owned(), plural.to_owned());
        self.index.remove(&key);
        let removed = self.resources.remove(&key);
        if removed.is_some() && !self.resources.keys().any(|(g, _, _)| g == group) {
            self.groups.retain(|g| g != group);
        }
        removed
    }

    /// The kind served at `group`/`version`/`plural`.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.index.get(super::triple::key(&(group, version, plural))).cloned()
    }

    /// The kind with this group, version and kind name.
    pub fn by_kind(&self, group: &str, version: &str, kind: &str) -> Option<Arc<ResourceInfo>> {
        self.resources.values().find(|r| r.group == group && r.version == version && r.kind == kind).cloned()
    }

    /// Group names, core ("") first, then in registration order.
    pub fn groups(&self) -> impl Iterator<Item = &str> {
        self.groups.iter().map(String::as_str)
    }

    /// The versions served for `group`, preferred first.
    pub fn versions(&self, group: &str) -> Vec<String> {
        let mut versions: Vec<String> = Vec::new();
        for (g, v, _) in self.resources.keys() {
            if g == group && !versions.contains(v) {
                versions.push(v.clone());
            }
        }
        versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        versions
    }

    /// True if at least one kind is served at `group`/`version`.
    pub fn serves(&self, group: &str, version: &str) -> bool {
        // The first key from (group, version, "") on, in key order.
        let from = (group, version, "");
        let from = super::triple::key(&from);
        self.resources
            .range::<dyn super::triple::Triple, _>((std::ops::Bound::Included(from), std::ops::Bound::Unbounded))
            .next()
            .is_some_and(|((g, v, _), _)| g == group && v == version)
    }

    /// The kinds of one group version, sorted by plural.
    pub fn resources(&self, group: &str, version: &str) -> Vec<Arc<ResourceInfo>> {
        self.resources.values().filter(|r| r.group == group && r.version == version).cloned().collect()
    }
}

/// Kubernetes version ordering: GA > beta > alpha, then by number.
fn version_priority(version: &str) -> (u8, u32, u32) {
    let Some(rest) = version.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let major = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    let (stage, minor) = if tail.is_empty() {
        (3, 0)
    } else if let Some(n) = tail.strip_prefix("beta") {
        (2, n.parse().unwrap_or(0))
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n.parse().unwrap_or(0))
    } else {
        (0, 0)
    };
    (stage, major, minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_exactly_the_registered_group_versions() {
        let r = Registry::builtin();
        for (group, version) in [("", "v1"), ("apps", "v1"), ("batch", "v1"), ("events.k8s.io", "v1")] {
            assert!(r.serves(group, version), "{group}/{version}");
        }
        // Neighbours in key order, prefixes and extensions are not served.
        for (group, version) in [("", "v"), ("", "v2"), ("app", "v1"), ("apps", "v1beta1"), ("apps", ""), ("zzz", "v1")]
        {
            assert!(!r.serves(group, version), "{group}/{version}");
        }
    }

    #[test]
    fn builtin_kinds_are_served() {
        let r = Registry::builtin();
        assert_eq!(r.get("", "v1", "pods").unwrap().kind, "Pod");
        assert!(r.get("apps", "v1", "deployments").unwrap().has_subresource("scale"));
        assert_eq!(r.by_kind("rbac.authorization.k8s.io", "v1", "ClusterRole").unwrap().plural, "clusterroles");
        assert!(!r.get("apiextensions.k8s.io", "v1", "customresourcedefinitions").unwrap().namespaced);
        assert_eq!(r.groups().next(), Some(""));
        let csr = r.get("certificates.k8s.io", "v1", "certificatesigningrequests").unwrap();
        assert!(!csr.namespaced && csr.has_subresource("approval") && csr.has_subresource("status"));
        assert!(r.groups().any(|g| g == "events.k8s.io"));
    }

    #[test]
    fn versions_prefer_ga() {
        let mut r = Registry::new();
        for v in ["v1alpha1", "v2beta1", "v1", "v2"] {
            r.register(ResourceInfo::new("example.com", v, "Widget", "widgets", true));
        }
        assert_eq!(r.versions("example.com"), ["v2", "v1", "v2beta1", "v1alpha1"]);
        r.unregister("example.com", "v1", "widgets");
        assert_eq!(r.versions("example.com"), ["v2", "v2beta1", "v1alpha1"]);
    }
}
