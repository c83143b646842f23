//! Admission: plugins that mutate, then validate, every write, the chain
//! that runs them, and the built-in plugins, one per file.

use std::future::Future;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;

use super::UserInfo;
use crate::api::{ApiError, ErrorTarget, ResourceInfo};

mod certificate_approval;
mod certificate_signing;
mod certificate_subject_restriction;
mod default_storage_class;
mod default_toleration_seconds;
mod limit_ranger;
mod namespace_lifecycle;
mod node_restriction;
mod objects;
mod pod_security;
mod priority;
mod resource_quota;
mod service_account;
pub(crate) mod webhook;

pub use certificate_approval::CertificateApproval;
pub use certificate_signing::CertificateSigning;
pub use certificate_subject_restriction::CertificateSubjectRestriction;
pub use default_storage_class::DefaultStorageClass;
pub use default_toleration_seconds::DefaultTolerationSeconds;
pub use limit_ranger::LimitRanger;
pub(crate) use namespace_lifecycle::namespace_target;
pub use namespace_lifecycle::{NamespaceLifecycle, NamespaceLister, NamespacePhase};
pub use node_restriction::NodeRestriction;
pub use objects::{ObjectReader, ResourceRef, StaticObjects};
pub use pod_security::{PodSecurity, PodSecurityConfig, PodSecurityLevel};
pub use priority::Priority;
pub use resource_quota::{MemoryQuotas, QuotaAccessor, QuotaUpdateError, ResourceQuota};
pub use service_account::{
    DEFAULT_SERVICE_ACCOUNT, ENFORCE_MOUNTABLE_SECRETS_ANNOTATION, ROOT_CA_CONFIG_MAP, ServiceAccount,
    TOKEN_EXPIRATION_SECONDS, TOKEN_MOUNT_PATH, TOKEN_VOLUME_PREFIX,
};
pub use webhook::{MutatingAdmissionWebhook, ValidatingAdmissionWebhook, WebhookClientAuth};

/// The kind of write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// POST.
    Create,
    /// PUT or PATCH.
    Update,
    /// DELETE.
    Delete,
}

/// One write as admission plugins see it.
///
/// The request borrows what the server already holds (the resource, the
/// names, the user, the stored object); only the object being written is
/// owned, so that mutating plugins can change it.
#[derive(Debug, Clone)]
pub struct AdmissionRequest<'a> {
    /// The operation.
    pub operation: Operation,
    /// The resource written.
    pub resource: &'a ResourceInfo,
    /// The subresource, if any.
    pub subresource: Option<&'a str>,
    /// Namespace, if any.
    pub namespace: Option<&'a str>,
    /// Object name.
    pub name: &'a str,
    /// The object after the write (`None` for deletes). Mutating plugins change it.
    pub object: Option<Value>,
    /// The object before the write (`None` for creates).
    pub old_object: Option<&'a Value>,
    /// Who writes.
    pub user: &'a UserInfo,
    /// True for `dryRun=All`: plugins must have no side effects.
    pub dry_run: bool,
}

