//! Admission webhooks: what [`MutatingAdmissionWebhook`] and
//! [`ValidatingAdmissionWebhook`] share — the webhooks of the
//! `admissionregistration.k8s.io/v1` configurations, which of them a write
//! matches, the `admission.k8s.io/v1` AdmissionReview posted to them and
//! how their answers are read.
//!
//! How webhooks are matched, called and answered is described on
//! [`MutatingAdmissionWebhook`].

mod cache;
mod credentials;
mod mutating;
mod validating;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use serde_json::{Value, json};

use super::{AdmissionRequest, ObjectReader, Operation, ResourceRef, namespace_target};
use crate::api::{ApiError, LabelSelector, Registry, ResourceInfo};
use crate::auth::https::HttpsClient;

pub(crate) use cache::WebhookCache;
pub use credentials::WebhookClientAuth;
pub use mutating::MutatingAdmissionWebhook;
pub use validating::ValidatingAdmissionWebhook;

/// The group of the webhook configurations.
const GROUP: &str = "admissionregistration.k8s.io";
const NAMESPACES: ResourceRef<'static> = ResourceRef::new("", "v1", "namespaces");
const SERVICES: ResourceRef<'static> = ResourceRef::new("", "v1", "services");
const ENDPOINTS: ResourceRef<'static> = ResourceRef::new("", "v1", "endpoints");
/// Upstream's default `timeoutSeconds`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Resources of `GROUP` no webhook is ever called for (upstream's
/// `IsExemptAdmissionConfigurationResource`).
const EXEMPT: [&str; 6] = [
    "mutatingwebhookconfigurations",
    "validatingwebhookconfigurations",
    "validatingadmissionpolicies",
    "validatingadmissionpolicybindings",
    "mutatingadmissionpolicies",
    "mutatingadmissionpolicybindings",
];

/// Which of the two configuration kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Mutating,
    Validating,
}

impl Kind {
    /// The plural of the configuration kind.
    pub(crate) const fn plural(self) -> &'static str {
        match self {
            Kind::Mutating => "mutatingwebhookconfigurations",
            Kind::Validating => "validatingwebhookconfigurations",
        }
    }

    fn resource(self) -> ResourceRef<'static> {
        ResourceRef::new(GROUP, "v1", self.plural())
    }
}

/// Where a webhook is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Endpoint {
    /// `clientConfig.url`.
    Url(String),
    /// `clientConfig.service`.
    Service {
        namespace: String,
        name: String,
        /// `path`, `/` by default.
        path: String,
        /// `port`, 443 by default.
        port: u16,
    },
    /// Neither (a configuration stored without validation).
    Missing,
}

/// One rule of a webhook.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Rule {
    operations: Vec<String>,
    groups: Vec<String>,
    versions: Vec<String>,
    resources: Vec<String>,
    /// `Cluster`, `Namespaced` or `*`.
    scope: String,
}

/// A request as rules see it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attributes<'a> {
    operation: Operation,
    group: &'a str,
    version: &'a str,
    resource: &'a str,
    subresource: &'a str,
    /// The namespace (`""` for cluster-scoped kinds; a Namespace's own name
    /// when a Namespace is written).
    namespace: &'a str,
}

impl Attributes<'_> {
    fn is_namespace_object(&self) -> bool {
        self.group.is_empty() && self.resource == "namespaces"
    }
}

fn wildcard_or(values: &[String], value: &str) -> bool {
    values.iter().any(|v| v == "*" || v == value)
}

