//! How many requests the server executes at once, and which of the rest
//! wait or are refused: upstream's API Priority and Fairness (APF), or its
//! plain max-in-flight limits when APF is off.
//!
//! With APF (the default), every request is classified by the first
//! [`FlowSchema`] (in order of `matching_precedence`) whose rules match its
//! user, verb and resource. The schema names a [`PriorityLevel`]: `exempt`
//! levels execute everything at once; limited levels get a share of the
//! server's total concurrency (`--max-requests-inflight` plus
//! `--max-mutating-requests-inflight`) and, once it is used up, queue the
//! requests: a flow (the schema and the user or namespace it distinguishes
//! by) is dealt a hand of queues by shuffle sharding and joins the shortest;
//! the queues are served round robin as seats free up. A request finding
//! its queue full, or waiting longer than the wait limit, is answered 429
//! with `Retry-After`. Watches hold their seat until their response starts;
//! other long-running requests (exec, attach, port-forward, proxy, logs) are
//! not limited, as upstream.
//!
//! The default schemas and levels are upstream's: node heartbeats
//! (`system-node-high`), leader election leases (`system-leader-election`)
//! and `system:masters` (`exempt`) keep being served while ordinary users
//! (`global-default`) flood the server.
//!
//! ```
//! use std::time::Duration;
//! use orchestra_core::server::ServerOptions;
//! use orchestra_core::server::flowcontrol::{FlowControl, LimitResponse, PriorityLevel, Queuing};
//!
//! // A smaller server, with a tighter queue for everyone not otherwise classified.
//! let flow_control = FlowControl::default()
//!     .with_max_requests_inflight(40)
//!     .with_max_mutating_requests_inflight(20)
//!     .with_request_wait_limit(Duration::from_secs(5))
//!     .with_priority_level(PriorityLevel::limited(
//!         "global-default",
//!         20,
//!         LimitResponse::Queue(Queuing::new(16, 4, 10)),
//!     ));
//! assert_eq!(flow_control.total_concurrency(), 60);
//! let options = ServerOptions::default().with_flow_control(flow_control);
//! # let _ = options;
//! ```

use std::collections::VecDeque;
use std::hash::BuildHasher as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::response::Response;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::oneshot;

use super::metrics::Metrics;
use crate::api::ApiError;
use crate::auth::{Attributes, UserInfo};

/// The response header naming the UID of the flow schema that classified a
/// request (upstream's `X-Kubernetes-PF-FlowSchema-UID`).
pub const FLOW_SCHEMA_UID_HEADER: HeaderName = HeaderName::from_static("x-kubernetes-pf-flowschema-uid");

/// The response header naming the UID of the request's priority level
/// (upstream's `X-Kubernetes-PF-PriorityLevel-UID`).
pub const PRIORITY_LEVEL_UID_HEADER: HeaderName = HeaderName::from_static("x-kubernetes-pf-prioritylevel-uid");

/// The `Retry-After` of a rejected request, in seconds (upstream's).
const RETRY_AFTER_SECONDS: u32 = 1;

/// The most queues one flow is dealt.
const MAX_HAND_SIZE: usize = 16;

/// Matches every verb, group, resource, namespace, URL or subject name.
const ALL: &str = "*";

/// The server's concurrency limits: API Priority and Fairness, or upstream's
/// max-in-flight filter when it is off. Defaults are upstream's: 400
/// read-only and 200 mutating requests, APF on with its bootstrap flow
/// schemas and priority levels, a 15 second queue wait.
///
/// See the [module](self) for an example.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FlowControl {
    /// Upstream's `--max-requests-inflight`: read-only requests executing at
    /// once when APF is off; with APF, part of the total concurrency. 0: no
    /// limit.
    pub max_requests_inflight: u32,
    /// Upstream's `--max-mutating-requests-inflight`: the same for writes.
    pub max_mutating_requests_inflight: u32,
    /// Upstream's `--enable-priority-and-fairness`.
    pub priority_and_fairness: bool,
    /// How long a request may wait in a queue before it is refused with 429.
    pub request_wait_limit: Duration,
    /// The flow schemas, matched in order of precedence (then name).
    pub flow_schemas: Vec<FlowSchema>,
    /// The priority levels the schemas name.
    pub priority_levels: Vec<PriorityLevel>,
}

impl Default for FlowControl {
    fn default() -> Self {
        FlowControl {
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
            priority_and_fairness: true,
            request_wait_limit: Duration::from_secs(15),
            flow_schemas: default_flow_schemas(),
            priority_levels: default_priority_levels(),
        }
    }
}

impl FlowControl {
    /// No limit at all: every request executes at once.
    pub fn unlimited() -> FlowControl {
        FlowControl::default().with_max_requests_inflight(0).with_max_mutating_requests_inflight(0)
    }

    /// Sets [`max_requests_inflight`](Self::max_requests_inflight).
    pub fn with_max_requests_inflight(mut self, limit: u32) -> Self {
        self.max_requests_inflight = limit;
        self
    }

    /// Sets [`max_mutating_requests_inflight`](Self::max_mutating_requests_inflight).
    pub fn with_max_mutating_requests_inflight(mut self, limit: u32) -> Self {
        self.max_mutating_requests_inflight = limit;
        self
    }

    /// Sets [`priority_and_fairness`](Self::priority_and_fairness).
    pub fn with_priority_and_fairness(mut self, enabled: bool) -> Self {
        self.priority_and_fairness = enabled;
        self
    }

    /// Sets [`request_wait_limit`](Self::request_wait_limit).
    pub fn with_request_wait_limit(mut self, limit: Duration) -> Self {
        self.request_wait_limit = limit;
        self
    }

    /// Adds a flow schema, replacing the one of the same name.
    pub fn with_flow_schema(mut self, schema: FlowSchema) -> Self {
        self.flow_schemas.retain(|s| s.name != schema.name);
        self.flow_schemas.push(schema);
        self
    }

    /// Adds a priority level, replacing the one of the same name.
    pub fn with_priority_level(mut self, level: PriorityLevel) -> Self {
        self.priority_levels.retain(|l| l.name != level.name);
        self.priority_levels.push(level);
        self
    }

    /// The concurrency the limited priority levels share (upstream's server
    /// concurrency limit): both in-flight limits together.
    pub fn total_concurrency(&self) -> u32 {
        self.max_requests_inflight.saturating_add(self.max_mutating_requests_inflight)
    }
}

/// Upstream's `FlowSchema`: which requests go to which priority level, and
/// how they are told apart into flows.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FlowSchema {
    /// The schema's name.
    pub name: String,
    /// The name of the [`PriorityLevel`] its requests go to.
    pub priority_level: String,
    /// Lower matches first (1 to 10000 upstream).
    pub matching_precedence: u32,
    /// How its requests are told apart into flows; `None`: one flow.
    pub distinguisher: Option<Distinguisher>,
    /// The schema matches a request that any of these match.
    pub rules: Vec<PolicyRules>,
}