impl AdmissionRequest<'_> {
    /// True if the request writes the main resource `group`/`plural`
    /// (not one of its subresources), e.g. `("", "pods")`.
    pub fn writes(&self, group: &str, plural: &str) -> bool {
        self.subresource.is_none() && self.resource.group == group && self.resource.plural == plural
    }

    /// The 403 upstream's admission plugins answer with (`NewForbidden`):
    /// `pods "web" is forbidden: <reason>`, about this request's object.
    pub fn forbidden(&self, reason: impl std::fmt::Display) -> ApiError {
        let target = ErrorTarget {
            group: self.resource.group.clone(),
            resource: self.resource.plural.clone(),
            kind: self.resource.kind.clone(),
            name: self.name.to_owned(),
        };
        ApiError::forbidden_object(&target, reason)
    }

    /// Adds a warning for the client about this write, whether it is
    /// admitted or not (upstream's `warning.AddWarning`). The
    /// [`ApiServer`](crate::server::ApiServer) sends each distinct warning
    /// as a `Warning: 299 - "<text>"` response header, which kubectl
    /// prints; outside [`collect_notes`] (a chain run by other code) the
    /// warning is dropped.
    pub fn warn(&self, text: impl Into<String>) {
        let _outside_a_collecting_task = NOTES.try_with(|notes| {
            let text = text.into();
            let mut notes = notes.lock().unwrap_or_else(|e| e.into_inner());
            if !notes.warnings.contains(&text) {
                notes.warnings.push(text);
            }
        });
    }

    /// Adds an annotation to the request's audit events (upstream's
    /// `AddAnnotation`): `key` is a qualified name `<prefix>/<name>`, such
    /// as `pod-security.kubernetes.io/enforce-policy`. A key set once keeps
    /// its first value, and a key of another form is refused; either way
    /// the request goes on. The [`ApiServer`](crate::server::ApiServer)
    /// writes the annotations into the request's audit events; outside
    /// [`collect_notes`] they are dropped.
    pub fn annotate(&self, key: impl Into<String>, value: impl Into<String>) -> Result<(), String> {
        let key = key.into();
        if !is_qualified_key(&key) {
            return Err(format!("audit annotation key {key:?} is not of the form <prefix>/<name>"));
        }
        let value = value.into();
        NOTES
            .try_with(|notes| {
                let mut notes = notes.lock().unwrap_or_else(|e| e.into_inner());
                match notes.audit_annotations.iter().find(|(k, _)| *k == key) {
                    Some((_, set)) if *set != value => {
                        Err(format!("audit annotation {key:?} is already set to {set:?}; it is not overwritten"))
                    }
                    Some(_) => Ok(()),
                    None => {
                        notes.audit_annotations.push((key, value));
                        Ok(())
                    }
                }
            })
            .unwrap_or(Ok(()))
    }
}

/// `<prefix>/<name>`: a DNS subdomain, then a name of at most 63
/// alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric.
fn is_qualified_key(key: &str) -> bool {
    let Some((prefix, name)) = key.split_once('/') else { return false };
    let alphanumeric_ends = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_alphanumeric()) && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    crate::api::meta::validate_subdomain("key", prefix).is_empty()
        && !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && alphanumeric_ends(name)
}

/// What admission plugins noted about a request besides their decision:
/// warnings for the client and annotations for the audit log, each in the
/// order they were added.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdmissionNotes {
    /// Distinct warnings ([`AdmissionRequest::warn`]).
    pub warnings: Vec<String>,
    /// Audit annotations, by key ([`AdmissionRequest::annotate`]).
    pub audit_annotations: Vec<(String, String)>,
}

tokio::task_local! {
    /// The notes of the request the current task serves.
    static NOTES: Arc<Mutex<AdmissionNotes>>;
}

/// Runs `future` (a request being served, or an [`AdmissionChain::admit`])
/// and returns its output with what admission plugins noted while it ran:
/// the warnings they added with [`AdmissionRequest::warn`] and the audit
/// annotations of [`AdmissionRequest::annotate`].
///
/// ```
/// use orchestra_core::api::ResourceInfo;
/// use orchestra_core::auth::UserInfo;
/// use orchestra_core::auth::admission::{AdmissionRequest, Operation, collect_notes};
///
/// let pods = ResourceInfo::new("", "v1", "Pod", "pods", true);
/// let user = UserInfo::anonymous();
/// let request = AdmissionRequest {
///     operation: Operation::Create,
///     resource: &pods,
///     subresource: None,
///     namespace: Some("default"),
///     name: "web",
///     object: None,
///     old_object: None,
///     user: &user,
///     dry_run: false,
/// };
/// let (annotated, notes) = futures::executor::block_on(collect_notes(async move {
///     request.warn("deprecated");
///     request.annotate("example.com/checked", "yes")
/// }));
/// assert_eq!(annotated, Ok(()));
/// assert_eq!(notes.warnings, ["deprecated"]);
/// assert_eq!(notes.audit_annotations, [("example.com/checked".to_owned(), "yes".to_owned())]);
/// ```
pub async fn collect_notes<F: Future>(future: F) -> (F::Output, AdmissionNotes) {
    let sink = Arc::new(Mutex::new(AdmissionNotes::default()));
    let output = NOTES.scope(sink.clone(), future).await;
    let notes = std::mem::take(&mut *sink.lock().unwrap_or_else(|e| e.into_inner()));
    (output, notes)
}