impl Rule {
    fn parse(rule: &Value) -> Rule {
        let list = |field: &str| -> Vec<String> {
            rule.get(field)
                .and_then(Value::as_array)
                .map(|l| l.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default()
        };
        Rule {
            operations: list("operations"),
            groups: list("apiGroups"),
            versions: list("apiVersions"),
            resources: list("resources"),
            scope: rule.get("scope").and_then(Value::as_str).unwrap_or("*").to_owned(),
        }
    }

    /// Upstream's `rules.Matcher`.
    fn matches(&self, request: &Attributes<'_>) -> bool {
        let operation = match request.operation {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        };
        let scope = match self.scope.as_str() {
            "Namespaced" => !request.is_namespace_object() && !request.namespace.is_empty(),
            "Cluster" => request.is_namespace_object() || request.namespace.is_empty(),
            _ => true,
        };
        let resource = self.resources.iter().any(|entry| {
            let (resource, subresource) = entry.split_once('/').unwrap_or((entry, ""));
            (resource == "*" || resource == request.resource)
                && (subresource == "*" || subresource == request.subresource)
        });
        wildcard_or(&self.operations, operation)
            && wildcard_or(&self.groups, request.group)
            && wildcard_or(&self.versions, request.version)
            && resource
            && scope
    }
}

/// One webhook of a configuration, as parsed from the stored object.
pub(crate) struct Webhook {
    /// `webhooks[].name`.
    pub(crate) name: String,
    /// The configuration's name and the webhook's index in it: which
    /// webhook a reinvocation is about.
    pub(crate) id: (String, usize),
    endpoint: Endpoint,
    /// The decoded `caBundle`, or why it cannot be decoded.
    ca_pem: Result<Option<String>, String>,
    rules: Vec<Rule>,
    /// `failurePolicy: Ignore`.
    ignore_failures: bool,
    /// `matchPolicy: Equivalent`.
    equivalent: bool,
    namespace_selector: Result<LabelSelector, String>,
    object_selector: Result<LabelSelector, String>,
    /// `sideEffects` is `None` or `NoneOnDryRun`.
    dry_run_safe: bool,
    timeout: Duration,
    /// `reinvocationPolicy: IfNeeded`.
    pub(crate) reinvoke: bool,
    /// `matchConditions` are set, which this server cannot evaluate.
    match_conditions: bool,
    /// The HTTPS client, made at the first call.
    caller: OnceLock<Result<Caller, String>>,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook").field("name", &self.name).field("endpoint", &self.endpoint).finish_non_exhaustive()
    }
}

impl Webhook {
    /// The webhooks of a stored configuration, in order.
    pub(crate) fn of_configuration(configuration: &Value) -> Vec<Arc<Webhook>> {
        let name = configuration.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let webhooks = configuration.get("webhooks").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        webhooks.iter().enumerate().map(|(i, webhook)| Arc::new(Webhook::parse(name, i, webhook))).collect()
    }