impl FlowSchema {
    /// A schema without rules (matching nothing until [`rule`](Self::rule)).
    pub fn new(name: impl Into<String>, priority_level: impl Into<String>, matching_precedence: u32) -> FlowSchema {
        FlowSchema {
            name: name.into(),
            priority_level: priority_level.into(),
            matching_precedence,
            distinguisher: None,
            rules: Vec::new(),
        }
    }

    /// Sets [`distinguisher`](Self::distinguisher).
    pub fn distinguished_by(mut self, distinguisher: Distinguisher) -> Self {
        self.distinguisher = Some(distinguisher);
        self
    }

    /// Adds a rule.
    pub fn rule(mut self, rule: PolicyRules) -> Self {
        self.rules.push(rule);
        self
    }
}

/// Upstream's `FlowDistinguisherMethod`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distinguisher {
    /// One flow per user name.
    ByUser,
    /// One flow per namespace (cluster-scoped requests share one).
    ByNamespace,
}

/// Upstream's `PolicyRulesWithSubjects`: a request matches when one subject
/// names its user and one rule its verb and target.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PolicyRules {
    /// Who.
    pub subjects: Vec<Subject>,
    /// What, for requests about API resources.
    pub resource_rules: Vec<ResourceRule>,
    /// What, for other paths (`/healthz`, `/version`, discovery).
    pub non_resource_rules: Vec<NonResourceRule>,
}

impl PolicyRules {
    /// Rules naming nothing yet.
    pub fn new() -> PolicyRules {
        PolicyRules::default()
    }

    /// Any request of `subjects`: every verb on every resource and path.
    pub fn everything(subjects: impl IntoIterator<Item = Subject>) -> PolicyRules {
        PolicyRules {
            subjects: subjects.into_iter().collect(),
            resource_rules: vec![ResourceRule::new(&[ALL], &[ALL], &[ALL], &[ALL], true)],
            non_resource_rules: vec![NonResourceRule::new(&[ALL], &[ALL])],
        }
    }

    /// Adds a subject.
    pub fn subject(mut self, subject: Subject) -> Self {
        self.subjects.push(subject);
        self
    }

    /// Adds a resource rule.
    pub fn resource_rule(mut self, rule: ResourceRule) -> Self {
        self.resource_rules.push(rule);
        self
    }

    /// Adds a non-resource rule.
    pub fn non_resource_rule(mut self, rule: NonResourceRule) -> Self {
        self.non_resource_rules.push(rule);
        self
    }

    fn matches(&self, request: &Attributes) -> bool {
        self.subjects.iter().any(|s| s.matches(&request.user))
            && if request.resource_request {
                self.resource_rules.iter().any(|r| r.matches(request))
            } else {
                self.non_resource_rules.iter().any(|r| r.matches(request))
            }
    }
}

/// Who a rule applies to; `"*"` as a name matches every one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// A user, by name.
    User(String),
    /// Members of a group.
    Group(String),
    /// A service account of a namespace.
    ServiceAccount {
        /// Its namespace.
        namespace: String,
        /// Its name, or `"*"`.
        name: String,
    },
}

impl Subject {
    /// [`Subject::User`].
    pub fn user(name: impl Into<String>) -> Subject {
        Subject::User(name.into())
    }

    /// [`Subject::Group`].
    pub fn group(name: impl Into<String>) -> Subject {
        Subject::Group(name.into())
    }

    /// [`Subject::ServiceAccount`].
    pub fn service_account(namespace: impl Into<String>, name: impl Into<String>) -> Subject {
        Subject::ServiceAccount { namespace: namespace.into(), name: name.into() }
    }

    fn matches(&self, user: &UserInfo) -> bool {
        match self {
            Subject::User(name) => name == ALL || *name == user.name,
            Subject::Group(group) => group == ALL || user.groups.iter().any(|g| g == group),
            Subject::ServiceAccount { namespace, name } => user
                .name
                .strip_prefix("system:serviceaccount:")
                .and_then(|rest| rest.split_once(':'))
                .is_some_and(|(ns, account)| ns == namespace && (name == ALL || account == name)),
        }
    }
}

/// Upstream's `ResourcePolicyRule`. Resources are plural names, with
/// `/subresource` to match a subresource (`nodes/status`); `"*"` matches
/// all in each list.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResourceRule {
    /// Verbs (`get`, `list`, `create`, ...).
    pub verbs: Vec<String>,
    /// API groups (`""` for the core group).
    pub api_groups: Vec<String>,
    /// Resources, optionally with a subresource.
    pub resources: Vec<String>,
    /// Namespaces of namespaced requests.
    pub namespaces: Vec<String>,
    /// Whether requests without a namespace (cluster-scoped resources, or
    /// all namespaces at once) match.
    pub cluster_scope: bool,
}

impl ResourceRule {
    /// A rule from its lists.
    pub fn new(
        verbs: &[&str],
        api_groups: &[&str],
        resources: &[&str],
        namespaces: &[&str],
        cluster_scope: bool,
    ) -> ResourceRule {
        let owned = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect();
        ResourceRule {
            verbs: owned(verbs),
            api_groups: owned(api_groups),
            resources: owned(resources),
            namespaces: owned(namespaces),
            cluster_scope,
        }
    }

    fn matches(&self, request: &Attributes) -> bool {
        let listed = |list: &[String], value: &str| list.iter().any(|item| item == ALL || item == value);
        listed(&self.verbs, &request.verb)
            && listed(&self.api_groups, &request.api_group)
            && self.resources.iter().any(|r| {
                r == ALL
                    || if request.subresource.is_empty() {
                        *r == request.resource
                    } else {
                        r.split_once('/') == Some((request.resource.as_str(), request.subresource.as_str()))
                    }
            })
            && if request.namespace.is_empty() {
                self.cluster_scope
            } else {
                listed(&self.namespaces, &request.namespace)
            }
    }
}

/// Upstream's `NonResourcePolicyRule`: verbs and URL paths; a path ending
/// in `/*` matches everything under it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NonResourceRule {
    /// Lower-case HTTP verbs (`get`, `post`, ...).
    pub verbs: Vec<String>,
    /// Paths.
    pub non_resource_urls: Vec<String>,
}

