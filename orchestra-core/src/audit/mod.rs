//! Auditing: upstream's `audit.k8s.io/v1` `Policy` decides at which
//! [`Level`] each request is logged; the API server records every request
//! (401s and 403s included) as [`Event`]s, one per [`Stage`], and hands
//! them to [`AuditSink`]s — the built-in one, [`LogBackend`], writes JSON
//! lines to a file it rotates (kube-apiserver's `--audit-log-*` flags).
//!
//! Every response carries the request's `Audit-Id` header. Secrets',
//! TokenRequests' and TokenReviews' bodies are never logged, whatever the
//! policy says: those requests are capped at [`Level::Metadata`].
//!
//! ```
//! # fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use orchestra_core::audit::{Auditor, LogBackend, LogOptions, Policy};
//! use orchestra_core::server::ApiServer;
//! use orchestra_store::MemStore;
//!
//! let dir = tempfile::tempdir()?;
//! let policy = Policy::parse("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Metadata}]\n")?;
//! let log = LogBackend::open(LogOptions::new(dir.path().join("audit.log")).max_size_megabytes(100).max_backups(3))?;
//! let builder = ApiServer::builder(Arc::new(MemStore::new())).audit(Auditor::new(policy).with_sink(log));
//! # let _ = builder;
//! # Ok(()) }
//! # tokio::runtime::Runtime::new().unwrap().block_on(async { demo() }).unwrap();
//! ```

mod event;
mod log;
mod policy;
mod record;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use event::{Event, EventUser, ObjectReference};
pub use log::{LogBackend, LogOptions};
pub use policy::{GroupResources, Policy, PolicyError, PolicyRule, RequestAuditConfig};
pub(crate) use record::Record;

/// How much of a request is logged, in increasing order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Level {
    /// Nothing.
    None,
    /// The request's metadata: user, verb, object, response status,
    /// timestamps; no bodies.
    Metadata,
    /// Metadata and the request body.
    Request,
    /// Metadata, the request body and the response body.
    RequestResponse,
}

/// The stages of a request, each logged as one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Stage {
    /// The request was received (and authenticated).
    RequestReceived,
    /// The response's headers were sent; long-running requests only
    /// (watches, logs, exec).
    ResponseStarted,
    /// The response was sent.
    ResponseComplete,
    /// The handler panicked.
    Panic,
}

/// Where audit events go; the built-in backend is [`LogBackend`].
///
/// `process` runs on the request's path: it must not block. A sink that
/// does I/O queues the event and writes it from a task or thread of its own.
///
/// ```
/// use std::sync::Mutex;
/// use orchestra_core::audit::{AuditSink, Event, Stage};
///
/// #[derive(Default)]
/// struct Memory(Mutex<Vec<(String, Stage)>>);
///
/// impl AuditSink for Memory {
///     fn process(&self, event: &Event) {
///         self.0.lock().unwrap().push((event.audit_id.clone(), event.stage));
///     }
/// }
///
/// let sink = Memory::default();
/// sink.process(&Event::new("id-1", "get", "/version"));
/// assert_eq!(sink.0.lock().unwrap()[0], ("id-1".to_owned(), Stage::RequestReceived));
/// ```
pub trait AuditSink: Send + Sync + 'static {
    /// Takes one event; must return at once.
    fn process(&self, event: &Event);
}

/// The API server's auditing: a [`Policy`] and the sinks its events go to
/// (`ApiServerBuilder::audit`).
#[derive(Clone)]
pub struct Auditor {
    policy: Arc<Policy>,
    sinks: Vec<Arc<dyn AuditSink>>,
}

impl std::fmt::Debug for Auditor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auditor").field("policy", &self.policy).field("sinks", &self.sinks.len()).finish()
    }
}

impl Auditor {
    /// Audits by `policy`, to no sink yet.
    pub fn new(policy: Policy) -> Auditor {
        Auditor { policy: Arc::new(policy), sinks: Vec::new() }
    }

    /// Also sends every event to `sink`.
    pub fn with_sink(mut self, sink: impl AuditSink) -> Auditor {
        self.sinks.push(Arc::new(sink));
        self
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    fn emit(&self, event: &Event) {
        for sink in &self.sinks {
            sink.process(event);
        }
    }
}

/// True for requests whose bodies are never logged: they carry secrets
/// (Secrets, TokenRequests, TokenReviews).
fn carries_secrets(attributes: &crate::auth::Attributes) -> bool {
    matches!(
        (attributes.api_group.as_str(), attributes.resource.as_str(), attributes.subresource.as_str()),
        ("", "secrets", _) | ("", "serviceaccounts", "token") | ("authentication.k8s.io", "tokenreviews", _)
    )
}