/// [`collect_notes`], keeping the warnings only.
pub async fn collect_warnings<F: Future>(future: F) -> (F::Output, Vec<String>) {
    let (output, notes) = collect_notes(future).await;
    (output, notes.warnings)
}

/// A plugin of the admission chain: it sees every write it
/// [handles](AdmissionPlugin::handles), first in the mutating phase, where
/// it may change the object, then in the validating phase, where it may
/// only accept or refuse. Both phases default to accepting; a refusal is
/// the [`ApiError`] the client receives.
///
/// ```
/// use async_trait::async_trait;
/// use orchestra_core::api::ApiError;
/// use orchestra_core::auth::admission::{AdmissionChain, AdmissionPlugin, AdmissionRequest, Operation};
///
/// /// Labels every new object with its creator's name.
/// struct LabelCreator;
///
/// #[async_trait]
/// impl AdmissionPlugin for LabelCreator {
///     fn name(&self) -> &str {
///         "LabelCreator"
///     }
///
///     fn handles(&self, operation: Operation) -> bool {
///         operation == Operation::Create
///     }
///
///     async fn mutate(&self, request: &mut AdmissionRequest<'_>) -> Result<(), ApiError> {
///         if let Some(object) = request.object.as_mut() {
///             object["metadata"]["labels"]["created-by"] = request.user.name.clone().into();
///         }
///         Ok(())
///     }
///
///     async fn validate(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
///         match request.name.starts_with("tmp-") {
///             true => Err(ApiError::forbidden("LabelCreator refuses temporary objects")),
///             false => Ok(()),
///         }
///     }
/// }
///
/// let chain = AdmissionChain::new().with(LabelCreator);
/// assert!(chain.handles(Operation::Create));
/// assert!(!chain.handles(Operation::Delete));
/// ```
#[async_trait]
pub trait AdmissionPlugin: Send + Sync {
    /// The plugin's name, e.g. `NamespaceLifecycle`.
    fn name(&self) -> &str;

    /// Whether the plugin sees writes of kind `operation` at all (upstream's
    /// `Handles`); all of them by default. Writes no plugin of a chain
    /// handles skip admission entirely.
    fn handles(&self, operation: Operation) -> bool {
        let _ = operation;
        true
    }

    /// Mutating phase: may change `request.object`.
    async fn mutate(&self, request: &mut AdmissionRequest<'_>) -> Result<(), ApiError> {
        let _ = request;
        Ok(())
    }

    /// Validating phase: may only accept or refuse.
    async fn validate(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        let _ = request;
        Ok(())
    }
}

/// Copies into `pod` the `spec` fields of `old` that `pod` leaves unset: an
/// update keeps what admission set at the create (the ServiceAccount and
/// Priority plugins' fields).
pub(crate) fn keep_unset_spec_fields(pod: &mut Value, old: &Value, fields: &[&str]) {
    for field in fields {
        if pod["spec"][*field].is_null() && !old["spec"][*field].is_null() {
            pod["spec"][*field] = old["spec"][*field].clone();
        }
    }
}

/// Runs every plugin's mutating phase in order, then every validating phase.
///
/// The chain an [`ApiServer`](crate::server::ApiServer) runs is set with
/// [`ApiServerBuilder::admission`](crate::server::ApiServerBuilder::admission);
/// the default one holds the server's
/// [`NamespaceLifecycle`].
#[derive(Clone, Default)]
pub struct AdmissionChain {
    plugins: Vec<Arc<dyn AdmissionPlugin>>,
}

impl AdmissionChain {
    /// An empty chain (admits everything).
    pub fn new() -> AdmissionChain {
        AdmissionChain::default()
    }

    /// Adds a plugin at the end.
    pub fn with(mut self, plugin: impl AdmissionPlugin + 'static) -> AdmissionChain {
        self.plugins.push(Arc::new(plugin));
        self
    }