    fn parse(configuration: &str, index: usize, webhook: &Value) -> Webhook {
        let text = |field: &str| webhook.get(field).and_then(Value::as_str);
        let config = webhook.get("clientConfig").unwrap_or(&Value::Null);
        let endpoint = match (config.get("url").and_then(Value::as_str), config.get("service")) {
            (Some(url), _) => Endpoint::Url(url.to_owned()),
            (None, Some(service)) if service.is_object() => {
                let text = |field: &str| service.get(field).and_then(Value::as_str).unwrap_or_default().to_owned();
                Endpoint::Service {
                    namespace: text("namespace"),
                    name: text("name"),
                    path: Some(text("path")).filter(|p| !p.is_empty()).unwrap_or_else(|| "/".to_owned()),
                    port: service
                        .get("port")
                        .and_then(Value::as_u64)
                        .and_then(|p| u16::try_from(p).ok())
                        .unwrap_or(443),
                }
            }
            _ => Endpoint::Missing,
        };
        let ca_pem = match config.get("caBundle").and_then(Value::as_str).filter(|b| !b.is_empty()) {
            None => Ok(None),
            Some(encoded) => base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| format!("caBundle is not base64: {e}"))
                .and_then(|bytes| String::from_utf8(bytes).map_err(|_| "caBundle is not PEM text".to_owned()))
                .map(Some),
        };
        let selector = |field: &str| match webhook.get(field).filter(|s| !s.is_null()) {
            None => Ok(LabelSelector::default()),
            Some(value) => LabelSelector::from_json(Some(value)).map_err(|e| format!("{field}: {e}")),
        };
        let timeout = webhook
            .get("timeoutSeconds")
            .and_then(Value::as_u64)
            .map(|seconds| Duration::from_secs(seconds.clamp(1, 30)))
            .unwrap_or(DEFAULT_TIMEOUT);
        Webhook {
            name: text("name").unwrap_or_default().to_owned(),
            id: (configuration.to_owned(), index),
            endpoint,
            ca_pem,
            rules: webhook.get("rules").and_then(Value::as_array).into_iter().flatten().map(Rule::parse).collect(),
            ignore_failures: text("failurePolicy") == Some("Ignore"),
            equivalent: text("matchPolicy") != Some("Exact"),
            namespace_selector: selector("namespaceSelector"),
            object_selector: selector("objectSelector"),
            dry_run_safe: matches!(text("sideEffects"), Some("None" | "NoneOnDryRun")),
            timeout,
            reinvoke: text("reinvocationPolicy") == Some("IfNeeded"),
            match_conditions: webhook.get("matchConditions").and_then(Value::as_array).is_some_and(|c| !c.is_empty()),
            caller: OnceLock::new(),
        }
    }

    fn matches_rules(&self, request: &Attributes<'_>) -> bool {
        self.rules.iter().any(|rule| rule.matches(request))
    }

    /// `url` with upstream's `timeout` query parameter.
    fn with_timeout(&self, url: &str) -> String {
        let separator = if url.contains('?') { '&' } else { '?' };
        format!("{url}{separator}timeout={}s", self.timeout.as_secs())
    }

    /// The host the webhook's credentials are chosen by: the URL's
    /// `host:port`, or `<service>.<namespace>.svc:<port>`.
    fn target(&self) -> Option<String> {
        match &self.endpoint {
            Endpoint::Url(url) => {
                let uri: http::Uri = url.parse().ok()?;
                Some(format!("{}:{}", uri.host()?, uri.port_u16().unwrap_or(443)))
            }
            Endpoint::Service { namespace, name, port, .. } => Some(format!("{name}.{namespace}.svc:{port}")),
            Endpoint::Missing => None,
        }
    }

    /// The HTTPS client and token presenting the credentials `auth` holds
    /// for the webhook's host (made at the first call, with the first
    /// dispatcher's credentials).
    fn caller(&self, auth: &WebhookClientAuth) -> Result<&Caller, String> {
        self.caller
            .get_or_init(|| {
                let ca = self.ca_pem.clone()?;
                let credentials = self.target().and_then(|target| auth.resolve(&target).cloned()).unwrap_or_default();
                let client = HttpsClient::new(ca.as_deref(), credentials.identity.as_ref())?;
                Ok(Caller { client: client.with_timeout(self.timeout), token: credentials.token })
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// How a webhook is called: the HTTPS client (with its client
/// certificate, if any) and the bearer token.
struct Caller {
    client: HttpsClient,
    token: Option<String>,
}

/// Where the plugins find the webhooks of the configurations, and the
/// registry that says which resources are equivalent.
#[async_trait]
pub(crate) trait Configurations: Send + Sync {
    /// The webhooks of every configuration of `kind`, configurations in
    /// name order and webhooks in their order in each.
    async fn webhooks(&self, kind: Kind) -> Result<Arc<[Arc<Webhook>]>, ApiError>;

    /// The kinds served.
    fn registry(&self) -> Result<Arc<Registry>, ApiError>;
}

/// Configurations read through an [`ObjectReader`] at every request, with
/// the built-in kinds' equivalences.
struct ReadConfigurations {
    objects: Arc<dyn ObjectReader>,
    registry: Arc<Registry>,
}

#[async_trait]
impl Configurations for ReadConfigurations {
    async fn webhooks(&self, kind: Kind) -> Result<Arc<[Arc<Webhook>]>, ApiError> {
        let mut configurations = self.objects.list(kind.resource(), None).await?;
        configurations.sort_by(|a, b| {
            a.pointer("/metadata/name").map(Value::to_string).cmp(&b.pointer("/metadata/name").map(Value::to_string))
        });
        Ok(configurations.iter().flat_map(|configuration| Webhook::of_configuration(configuration)).collect())
    }

    fn registry(&self) -> Result<Arc<Registry>, ApiError> {
        Ok(self.registry.clone())
    }
}

/// A webhook a request is to be sent to, and the resource it is sent as.
#[derive(Debug)]
pub(crate) struct Invocation {
    pub(crate) webhook: Arc<Webhook>,
    /// The equivalent resource a rule matched (`matchPolicy: Equivalent`),
    /// when it is not the request's own.
    equivalent: Option<Arc<ResourceInfo>>,
}

/// What a webhook answered.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reply {
    allowed: bool,
    /// `response.status`.
    status: Value,
    warnings: Vec<String>,
    /// `response.auditAnnotations`, by key.
    audit_annotations: Vec<(String, String)>,
    /// The decoded JSON patch (mutating webhooks).
    patch: Option<Vec<u8>>,
}

impl Reply {
    /// Passes the answer's warnings to the client and its audit
    /// annotations, keyed `<webhook name>/<key>`, to the audit log, whether
    /// the webhook allowed the write or not, as upstream's dispatchers do.
    pub(crate) fn note(&self, webhook: &str, request: &AdmissionRequest<'_>) {
        for (key, value) in &self.audit_annotations {
            if let Err(error) = request.annotate(format!("{webhook}/{key}"), value.clone()) {
                tracing::warn!(webhook, %error, "failed to set an admission audit annotation");
            }
        }
        for warning in &self.warnings {
            request.warn(warning.clone());
        }
    }
}

/// The matching and calling both plugins do, for one kind of configuration.
#[derive(Clone)]
pub(crate) struct Dispatcher {
    kind: Kind,
    configurations: Arc<dyn Configurations>,
    /// Reads namespaces for `namespaceSelector`.
    objects: Arc<dyn ObjectReader>,
    /// What the server presents to webhooks.
    auth: Arc<WebhookClientAuth>,
}

impl Dispatcher {
    pub(crate) fn new(kind: Kind, configurations: Arc<dyn Configurations>, objects: Arc<dyn ObjectReader>) -> Self {
        Dispatcher { kind, configurations, objects, auth: Arc::default() }
    }

    /// Presents `auth`'s credentials to the webhooks.
    pub(crate) fn with_auth(self, auth: WebhookClientAuth) -> Self {
        Dispatcher { auth: Arc::new(auth), ..self }
    }

    /// Configurations and namespaces read through `objects`.
    fn reading(kind: Kind, objects: Arc<dyn ObjectReader>) -> Self {
        static BUILTIN: OnceLock<Arc<Registry>> = OnceLock::new();
        let registry = BUILTIN.get_or_init(|| Arc::new(Registry::builtin())).clone();
        let configurations = Arc::new(ReadConfigurations { objects: objects.clone(), registry });
        Dispatcher::new(kind, configurations, objects)
    }

    /// The webhooks `request` is sent to, in order.
    pub(crate) async fn invocations(&self, request: &AdmissionRequest<'_>) -> Result<Vec<Invocation>, ApiError> {
        if request.resource.group == GROUP && EXEMPT.contains(&request.resource.plural.as_str()) {
            return Ok(Vec::new());
        }
        let webhooks = self.configurations.webhooks(self.kind).await?;
        if webhooks.is_empty() {
            return Ok(Vec::new());
        }
        let resource = request.resource;
        let is_namespace = resource.group.is_empty() && resource.plural == "namespaces";
        let namespace = match request.namespace {
            Some(namespace) => namespace,
            None if is_namespace => request.name,
            None => "",
        };
        let attributes = Attributes {
            operation: request.operation,
            group: &resource.group,
            version: &resource.version,
            resource: &resource.plural,
            subresource: request.subresource.unwrap_or_default(),
            namespace,
        };
        let mut namespace_labels: Option<Value> = None;
        let mut equivalents: Option<Vec<Arc<ResourceInfo>>> = None;
        let mut invocations = Vec::new();
        for webhook in webhooks.iter() {
            let equivalent = if webhook.matches_rules(&attributes) {
                None
            } else if webhook.equivalent {
                let candidates = match &equivalents {
                    Some(candidates) => candidates,
                    None => equivalents.insert(equivalents_of(&*self.configurations.registry()?, request)),
                };
                let matched = candidates.iter().find(|other| {
                    let attributes = Attributes {
                        group: &other.group,
                        version: &other.version,
                        resource: &other.plural,
                        ..attributes
                    };
                    webhook.matches_rules(&attributes)
                });
                match matched {
                    Some(other) => Some(other.clone()),
                    None => continue,
                }
            } else {
                continue;
            };
            let object_selector = webhook.object_selector.as_ref().map_err(ApiError::internal)?;
            let labelled = |object: Option<&Value>| object.is_some_and(|o| object_selector.matches_object(o));
            if !object_selector.is_empty() && !labelled(request.object.as_ref()) && !labelled(request.old_object) {
                continue;
            }
            let namespace_selector = webhook.namespace_selector.as_ref().map_err(ApiError::internal)?;
            if !namespace_selector.is_empty() && (!namespace.is_empty() || is_namespace) {
                let labels = match &namespace_labels {
                    Some(labels) => labels,
                    None => namespace_labels.insert(self.namespace_labels(request, is_namespace, namespace).await?),
                };
                if !namespace_selector.matches_object(&json!({"metadata": {"labels": labels}})) {
                    continue;
                }
            }
            invocations.push(Invocation { webhook: webhook.clone(), equivalent });
        }
        Ok(invocations)
    }

    /// The labels `namespaceSelector` is matched against: a Namespace's own
    /// when one is created or updated, else those of the stored namespace.
    async fn namespace_labels(
        &self,
        request: &AdmissionRequest<'_>,
        is_namespace: bool,
        namespace: &str,
    ) -> Result<Value, ApiError> {
        if is_namespace && request.subresource.is_none() && request.operation != Operation::Delete {
            let labels = request.object.as_ref().and_then(|o| o.pointer("/metadata/labels"));
            return Ok(labels.cloned().unwrap_or(Value::Null));
        }
        match self.objects.get(NAMESPACES, None, namespace).await? {
            Some(stored) => Ok(stored.pointer("/metadata/labels").cloned().unwrap_or(Value::Null)),
            None => Err(ApiError::not_found(&namespace_target(namespace))),
        }
    }

    /// Refuses a dry run the webhook may have side effects on (upstream's
    /// 400 `does not support dry run`).
    pub(crate) fn check_dry_run(webhook: &Webhook, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        match request.dry_run && !webhook.dry_run_safe {
            true => {
                Err(ApiError::bad_request(format!("admission webhook {:?} does not support dry run", webhook.name)))
            }
            false => Ok(()),
        }
    }

    /// Posts the review of `request` to the webhook and reads its answer;
    /// `Err` is why the call failed (what `failurePolicy` decides on).
    pub(crate) async fn call(&self, invocation: &Invocation, request: &AdmissionRequest<'_>) -> Result<Reply, String> {
        let webhook = &invocation.webhook;
        let uid = uuid::Uuid::new_v4().to_string();
        let review = review(&uid, invocation, request);
        if webhook.match_conditions {
            return Err("matchConditions (CEL expressions) are not supported by this server".into());
        }
        let Caller { client, token } = webhook.caller(&self.auth)?;
        let token = token.as_deref();
        let posted = match &webhook.endpoint {
            Endpoint::Url(url) => client.post_json(&webhook.with_timeout(url), &review, token).await,
            Endpoint::Service { namespace, name, path, port } => {
                let (host, target_port) = self.resolve(namespace, name, *port).await?;
                let url = webhook.with_timeout(&format!("https://{name}.{namespace}.svc:{port}{path}"));
                client.post_json_via(&url, (&host, target_port), &review, token).await
            }
            Endpoint::Missing => return Err("the webhook has neither clientConfig.url nor clientConfig.service".into()),
        };
        let (status, answer) = posted.map_err(|e| format!("failed to call webhook: {e}"))?;
        if !status.is_success() {
            return Err(format!(
                "failed to call webhook: the server responded with the status code {}",
                status.as_u16()
            ));
        }
        parse_reply(&answer, &uid, self.kind == Kind::Mutating)
            .map_err(|e| format!("received invalid webhook response: {e}"))
    }

    /// Where the webhook service `namespace`/`name` is reached on its port
    /// `port` (upstream's endpoint routing): a ready address of the
    /// Service's Endpoints and the port the service port targets; the
    /// external name of an `ExternalName` Service.
    async fn resolve(&self, namespace: &str, name: &str, port: u16) -> Result<(String, u16), String> {
        let unavailable = |what: String| format!("failed to resolve service {namespace}/{name}: {what}");
        let service = self
            .objects
            .get(SERVICES, Some(namespace), name)
            .await
            .map_err(|e| unavailable(e.message))?
            .ok_or_else(|| unavailable(format!("service {name:?} not found")))?;
        let spec = &service["spec"];
        if spec["type"] == "ExternalName" {
            let host = spec["externalName"].as_str().unwrap_or_default();
            return Ok((host.to_owned(), port));
        }
        let ports = spec["ports"].as_array().map(Vec::as_slice).unwrap_or_default();
        let Some(service_port) = ports.iter().find(|p| p["port"].as_u64() == Some(u64::from(port))) else {
            return Err(unavailable(format!("no service port {port} found for service {name:?}")));
        };
        let port_name = service_port["name"].as_str().unwrap_or_default();
        let endpoints = self
            .objects
            .get(ENDPOINTS, Some(namespace), name)
            .await
            .map_err(|e| unavailable(e.message))?
            .unwrap_or_else(|| Arc::new(Value::Null));
        let subsets = endpoints["subsets"].as_array().map(Vec::as_slice).unwrap_or_default();
        for subset in subsets {
            let ports = subset["ports"].as_array().map(Vec::as_slice).unwrap_or_default();
            let Some(target) = ports.iter().find(|p| p["name"].as_str().unwrap_or_default() == port_name) else {
                continue;
            };
            let addresses: Vec<&str> = subset["addresses"]
                .as_array()
                .map(|a| a.iter().filter_map(|a| a["ip"].as_str()).collect())
                .unwrap_or_default();
            let Some(target_port) = target["port"].as_u64().and_then(|p| u16::try_from(p).ok()) else { continue };
            if !addresses.is_empty() {
                let pick = usize::from(uuid::Uuid::new_v4().as_bytes()[0]) % addresses.len();
                return Ok((addresses[pick].to_owned(), target_port));
            }
        }
        Err(unavailable(format!("no endpoints available for service {name:?}")))
    }

    /// The error of a failed call: 500, as upstream's `failed calling
    /// webhook`.
    pub(crate) fn call_failed(webhook: &Webhook, reason: &str) -> ApiError {
        ApiError::internal(format!("failed calling webhook {:?}: {reason}", webhook.name))
    }
}

/// The other resources stored with the request's (same storage prefix),
/// that serve its subresource if it has one, in the registry's order.
fn equivalents_of(registry: &Registry, request: &AdmissionRequest<'_>) -> Vec<Arc<ResourceInfo>> {
    let own = request.resource;
    let prefix = own.storage_prefix();
    let mut found = Vec::new();
    for group in registry.groups() {
        for version in registry.versions(group) {
            for other in registry.resources(group, &version) {
                let same = other.group == own.group && other.version == own.version && other.plural == own.plural;
                if !same
                    && other.storage_prefix() == prefix
                    && request.subresource.is_none_or(|sub| other.has_subresource(sub))
                {
                    found.push(other);
                }
            }
        }
    }
    found
}

/// `object`, of the `from` resource, in the served form of `to` (an
/// equivalent resource): through their common storage form.
fn convert(object: &Value, from: &ResourceInfo, to: &ResourceInfo) -> Value {
    let mut converted = from.to_storage(object.clone());
    to.from_storage(&mut converted);
    if let Some(map) = converted.as_object_mut() {
        map.insert("apiVersion".into(), to.api_version().into());
        map.insert("kind".into(), to.kind.clone().into());
    }
    converted
}

/// `{group, version, kind}` and `{group, version, resource}` of a resource
/// (and subresource) as a review names them.
fn kind_and_resource(resource: &ResourceInfo, subresource: Option<&str>) -> (Value, Value) {
    let kind = match subresource.and_then(|name| resource.subresources.iter().find(|s| s.name == name)) {
        Some(sub) => json!({"group": sub.group, "version": sub.version, "kind": sub.kind}),
        None => json!({"group": resource.group, "version": resource.version, "kind": resource.kind}),
    };
    (kind, json!({"group": resource.group, "version": resource.version, "resource": resource.plural}))
}

/// The AdmissionReview of `request` for one invocation.
fn review(uid: &str, invocation: &Invocation, request: &AdmissionRequest<'_>) -> Value {
    let own = request.resource;
    let target = invocation.equivalent.as_deref().unwrap_or(own);
    let (request_kind, request_resource) = kind_and_resource(own, request.subresource);
    let (kind, resource) = kind_and_resource(target, request.subresource);
    let as_target = |object: Option<&Value>| match (object, &invocation.equivalent, request.subresource) {
        (Some(object), Some(to), None) => convert(object, own, to),
        (Some(object), _, _) => object.clone(),
        (None, _, _) => Value::Null,
    };
    let (operation, options_kind) = match request.operation {
        Operation::Create => ("CREATE", "CreateOptions"),
        Operation::Update => ("UPDATE", "UpdateOptions"),
        Operation::Delete => ("DELETE", "DeleteOptions"),
    };
    let mut options = json!({"apiVersion": "meta.k8s.io/v1", "kind": options_kind});
    if request.dry_run {
        options["dryRun"] = json!(["All"]);
    }
    let user = request.user;
    let is_namespace = own.group.is_empty() && own.plural == "namespaces";
    let namespace = request.namespace.or(is_namespace.then_some(request.name)).unwrap_or_default();
    let mut body = json!({
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": request_kind,
        "requestResource": request_resource,
        "name": request.name,
        "operation": operation,
        "userInfo": {"username": user.name, "groups": user.groups},
        "object": as_target(request.object.as_ref()),
        "oldObject": as_target(request.old_object),
        "dryRun": request.dry_run,
        "options": options,
    });
    if !user.uid.is_empty() {
        body["userInfo"]["uid"] = user.uid.clone().into();
    }
    if !user.extra.is_empty() {
        body["userInfo"]["extra"] = json!(user.extra);
    }
    if !namespace.is_empty() {
        body["namespace"] = namespace.into();
    }
    if let Some(subresource) = request.subresource {
        body["subResource"] = subresource.into();
        body["requestSubResource"] = subresource.into();
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body})
}

/// Reads an AdmissionReview answer (upstream's `VerifyAdmissionResponse`).
fn parse_reply(answer: &Value, uid: &str, mutating: bool) -> Result<Reply, String> {
    let api_version = answer.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = answer.get("kind").and_then(Value::as_str).unwrap_or_default();
    if (api_version, kind) != ("admission.k8s.io/v1", "AdmissionReview") {
        return Err(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {api_version}, Kind={kind}"
        ));
    }
    let Some(response) = answer.get("response").filter(|r| r.is_object()) else {
        return Err("webhook response was absent".into());
    };
    let answered_uid = response.get("uid").and_then(Value::as_str).unwrap_or_default();
    if answered_uid != uid {
        return Err(format!("expected response.uid={uid:?}, got {answered_uid:?}"));
    }
    let patch = match response.get("patch").and_then(Value::as_str).filter(|p| !p.is_empty()) {
        None => None,
        Some(encoded) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| format!("response.patch is not base64: {e}"))?,
        ),
    };
    let patch_type = response.get("patchType").and_then(Value::as_str).unwrap_or_default();
    if patch.is_some() {
        if !mutating {
            return Err("validating webhooks may not return response.patch".into());
        }
        if patch_type.is_empty() {
            return Err("webhook returned response.patch but not response.patchType".into());
        }
        if patch_type != "JSONPatch" {
            return Err(format!("webhook returned invalid response.patchType of {patch_type:?}"));
        }
    }
    let warnings = response
        .get("warnings")
        .and_then(Value::as_array)
        .map(|w| w.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    let audit_annotations = response
        .get("auditAnnotations")
        .and_then(Value::as_object)
        .map(|a| a.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
        .unwrap_or_default();
    Ok(Reply {
        allowed: response.get("allowed").and_then(Value::as_bool).unwrap_or(false),
        status: response.get("status").cloned().unwrap_or(Value::Null),
        warnings,
        audit_annotations,
        patch,
    })
}

/// Reasons a refusal may carry through to the client.
const REASONS: [&str; 17] = [
    "BadRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "AlreadyExists",
    "Conflict",
    "Gone",
    "Invalid",
    "ServerTimeout",
    "Timeout",
    "TooManyRequests",
    "MethodNotAllowed",
    "NotAcceptable",
    "RequestEntityTooLarge",
    "UnsupportedMediaType",
    "InternalError",
    "ServiceUnavailable",
];

/// A webhook's refusal as the client sees it (upstream's `ToStatusErr`):
/// its code (at least 400), its reason, and `admission webhook "<name>"
/// denied the request: <message>`.
pub(crate) fn rejection(webhook: &str, status: &Value) -> ApiError {
    let code = status.get("code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok()).unwrap_or(0);
    let code = if (400..=599).contains(&code) { code } else { 400 };
    let reason = status.get("reason").and_then(Value::as_str).unwrap_or_default();
    let message = status.get("message").and_then(Value::as_str).unwrap_or_default();
    let denied = format!("admission webhook {webhook:?} denied the request");
    let message = match (message, reason) {
        ("", "") => format!("{denied} without explanation"),
        ("", reason) => format!("{denied}: {reason}"),
        (message, _) => format!("{denied}: {message}"),
    };
    let details = status.get("details").and_then(|d| serde_json::from_value(d.clone()).ok()).map(Box::new);
    ApiError { code, reason: REASONS.iter().find(|r| **r == reason).copied().unwrap_or(""), message, details }
}

#[cfg(test)]
pub(crate) mod tests;