impl NonResourceRule {
    /// A rule from its lists.
    pub fn new(verbs: &[&str], non_resource_urls: &[&str]) -> NonResourceRule {
        NonResourceRule {
            verbs: verbs.iter().map(|s| (*s).to_owned()).collect(),
            non_resource_urls: non_resource_urls.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn matches(&self, request: &Attributes) -> bool {
        self.verbs.iter().any(|v| v == ALL || *v == request.verb)
            && self.non_resource_urls.iter().any(|url| {
                url == ALL
                    || *url == request.path
                    || url.strip_suffix('*').is_some_and(|prefix| {
                        request.path.starts_with(prefix) || request.path == prefix.trim_end_matches('/')
                    })
            })
    }
}

/// Upstream's `PriorityLevelConfiguration`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PriorityLevel {
    /// The level's name, which flow schemas refer to.
    pub name: String,
    /// Exempt or limited.
    pub kind: PriorityLevelKind,
}

impl PriorityLevel {
    /// A level whose requests are never limited.
    pub fn exempt(name: impl Into<String>) -> PriorityLevel {
        PriorityLevel { name: name.into(), kind: PriorityLevelKind::Exempt }
    }

    /// A level with `nominal_concurrency_shares` of the server's concurrency.
    pub fn limited(
        name: impl Into<String>,
        nominal_concurrency_shares: u32,
        limit_response: LimitResponse,
    ) -> PriorityLevel {
        PriorityLevel {
            name: name.into(),
            kind: PriorityLevelKind::Limited { nominal_concurrency_shares, limit_response },
        }
    }
}

/// Whether a level is limited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PriorityLevelKind {
    /// Requests execute at once, however many.
    Exempt,
    /// The level gets `ceil(total × shares ÷ sum of all limited levels' shares)`
    /// seats.
    Limited {
        /// The level's shares.
        nominal_concurrency_shares: u32,
        /// What happens to a request when every seat is taken.
        limit_response: LimitResponse,
    },
}

/// What a limited level does with a request when all its seats are taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitResponse {
    /// Refuse it (429).
    Reject,
    /// Queue it.
    Queue(Queuing),
}

/// Upstream's `QueuingConfiguration`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Queuing {
    /// How many queues the level has.
    pub queues: u32,
    /// How many queues each flow is dealt (it joins the shortest).
    pub hand_size: u32,
    /// How many requests a queue holds; more are refused.
    pub queue_length_limit: u32,
}

impl Queuing {
    /// A queuing configuration.
    pub fn new(queues: u32, hand_size: u32, queue_length_limit: u32) -> Queuing {
        Queuing { queues, hand_size, queue_length_limit }
    }
}

/// Upstream's bootstrap priority levels.
fn default_priority_levels() -> Vec<PriorityLevel> {
    let queue = |queues, hand, length| LimitResponse::Queue(Queuing::new(queues, hand, length));
    vec![
        PriorityLevel::exempt("exempt"),
        PriorityLevel::limited("system", 30, queue(64, 6, 50)),
        PriorityLevel::limited("node-high", 40, queue(64, 6, 50)),
        PriorityLevel::limited("leader-election", 10, queue(16, 4, 50)),
        PriorityLevel::limited("workload-high", 40, queue(128, 6, 50)),
        PriorityLevel::limited("workload-low", 100, queue(128, 6, 50)),
        PriorityLevel::limited("global-default", 20, queue(128, 6, 50)),
        PriorityLevel::limited("catch-all", 5, LimitResponse::Reject),
    ]
}

/// Upstream's bootstrap flow schemas (mandatory and suggested).
fn default_flow_schemas() -> Vec<FlowSchema> {
    let everyone = || [Subject::group("system:unauthenticated"), Subject::group("system:authenticated")];
    let leases = |namespaces: &[&str]| {
        ResourceRule::new(&["get", "create", "update"], &["coordination.k8s.io"], &["leases"], namespaces, false)
    };
    let leader_election = |subjects: Vec<Subject>, config_namespaces: &[&str]| PolicyRules {
        subjects,
        resource_rules: vec![
            ResourceRule::new(
                &["get", "create", "update"],
                &[""],
                &["endpoints", "configmaps"],
                config_namespaces,
                false,
            ),
            leases(&[ALL]),
        ],
        non_resource_rules: Vec::new(),
    };
    vec![
        FlowSchema::new("exempt", "exempt", 1).rule(PolicyRules::everything([Subject::group("system:masters")])),
        FlowSchema::new("probes", "exempt", 2).rule(PolicyRules {
            subjects: everyone().into(),
            resource_rules: Vec::new(),
            non_resource_rules: vec![NonResourceRule::new(&["get"], &["/healthz", "/readyz", "/livez"])],
        }),
        FlowSchema::new("system-leader-election", "leader-election", 100).distinguished_by(Distinguisher::ByUser).rule(
            leader_election(
                vec![
                    Subject::user("system:kube-controller-manager"),
                    Subject::user("system:kube-scheduler"),
                    Subject::service_account("kube-system", ALL),
                ],
                &["kube-system"],
            ),
        ),
        FlowSchema::new("workload-leader-election", "leader-election", 200)
            .distinguished_by(Distinguisher::ByUser)
            .rule(leader_election(vec![Subject::service_account("kube-system", ALL)], &[ALL])),
        FlowSchema::new("system-node-high", "node-high", 400).distinguished_by(Distinguisher::ByUser).rule(
            PolicyRules::new()
                .subject(Subject::group("system:nodes"))
                .resource_rule(ResourceRule::new(&[ALL], &[""], &["nodes", "nodes/status"], &[ALL], true))
                .resource_rule(ResourceRule::new(&[ALL], &["coordination.k8s.io"], &["leases"], &[ALL], false)),
        ),
        FlowSchema::new("system-nodes", "system", 500)
            .distinguished_by(Distinguisher::ByUser)
            .rule(PolicyRules::everything([Subject::group("system:nodes")])),
        FlowSchema::new("kube-controller-manager", "workload-high", 800)
            .distinguished_by(Distinguisher::ByNamespace)
            .rule(PolicyRules::everything([Subject::user("system:kube-controller-manager")])),
        FlowSchema::new("kube-scheduler", "workload-high", 800)
            .distinguished_by(Distinguisher::ByNamespace)
            .rule(PolicyRules::everything([Subject::user("system:kube-scheduler")])),
        FlowSchema::new("kube-system-service-accounts", "workload-high", 900)
            .distinguished_by(Distinguisher::ByNamespace)
            .rule(PolicyRules::everything([Subject::service_account("kube-system", ALL)])),
        FlowSchema::new("service-accounts", "workload-low", 9000)
            .distinguished_by(Distinguisher::ByUser)
            .rule(PolicyRules::everything([Subject::group("system:serviceaccounts")])),
        FlowSchema::new("global-default", "global-default", 9900)
            .distinguished_by(Distinguisher::ByUser)
            .rule(PolicyRules::everything(everyone())),
        FlowSchema::new("catch-all", "catch-all", 10000)
            .distinguished_by(Distinguisher::ByUser)
            .rule(PolicyRules::everything(everyone())),
    ]
}