    /// Adds every plugin of `other` at the end, in its order.
    pub fn then(mut self, other: AdmissionChain) -> AdmissionChain {
        self.plugins.extend(other.plugins);
        self
    }

    /// Admits (possibly mutating) or refuses a write: the mutating phase
    /// of every plugin that handles its operation, in order, then their
    /// validating phase.
    pub async fn admit(&self, request: &mut AdmissionRequest<'_>) -> Result<(), ApiError> {
        let operation = request.operation;
        for plugin in self.plugins.iter().filter(|p| p.handles(operation)) {
            plugin.mutate(request).await?;
        }
        for plugin in self.plugins.iter().filter(|p| p.handles(operation)) {
            plugin.validate(request).await?;
        }
        Ok(())
    }

    /// True if some plugin handles writes of kind `operation`: otherwise
    /// [`admit`](Self::admit) has nothing to do for them.
    pub fn handles(&self, operation: Operation) -> bool {
        self.plugins.iter().any(|p| p.handles(operation))
    }

    /// The chain without the plugins named in `names` (upstream's
    /// `--disable-admission-plugins`).
    ///
    /// ```
    /// use orchestra_core::auth::admission::{AdmissionChain, DefaultTolerationSeconds};
    ///
    /// let chain = AdmissionChain::new().with(DefaultTolerationSeconds::new());
    /// assert!(chain.without(&["DefaultTolerationSeconds"]).is_empty());
    /// ```
    pub fn without(mut self, names: &[impl AsRef<str>]) -> AdmissionChain {
        self.plugins.retain(|plugin| !names.iter().any(|name| name.as_ref() == plugin.name()));
        self
    }

    /// The names of the plugins, in the order they run.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.plugins.iter().map(|p| p.name())
    }

    /// True if no plugin is configured.
    pub fn is_empty(&self) -> bool {
        self.plugins.is_empty()
    }
}

/// What the built-in plugins' tests share: one write through one plugin.
#[cfg(test)]
pub(crate) mod testing {
    use serde_json::Value;

    use super::{AdmissionNotes, AdmissionPlugin, AdmissionRequest, Operation, collect_notes};
    use crate::api::{ApiError, ResourceInfo};
    use crate::auth::UserInfo;

    /// core/v1 pods, as the plugins see them.
    pub fn pods() -> ResourceInfo {
        ResourceInfo::new("", "v1", "Pod", "pods", true)
    }

    /// The outcome of one write: the object as admitted, or the refusal;
    /// and the warnings.
    pub type Admitted = (Result<Option<Value>, ApiError>, Vec<String>);

    /// Runs `plugin`'s mutating then validating phase on one write of
    /// `object` (named by its `metadata.name`) in `namespace` by `user`.
    pub fn admit(
        plugin: &dyn AdmissionPlugin,
        operation: Operation,
        resource: &ResourceInfo,
        namespace: Option<&str>,
        user: &UserInfo,
        object: Option<Value>,
        old_object: Option<&Value>,
    ) -> Admitted {
        let (admitted, notes) = admit_noted(plugin, operation, resource, namespace, user, object, old_object);
        (admitted, notes.warnings)
    }

    /// [`admit`], with everything the plugin noted (audit annotations too).
    pub fn admit_noted(
        plugin: &dyn AdmissionPlugin,
        operation: Operation,
        resource: &ResourceInfo,
        namespace: Option<&str>,
        user: &UserInfo,
        object: Option<Value>,
        old_object: Option<&Value>,
    ) -> (Result<Option<Value>, ApiError>, AdmissionNotes) {
        let name = object.as_ref().or(old_object).and_then(|o| o["metadata"]["name"].as_str()).unwrap_or("");
        let mut request = AdmissionRequest {
            operation,
            resource,
            subresource: None,
            namespace,
            name,
            object: object.clone(),
            old_object,
            user,
            dry_run: false,
        };
        futures::executor::block_on(collect_notes(async move {
            if plugin.handles(operation) {
                plugin.mutate(&mut request).await?;
                plugin.validate(&request).await?;
            }
            Ok(request.object)
        }))
    }
}