/// Whether a request runs long, as upstream's long-running check says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LongRunning {
    /// An ordinary request.
    No,
    /// A watch: limited until its response starts.
    Watch,
    /// exec, attach, port-forward, proxy, logs: never limited.
    Stream,
}

impl LongRunning {
    /// Classifies a request from its path and query, before routing (the
    /// request timeout needs it first): `watch=true`, or one of the
    /// streaming subresources.
    pub(crate) fn of(path: &str, query: Option<&str>) -> LongRunning {
        let watch = query.is_some_and(|q| {
            q.split('&')
                .any(|pair| matches!(pair.split_once('='), Some(("watch", "1" | "t" | "T" | "true" | "True" | "TRUE"))))
        });
        if watch {
            return LongRunning::Watch;
        }
        let mut segments = path.split('/').filter(|s| !s.is_empty());
        let rest: [Option<&str>; 6] = match segments.next() {
            Some("api") => {
                segments.next();
                std::array::from_fn(|_| segments.next())
            }
            Some("apis") => {
                segments.next();
                segments.next();
                std::array::from_fn(|_| segments.next())
            }
            _ => return LongRunning::No,
        };
        let subresource = match rest {
            [Some("namespaces"), Some(_), Some(_), Some(_), Some(sub), None] => sub,
            [Some(_), Some(_), Some(sub), None, ..] => sub,
            _ => return LongRunning::No,
        };
        if matches!(subresource, "exec" | "attach" | "portforward" | "proxy" | "log") {
            LongRunning::Stream
        } else {
            LongRunning::No
        }
    }
}

/// The flow control of a running server.
pub(crate) struct FlowController {
    mode: Mode,
}

enum Mode {
    Unlimited,
    MaxInFlight { read_only: Slots, mutating: Slots },
    Apf(Apf),
}

/// A request admitted to execute: holds its seat until dropped, and the
/// response headers naming its classification.
pub(crate) struct Admitted {
    _seat: Option<Seat>,
    headers: Option<(HeaderValue, HeaderValue)>,
}

impl Admitted {
    fn unclassified() -> Admitted {
        Admitted { _seat: None, headers: None }
    }

    /// Adds the `X-Kubernetes-PF-*` headers, as upstream does.
    pub(crate) fn stamp(&self, headers: &mut HeaderMap) {
        if let Some((schema, level)) = &self.headers {
            headers.insert(FLOW_SCHEMA_UID_HEADER, schema.clone());
            headers.insert(PRIORITY_LEVEL_UID_HEADER, level.clone());
        }
    }
}

/// The 429 of a refused request.
fn too_many_requests(headers: Option<(&HeaderValue, &HeaderValue)>) -> Response {
    let error =
        ApiError::too_many_requests("Too many requests, please try again later.").with_retry_after(RETRY_AFTER_SECONDS);
    let mut response = super::body::error(&error);
    let answer = response.headers_mut();
    answer.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
    if let Some((schema, level)) = headers {
        answer.insert(FLOW_SCHEMA_UID_HEADER, schema.clone());
        answer.insert(PRIORITY_LEVEL_UID_HEADER, level.clone());
    }
    response
}

impl FlowController {
    /// The runtime of `config`, with its metrics registered in `metrics`.
    pub(crate) fn new(config: &FlowControl, metrics: &Metrics) -> FlowController {
        let mode = if config.total_concurrency() == 0 {
            Mode::Unlimited
        } else if config.priority_and_fairness {
            Mode::Apf(Apf::new(config, metrics))
        } else {
            let inflight = Family::<KindLabels, Gauge>::default();
            let dropped = Family::<KindLabels, Counter>::default();
            metrics.register(
                "apiserver_current_inflight_requests",
                "Number of requests currently executing, by kind (readOnly or mutating).",
                inflight.clone(),
            );
            metrics.register(
                "apiserver_dropped_requests",
                "Number of requests refused with 429 'Try again later', by kind.",
                dropped.clone(),
            );
            let slots = |kind: &str, limit: u32| {
                let labels = KindLabels { request_kind: kind.to_owned() };
                Slots {
                    limit: limit as usize,
                    used: Arc::new(AtomicUsize::new(0)),
                    gauge: inflight.get_or_create(&labels).clone(),
                    dropped: dropped.get_or_create(&labels).clone(),
                }
            };
            Mode::MaxInFlight {
                read_only: slots("readOnly", config.max_requests_inflight),
                mutating: slots("mutating", config.max_mutating_requests_inflight),
            }
        };
        FlowController { mode }
    }

    /// Admits a request to execute, after waiting in its queue if need be,
    /// or answers the 429 it gets.
    pub(crate) async fn admit(&self, request: &Attributes, long_running: LongRunning) -> Result<Admitted, Response> {
        match &self.mode {
            Mode::Unlimited => Ok(Admitted::unclassified()),
            _ if long_running == LongRunning::Stream => Ok(Admitted::unclassified()),
            Mode::MaxInFlight { .. } if long_running == LongRunning::Watch => Ok(Admitted::unclassified()),
            Mode::MaxInFlight { read_only, mutating } => {
                let slots =
                    if matches!(request.verb.as_str(), "get" | "list" | "watch") { read_only } else { mutating };
                match slots.take() {
                    Some(seat) => Ok(Admitted { _seat: Some(seat), headers: None }),
                    // Upstream never refuses its super-users.
                    None if request.user.groups.iter().any(|g| g == "system:masters") => Ok(Admitted::unclassified()),
                    None => {
                        slots.dropped.inc();
                        Err(too_many_requests(None))
                    }
                }
            }
            Mode::Apf(apf) => apf.admit(request).await,
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    request_kind: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LevelLabels {
    priority_level: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FlowLabels {
    priority_level: String,
    flow_schema: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectLabels {
    priority_level: String,
    flow_schema: String,
    reason: String,
}

/// Seats of one kind when APF is off.
struct Slots {
    /// 0: no limit.
    limit: usize,
    used: Arc<AtomicUsize>,
    gauge: Gauge,
    dropped: Counter,
}

impl Slots {
    fn take(&self) -> Option<Seat> {
        if self.limit == 0 {
            return Some(Seat { release: Release::Nothing, executing: None });
        }
        let taken =
            self.used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| (used < self.limit).then_some(used + 1));
        taken.ok()?;
        self.gauge.inc();
        Some(Seat { release: Release::Slot(self.used.clone()), executing: Some(self.gauge.clone()) })
    }
}

/// What a seat gives back when the request ends.
enum Release {
    Nothing,
    Slot(Arc<AtomicUsize>),
    Level(Arc<Level>),
}

/// One executing request's seat.
struct Seat {
    release: Release,
    executing: Option<Gauge>,
}

impl Drop for Seat {
    fn drop(&mut self) {
        if let Some(gauge) = &self.executing {
            gauge.dec();
        }
        match &self.release {
            Release::Nothing => {}
            Release::Slot(used) => {
                used.fetch_sub(1, Ordering::AcqRel);
            }
            Release::Level(level) => level.release(),
        }
    }
}

/// API Priority and Fairness.
struct Apf {
    /// In matching order.
    schemas: Vec<Schema>,
    wait_limit: Duration,
    /// Fixed, as upstream's: a flow keeps its queues across restarts.
    hasher: foldhash::fast::FixedState,
}

struct Schema {
    rules: Vec<PolicyRules>,
    distinguisher: Option<Distinguisher>,
    level: Arc<Level>,
    uid: HeaderValue,
    executing: Gauge,
    waiting: Gauge,
    rejected_queue_full: Counter,
    rejected_concurrency_limit: Counter,
    rejected_time_out: Counter,
}

/// Why a request was refused (the `reason` label of upstream's metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    QueueFull,
    ConcurrencyLimit,
    TimeOut,
}

/// A UID that stays the same for the same name across restarts: a
/// name-based (SHA-1) UUID, as the kinds are not stored objects here.
fn uid(kind: &str, name: &str) -> HeaderValue {
    let digest = ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("flowcontrol.apiserver.k8s.io/{kind}/{name}").as_bytes(),
    );
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest.as_ref()[..16]);
    let uid = uuid::Builder::from_sha1_bytes(bytes).into_uuid();
    HeaderValue::from_str(&uid.to_string()).expect("a UUID is a valid header value")
}

impl Apf {
    fn new(config: &FlowControl, metrics: &Metrics) -> Apf {
        let executing = Family::<FlowLabels, Gauge>::default();
        let waiting = Family::<FlowLabels, Gauge>::default();
        let rejected = Family::<RejectLabels, Counter>::default();
        let nominal = Family::<LevelLabels, Gauge>::default();
        metrics.register(
            "apiserver_flowcontrol_current_executing_requests",
            "Number of requests executing in API Priority and Fairness, by priority level and flow schema.",
            executing.clone(),
        );
        metrics.register(
            "apiserver_flowcontrol_current_inqueue_requests",
            "Number of requests waiting in API Priority and Fairness queues, by priority level and flow schema.",
            waiting.clone(),
        );
        metrics.register(
            "apiserver_flowcontrol_rejected_requests",
            "Number of requests rejected by API Priority and Fairness, by priority level, flow schema and reason.",
            rejected.clone(),
        );
        metrics.register(
            "apiserver_flowcontrol_nominal_limit_seats",
            "Nominal number of execution seats configured for each priority level.",
            nominal.clone(),
        );
        let total = u64::from(config.total_concurrency());
        let shares: u64 = config
            .priority_levels
            .iter()
            .map(|l| match l.kind {
                PriorityLevelKind::Limited { nominal_concurrency_shares, .. } => u64::from(nominal_concurrency_shares),
                PriorityLevelKind::Exempt => 0,
            })
            .sum();
        let levels: Vec<(String, Arc<Level>)> = config
            .priority_levels
            .iter()
            .map(|level| {
                let (limit, queuing) = match &level.kind {
                    PriorityLevelKind::Exempt => (None, None),
                    PriorityLevelKind::Limited { nominal_concurrency_shares, limit_response } => {
                        let seats = (total * u64::from(*nominal_concurrency_shares)).div_ceil(shares.max(1)).max(1);
                        let queuing = match limit_response {
                            LimitResponse::Reject => None,
                            LimitResponse::Queue(q) => Some(QueueShape {
                                hand: (q.hand_size.max(1) as usize).min(q.queues.max(1) as usize).min(MAX_HAND_SIZE),
                                length_limit: q.queue_length_limit as usize,
                            }),
                        };
                        let queues = match limit_response {
                            LimitResponse::Queue(q) => q.queues.max(1) as usize,
                            LimitResponse::Reject => 0,
                        };
                        nominal
                            .get_or_create(&LevelLabels { priority_level: level.name.clone() })
                            .set(seats.try_into().unwrap_or(i64::MAX));
                        (Some((seats as usize, queues)), queuing)
                    }
                };
                let state = LevelState {
                    executing: 0,
                    waiting: 0,
                    queues: (0..limit.map_or(0, |(_, queues)| queues)).map(|_| VecDeque::new()).collect(),
                    next: 0,
                    next_id: 0,
                };
                let level_runtime = Level {
                    uid: uid("prioritylevelconfigurations", &level.name),
                    limit: limit.map(|(seats, _)| seats),
                    queuing,
                    state: Mutex::new(state),
                };
                (level.name.clone(), Arc::new(level_runtime))
            })
            .collect();
        let mut ordered: Vec<&FlowSchema> = config.flow_schemas.iter().collect();
        ordered.sort_by(|a, b| a.matching_precedence.cmp(&b.matching_precedence).then_with(|| a.name.cmp(&b.name)));
        let schemas = ordered
            .into_iter()
            .filter_map(|schema| {
                let Some((_, level)) = levels.iter().find(|(name, _)| *name == schema.priority_level) else {
                    tracing::warn!(
                        flow_schema = %schema.name,
                        priority_level = %schema.priority_level,
                        "flow schema names no configured priority level; it is ignored"
                    );
                    return None;
                };
                let flow =
                    FlowLabels { priority_level: schema.priority_level.clone(), flow_schema: schema.name.clone() };
                let rejected_for = |reason: &str| {
                    rejected
                        .get_or_create(&RejectLabels {
                            priority_level: flow.priority_level.clone(),
                            flow_schema: flow.flow_schema.clone(),
                            reason: reason.to_owned(),
                        })
                        .clone()
                };
                Some(Schema {
                    rules: schema.rules.clone(),
                    distinguisher: schema.distinguisher,
                    level: level.clone(),
                    uid: uid("flowschemas", &schema.name),
                    executing: executing.get_or_create(&flow).clone(),
                    waiting: waiting.get_or_create(&flow).clone(),
                    rejected_queue_full: rejected_for("queue-full"),
                    rejected_concurrency_limit: rejected_for("concurrency-limit"),
                    rejected_time_out: rejected_for("time-out"),
                })
            })
            .collect();
        Apf { schemas, wait_limit: config.request_wait_limit, hasher: Default::default() }
    }

    /// The hash a flow's queues are dealt from.
    fn flow_hash(&self, schema: usize, distinguisher: &str) -> u64 {
        self.hasher.hash_one((schema, distinguisher))
    }

    /// The index of the schema that classifies `request`.
    fn classify(&self, request: &Attributes) -> Option<usize> {
        self.schemas.iter().position(|schema| schema.rules.iter().any(|rule| rule.matches(request)))
    }

    async fn admit(&self, request: &Attributes) -> Result<Admitted, Response> {
        // Upstream's mandatory catch-all matches everyone; a configuration
        // without one leaves the unmatched unlimited.
        let Some(index) = self.classify(request) else { return Ok(Admitted::unclassified()) };
        let schema = &self.schemas[index];
        let level = &schema.level;
        let headers = (schema.uid.clone(), level.uid.clone());
        let flow = || {
            let distinguisher = match schema.distinguisher {
                None => "",
                Some(Distinguisher::ByUser) => request.user.name.as_str(),
                Some(Distinguisher::ByNamespace) => request.namespace.as_str(),
            };
            self.flow_hash(index, distinguisher)
        };
        let release = match level.acquire(flow, self.wait_limit, &schema.waiting).await {
            Ok(true) => Release::Level(level.clone()),
            Ok(false) => Release::Nothing,
            Err(refusal) => {
                match refusal {
                    Refusal::QueueFull => schema.rejected_queue_full.inc(),
                    Refusal::ConcurrencyLimit => schema.rejected_concurrency_limit.inc(),
                    Refusal::TimeOut => schema.rejected_time_out.inc(),
                };
                return Err(too_many_requests(Some((&headers.0, &headers.1))));
            }
        };
        schema.executing.inc();
        Ok(Admitted {
            _seat: Some(Seat { release, executing: Some(schema.executing.clone()) }),
            headers: Some(headers),
        })
    }
}

struct QueueShape {
    hand: usize,
    length_limit: usize,
}

/// A priority level's seats and queues.
struct Level {
    uid: HeaderValue,
    /// Seats; `None` when exempt.
    limit: Option<usize>,
    /// `None`: refuse rather than queue.
    queuing: Option<QueueShape>,
    state: Mutex<LevelState>,
}

struct LevelState {
    executing: usize,
    waiting: usize,
    queues: Vec<VecDeque<Waiter>>,
    /// The queue the round robin serves next.
    next: usize,
    next_id: u64,
}

struct Waiter {
    id: u64,
    /// Receives the seat.
    seat: oneshot::Sender<()>,
}

impl Level {
    fn lock(&self) -> MutexGuard<'_, LevelState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes a seat (`Ok(true)`), or executes without one on an exempt
    /// level (`Ok(false)`), waiting in the flow's queue if need be.
    async fn acquire(
        self: &Arc<Self>,
        flow: impl FnOnce() -> u64,
        wait_limit: Duration,
        waiting_gauge: &Gauge,
    ) -> Result<bool, Refusal> {
        let Some(limit) = self.limit else { return Ok(false) };
        let (receiver, queue, id) = {
            let mut state = self.lock();
            if state.executing < limit && state.waiting == 0 {
                state.executing += 1;
                return Ok(true);
            }
            let Some(shape) = &self.queuing else { return Err(Refusal::ConcurrencyLimit) };
            let queue = shortest_of_hand(flow(), shape.hand, &state.queues);
            if state.queues[queue].len() >= shape.length_limit {
                return Err(Refusal::QueueFull);
            }
            let (sender, receiver) = oneshot::channel();
            let id = state.next_id;
            state.next_id += 1;
            state.queues[queue].push_back(Waiter { id, seat: sender });
            state.waiting += 1;
            (receiver, queue, id)
        };
        let mut waiting = Waiting { level: self, queue, id, settled: false, gauge: waiting_gauge };
        waiting_gauge.inc();
        let granted = matches!(tokio::time::timeout(wait_limit, receiver).await, Ok(Ok(())));
        // A seat sent while the wait timed out is still ours.
        if granted || !waiting.withdraw() {
            waiting.settled = true;
            return Ok(true);
        }
        waiting.settled = true;
        Err(Refusal::TimeOut)
    }

    /// Gives a seat back and hands free seats to the queued, round robin.
    fn release(&self) {
        let mut state = self.lock();
        state.executing -= 1;
        let limit = self.limit.unwrap_or(usize::MAX);
        let queues = state.queues.len();
        while state.executing < limit && state.waiting > 0 {
            for _ in 0..queues {
                let queue = state.next;
                state.next = (state.next + 1) % queues;
                if let Some(waiter) = state.queues[queue].pop_front() {
                    state.waiting -= 1;
                    if waiter.seat.send(()).is_ok() {
                        state.executing += 1;
                    }
                    break;
                }
            }
        }
    }
}

/// A request in a queue; if it goes away (its client did), it leaves the
/// queue, or gives back the seat it was just handed.
struct Waiting<'a> {
    level: &'a Arc<Level>,
    queue: usize,
    id: u64,
    settled: bool,
    gauge: &'a Gauge,
}

impl Waiting<'_> {
    /// Leaves the queue; false if the request was dispatched meanwhile.
    fn withdraw(&self) -> bool {
        let mut state = self.level.lock();
        let queue = &mut state.queues[self.queue];
        match queue.iter().position(|w| w.id == self.id) {
            Some(at) => {
                queue.remove(at);
                state.waiting -= 1;
                true
            }
            None => false,
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.gauge.dec();
        if !self.settled && !self.withdraw() {
            self.level.release();
        }
    }
}

/// Shuffle sharding: deals `hand` distinct queues from the flow's hash and
/// returns the shortest of them.
fn shortest_of_hand(mut hash: u64, hand: usize, queues: &[VecDeque<Waiter>]) -> usize {
    let deck = queues.len();
    let hand = hand.clamp(1, deck.min(MAX_HAND_SIZE));
    // The cards dealt so far, sorted: each new card is an index among the
    // queues not dealt yet, shifted past the earlier ones.
    let mut dealt = [0usize; MAX_HAND_SIZE];
    let mut best = 0;
    for i in 0..hand {
        let remaining = (deck - i) as u64;
        let mut card = (hash % remaining) as usize;
        hash /= remaining;
        let mut at = 0;
        while at < i && dealt[at] <= card {
            card += 1;
            at += 1;
        }
        dealt.copy_within(at..i, at + 1);
        dealt[at] = card;
        if i == 0 || queues[card].len() < queues[best].len() {
            best = card;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(user: &str, groups: &[&str], verb: &str, group: &str, resource: &str, namespace: &str) -> Attributes {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        Attributes {
            user: UserInfo::new(user, groups),
            verb: verb.into(),
            resource_request: !resource.is_empty(),
            api_group: group.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            namespace: namespace.into(),
            ..Default::default()
        }
    }

    fn path(user: &str, groups: &[&str], path: &str) -> Attributes {
        Attributes { user: UserInfo::new(user, groups), verb: "get".into(), path: path.into(), ..Default::default() }
    }

    #[test]
    fn default_schemas_classify_as_upstream() {
        let apf = Apf::new(&FlowControl::default(), &Metrics::new());
        let node = ["system:nodes", "system:authenticated"];
        let user = ["system:authenticated"];
        let cases = [
            (request("admin", &["system:masters"], "list", "", "pods", ""), "exempt"),
            (path("anyone", &["system:unauthenticated"], "/readyz"), "probes"),
            (path("anyone", &["system:unauthenticated"], "/version"), "global-default"),
            (
                request("system:node:n1", &node, "update", "coordination.k8s.io", "leases", "kube-node-lease"),
                "system-node-high",
            ),
            (request("system:node:n1", &node, "patch", "", "nodes/status", ""), "system-node-high"),
            (request("system:node:n1", &node, "list", "", "pods", ""), "system-nodes"),
            (request("system:node:n1", &node, "get", "", "secrets", "default"), "system-nodes"),
            (
                request("system:kube-scheduler", &user, "update", "coordination.k8s.io", "leases", "kube-system"),
                "system-leader-election",
            ),
            (request("system:kube-scheduler", &user, "create", "", "pods/binding", "default"), "kube-scheduler"),
            (
                request("system:kube-controller-manager", &user, "list", "apps", "replicasets", ""),
                "kube-controller-manager",
            ),
            (
                request(
                    "system:serviceaccount:kube-system:job-controller",
                    &["system:serviceaccounts"],
                    "get",
                    "",
                    "configmaps",
                    "team",
                ),
                "workload-leader-election",
            ),
            (
                request(
                    "system:serviceaccount:kube-system:job-controller",
                    &["system:serviceaccounts"],
                    "list",
                    "batch",
                    "jobs",
                    "",
                ),
                "kube-system-service-accounts",
            ),
            (
                request(
                    "system:serviceaccount:team:builder",
                    &["system:serviceaccounts", "system:authenticated"],
                    "list",
                    "",
                    "pods",
                    "team",
                ),
                "service-accounts",
            ),
            (request("alice", &user, "list", "", "configmaps", "default"), "global-default"),
            (request("alice", &[], "list", "", "configmaps", "default"), "none"),
        ];
        let names: Vec<String> = {
            let mut ordered: Vec<FlowSchema> = FlowControl::default().flow_schemas;
            ordered.sort_by(|a, b| a.matching_precedence.cmp(&b.matching_precedence).then_with(|| a.name.cmp(&b.name)));
            ordered.into_iter().map(|s| s.name).collect()
        };
        for (request, expected) in cases {
            let got = apf.classify(&request).map_or("none", |i| names[i].as_str());
            assert_eq!(got, expected, "{request:?}");
        }
    }

    #[test]
    fn nominal_limits_share_the_total_as_upstream() {
        let metrics = Metrics::new();
        let apf = Apf::new(&FlowControl::default(), &metrics);
        let text = metrics.render();
        // 600 seats over 245 shares.
        for (level, seats) in [
            ("system", 74),
            ("node-high", 98),
            ("leader-election", 25),
            ("workload-high", 98),
            ("workload-low", 245),
            ("global-default", 49),
            ("catch-all", 13),
        ] {
            let line = format!("apiserver_flowcontrol_nominal_limit_seats{{priority_level=\"{level}\"}} {seats}");
            assert!(text.contains(&line), "{line} in {text}");
        }
        assert!(apf.schemas.iter().all(|s| s.uid.to_str().unwrap().len() == 36));
        assert_eq!(uid("flowschemas", "exempt"), uid("flowschemas", "exempt"), "stable across restarts");
        assert_ne!(uid("flowschemas", "exempt"), uid("prioritylevelconfigurations", "exempt"));
    }

    #[test]
    fn long_running_requests_as_upstream() {
        for (path, query, expected) in [
            ("/api/v1/namespaces/d/pods", Some("watch=true"), LongRunning::Watch),
            ("/api/v1/pods", Some("limit=5&watch=1"), LongRunning::Watch),
            ("/api/v1/pods", Some("watch=false"), LongRunning::No),
            ("/api/v1/namespaces/d/pods/p/exec", Some("command=ls"), LongRunning::Stream),
            ("/api/v1/namespaces/d/pods/p/log", None, LongRunning::Stream),
            ("/api/v1/namespaces/d/pods/p/attach", None, LongRunning::Stream),
            ("/api/v1/namespaces/d/pods/p/portforward", None, LongRunning::Stream),
            ("/api/v1/nodes/n1/proxy", None, LongRunning::Stream),
            ("/apis/apps/v1/namespaces/d/deployments/x/scale", None, LongRunning::No),
            ("/api/v1/namespaces/d/configmaps/log", None, LongRunning::No),
            ("/api/v1/namespaces/log", None, LongRunning::No),
            ("/api/v1/namespaces/d/pods/p/status", None, LongRunning::No),
            ("/healthz/log", None, LongRunning::No),
        ] {
            assert_eq!(LongRunning::of(path, query), expected, "{path} {query:?}");
        }
    }

    #[test]
    fn shuffle_sharding_deals_distinct_queues() {
        let queues: Vec<VecDeque<Waiter>> = (0..8).map(|_| VecDeque::new()).collect();
        // All queues empty: the first card dealt wins.
        for hash in [0, 1, 7, 12345, u64::MAX] {
            assert_eq!(shortest_of_hand(hash, 3, &queues), (hash % 8) as usize);
        }
        let mut queues = queues;
        for (i, queue) in queues.iter_mut().enumerate() {
            for id in 0..(8 - i as u64) {
                queue.push_back(Waiter { id, seat: oneshot::channel().0 });
            }
        }
        // Dealt every queue, a flow joins the shortest (the last).
        assert_eq!(shortest_of_hand(42, 8, &queues), 7);
    }

    fn tight(limit_response: LimitResponse) -> FlowControl {
        FlowControl::default()
            .with_max_requests_inflight(1)
            .with_max_mutating_requests_inflight(0)
            .with_request_wait_limit(Duration::from_secs(60))
            .with_flow_schema(
                FlowSchema::new("everyone", "tight", 5)
                    .rule(PolicyRules::everything([Subject::group("system:authenticated")])),
            )
            .with_priority_level(PriorityLevel::limited("tight", 1_000_000, limit_response))
    }

    #[tokio::test]
    async fn a_full_level_queues_then_refuses_and_frees_seats_in_turn() {
        let metrics = Metrics::new();
        let control = Arc::new(FlowController::new(&tight(LimitResponse::Queue(Queuing::new(1, 1, 1))), &metrics));
        let alice = request("alice", &["system:authenticated"], "list", "", "pods", "default");
        let first = control.admit(&alice, LongRunning::No).await.expect("a free seat");
        let mut headers = HeaderMap::new();
        first.stamp(&mut headers);
        assert!(headers.contains_key(FLOW_SCHEMA_UID_HEADER) && headers.contains_key(PRIORITY_LEVEL_UID_HEADER));
        // The second waits in the only queue; the third finds it full.
        let second = tokio::spawn({
            let (control, alice) = (control.clone(), alice.clone());
            async move { control.admit(&alice, LongRunning::No).await.is_ok() }
        });
        let queued =
            r#"apiserver_flowcontrol_current_inqueue_requests{priority_level="tight",flow_schema="everyone"} 1"#;
        while !metrics.render().contains(queued) {
            tokio::task::yield_now().await;
        }
        assert_eq!(control.admit(&alice, LongRunning::No).await.err().expect("queue full").status(), 429);
        drop(first);
        assert!(second.await.unwrap(), "the queued request gets the freed seat");
        // Exempt users are never queued; streams skip flow control.
        let admin = request("admin", &["system:masters"], "list", "", "pods", "");
        assert!(control.admit(&admin, LongRunning::No).await.is_ok());
        assert!(control.admit(&alice, LongRunning::Stream).await.is_ok());
    }

    /// Two flows in one level: one with five requests queued, one with a
    /// single request queued last. The queues are served round robin, so
    /// the light flow does not wait behind the heavy one.
    #[tokio::test]
    async fn queues_are_served_round_robin_so_a_light_flow_passes_a_heavy_one() {
        let metrics = Metrics::new();
        let by_user = FlowSchema::new("everyone", "tight", 5)
            .distinguished_by(Distinguisher::ByUser)
            .rule(PolicyRules::everything([Subject::group("system:authenticated")]));
        let config = tight(LimitResponse::Queue(Queuing::new(8, 1, 10))).with_flow_schema(by_user);
        let control = Arc::new(FlowController::new(&config, &metrics));
        let as_user = |user: &str| request(user, &["system:authenticated"], "list", "", "pods", "default");
        let queue_of = |user: &str| {
            let Mode::Apf(apf) = &control.mode else { unreachable!("APF is on") };
            let index = apf.classify(&as_user(user)).unwrap();
            // One queue dealt of eight: the hash picks it.
            apf.flow_hash(index, user) % 8
        };
        let light = (0..).map(|i| format!("light-{i}")).find(|light| queue_of(light) != queue_of("heavy")).unwrap();

        let seat = control.admit(&as_user("heavy"), LongRunning::No).await.expect("a free seat");
        let served = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for (user, queued) in
            [("heavy", 1), ("heavy", 2), ("heavy", 3), ("heavy", 4), ("heavy", 5), (light.as_str(), 6)]
        {
            let (control, served, request) = (control.clone(), served.clone(), as_user(user));
            let name = user.to_owned();
            waiters.push(tokio::spawn(async move {
                let seat = control.admit(&request, LongRunning::No).await.expect("queued, then served");
                served.lock().unwrap().push(name);
                drop(seat);
            }));
            let line = format!(
                r#"apiserver_flowcontrol_current_inqueue_requests{{priority_level="tight",flow_schema="everyone"}} {queued}"#
            );
            while !metrics.render().contains(&line) {
                tokio::task::yield_now().await;
            }
        }
        drop(seat);
        for waiter in waiters {
            waiter.await.unwrap();
        }
        let served = served.lock().unwrap().clone();
        assert_eq!(served.len(), 6);
        let light_at = served.iter().position(|u| *u == light).unwrap();
        assert!(light_at <= 1, "served in turn, not after the heavy flow's backlog: {served:?}");
    }

    #[tokio::test]
    async fn a_full_queue_or_a_rejecting_level_answers_429_with_retry_after() {
        for limit_response in [LimitResponse::Reject, LimitResponse::Queue(Queuing::new(1, 1, 0))] {
            let metrics = Metrics::new();
            let control = FlowController::new(&tight(limit_response.clone()), &metrics);
            let alice = request("alice", &["system:authenticated"], "get", "", "pods", "default");
            let _seat = control.admit(&alice, LongRunning::No).await.expect("a free seat");
            let refused = control.admit(&alice, LongRunning::Watch).await.err().expect("no seat, no room");
            assert_eq!(refused.status(), 429);
            assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
            assert!(refused.headers().contains_key(PRIORITY_LEVEL_UID_HEADER));
            let reason = if limit_response == LimitResponse::Reject { "concurrency-limit" } else { "queue-full" };
            let line = format!(
                r#"apiserver_flowcontrol_rejected_requests_total{{priority_level="tight",flow_schema="everyone",reason="{reason}"}} 1"#
            );
            assert!(metrics.render().contains(&line), "{line}");
        }
    }

    #[tokio::test]
    async fn max_in_flight_without_apf_limits_by_kind_and_spares_masters() {
        let metrics = Metrics::new();
        let config = FlowControl::default()
            .with_priority_and_fairness(false)
            .with_max_requests_inflight(1)
            .with_max_mutating_requests_inflight(1);
        let control = FlowController::new(&config, &metrics);
        let read = request("alice", &[], "list", "", "pods", "d");
        let write = request("alice", &[], "create", "", "pods", "d");
        let reading = control.admit(&read, LongRunning::No).await.ok().unwrap();
        let _writing = control.admit(&write, LongRunning::No).await.ok().unwrap();
        assert_eq!(control.admit(&read, LongRunning::No).await.err().unwrap().status(), 429);
        assert!(control.admit(&read, LongRunning::Watch).await.is_ok(), "long-running requests are not counted");
        let admin = request("admin", &["system:masters"], "list", "", "pods", "");
        assert!(control.admit(&admin, LongRunning::No).await.is_ok());
        assert!(metrics.render().contains(r#"apiserver_current_inflight_requests{request_kind="readOnly"} 1"#));
        drop(reading);
        assert!(control.admit(&read, LongRunning::No).await.is_ok());
        assert!(metrics.render().contains(r#"apiserver_dropped_requests_total{request_kind="readOnly"} 1"#));
    }

    #[tokio::test]
    async fn a_request_that_waits_too_long_is_refused_and_leaves_its_queue() {
        let metrics = Metrics::new();
        let config =
            tight(LimitResponse::Queue(Queuing::new(2, 1, 5))).with_request_wait_limit(Duration::from_millis(1));
        let control = FlowController::new(&config, &metrics);
        let alice = request("alice", &["system:authenticated"], "get", "", "pods", "default");
        let seat = control.admit(&alice, LongRunning::No).await.ok().unwrap();
        assert_eq!(control.admit(&alice, LongRunning::No).await.err().unwrap().status(), 429);
        assert!(metrics.render().contains(r#"reason="time-out"} 1"#));
        assert!(metrics.render().contains(
            r#"apiserver_flowcontrol_current_inqueue_requests{priority_level="tight",flow_schema="everyone"} 0"#
        ));
        drop(seat);
        assert!(control.admit(&alice, LongRunning::No).await.is_ok(), "the seat came back, the queue is empty");
    }
}
