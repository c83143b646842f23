//! Leader election on `coordination.k8s.io/v1` Leases, like client-go's
//! `leaderelection` with a `LeaseLock`.
//!
//! A candidate acquires the lease when it is absent, expired
//! (`renewTime + leaseDurationSeconds` in the past) or already its own, by an
//! update guarded by the lease's resourceVersion. Each acquisition by a new
//! holder bumps `leaseTransitions`, which is the [`Fence`] token: writes that
//! carry it can be refused once a newer leader exists. The leader renews every
//! `retry_period`; failing to renew within `renew_deadline` it steps down. On
//! shutdown it releases the lease (empty holder, short duration) so the next
//! candidate takes over at once.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use orchestra_core::api::fence::{HEADER, LeaseFence};
use tokio::sync::watch;

/// Timing of an election (client-go defaults: 15 s, 10 s, 2 s).
///
/// Built from [`Default`] and the `with_*` setters, so that a new setting is
/// not a breaking change:
///
/// ```
/// use std::time::Duration;
/// use orchestra_ctrl::leader::ElectionConfig;
///
/// let config = ElectionConfig::default()
///     .with_lease_duration(Duration::from_secs(4))
///     .with_renew_deadline(Duration::from_secs(3))
///     .with_retry_period(Duration::from_millis(500));
/// assert_eq!(config.retry_period, Duration::from_millis(500));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ElectionConfig {
    /// How long a lease is valid after its last renewal.
    pub lease_duration: Duration,
    /// How long a leader keeps trying to renew before stepping down.
    pub renew_deadline: Duration,
    /// Interval between acquisition and renewal attempts.
    pub retry_period: Duration,
}

impl Default for ElectionConfig {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl ElectionConfig {
    /// Sets [`lease_duration`](Self::lease_duration).
    pub fn with_lease_duration(mut self, duration: Duration) -> Self {
        self.lease_duration = duration;
        self
    }

    /// Sets [`renew_deadline`](Self::renew_deadline).
    pub fn with_renew_deadline(mut self, deadline: Duration) -> Self {
        self.renew_deadline = deadline;
        self
    }

    /// Sets [`retry_period`](Self::retry_period).
    pub fn with_retry_period(mut self, period: Duration) -> Self {
        self.retry_period = period;
        self
    }
}

/// The fencing token of a leadership term.
#[derive(Clone, Debug)]
pub struct Fence {
    token: i32,
    leading: Arc<AtomicBool>,
    current: Arc<AtomicI32>,
    /// The Lease and term, `None` for [`Fence::always`].
    lease: Option<LeaseFence>,
}

impl Fence {
    /// The term's token: the lease's `leaseTransitions` when acquired.
    pub fn token(&self) -> i32 {
        self.token
    }

    /// Whether this term is still the leader as far as this process knows.
    /// Controllers check it before each write; a deposed leader stops writing.
    pub fn is_valid(&self) -> bool {
        self.leading.load(Ordering::SeqCst) && self.current.load(Ordering::SeqCst) == self.token
    }

    /// A fence that is always valid (for controllers run without election).
    pub fn always() -> Self {
        Self { token: 0, leading: Arc::new(AtomicBool::new(true)), current: Arc::new(AtomicI32::new(0)), lease: None }
    }

    /// The Lease and term this fence names (`None` without election).
    pub fn lease(&self) -> Option<&LeaseFence> {
        self.lease.as_ref()
    }

    /// `client` with this term attached to every request (the
    /// `Orchestra-Lease-Fence` header): the API server lets its writes land
    /// only while the Lease names this term, so a deposed leader's late
    /// writes fail with 409 Conflict instead of overwriting its successor's.
    /// Without election, `client` itself.
    pub fn client(&self, client: &Client) -> Client {
        let Some(lease) = &self.lease else {
            return client.clone();
        };
        let value = http::HeaderValue::from_str(&lease.header_value()).expect("the fence header is visible ASCII");
        let inner = client.clone();
        let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
            request.headers_mut().insert(HEADER, value.clone());
            let inner = inner.clone();
            async move { inner.send(request).await }
        });
        Client::new(service, client.default_namespace())
    }
}

/// A candidate in one election.
pub struct LeaderElector {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    config: ElectionConfig,
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

impl LeaderElector {
    /// A candidate `identity` for the lease `namespace/name`.
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            config: ElectionConfig::default(),
        }
    }

    /// Sets the timing.
    pub fn config(mut self, config: ElectionConfig) -> Self {
        self.config = config;
        self
    }

    /// One attempt to acquire or renew; the lease's `leaseTransitions` if held.
    pub async fn try_acquire_or_renew(&self) -> Result<Option<i32>, kube::Error> {
        let duration = self.config.lease_duration.as_secs().max(1) as i32;
        let existing = self.api.get_opt(&self.name).await?;
        let Some(mut lease) = existing else {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(self.name.clone()), ..Default::default() },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(duration),
                    acquire_time: Some(now()),
                    renew_time: Some(now()),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Some(0)),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let mine = holder == self.identity;
        if !mine && !holder.is_empty() {
            let renewed = spec.renew_time.as_ref().map(|t| t.0);
            let valid_for = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
            let expired = match renewed {
                Some(t) => {
                    let age = Timestamp::now().duration_since(t);
                    age.as_secs_f64() > valid_for.as_secs_f64()
                }
                None => true,
            };
            if !expired {
                return Ok(None);
            }
        }
        let mut transitions = spec.lease_transitions.unwrap_or(0);
        if !mine {
            transitions += 1;
            spec.acquire_time = Some(now());
        }
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(duration);
        spec.renew_time = Some(now());
        spec.lease_transitions = Some(transitions);
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(Some(transitions)),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Gives the lease up if this candidate holds it.
    pub async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(_) | Err(kube::Error::Api(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Campaigns until elected, runs `lead(fence, stop)` while leading, and
    /// returns when `lead` returns, leadership is lost (after `stop` fires
    /// and `lead` returns) or `shutdown` completes. The lease is released on
    /// the way out if still held.
    pub async fn run<F, Fut>(&self, lead: F, shutdown: impl Future<Output = ()> + Send) -> Result<(), kube::Error>
    where
        F: FnOnce(Fence, watch::Receiver<bool>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let mut shutdown = std::pin::pin!(shutdown);
        let token = loop {
            match self.try_acquire_or_renew().await {
                Ok(Some(t)) => break t,
                Ok(None) => {}
                Err(e) => tracing::warn!(lease = %self.name, error = %e, "acquire failed"),
            }
            tokio::select! {
                _ = &mut shutdown => return Ok(()),
                _ = tokio::time::sleep(self.config.retry_period) => {}
            }
        };
        tracing::info!(lease = %self.name, identity = %self.identity, token, "became leader");
        let leading = Arc::new(AtomicBool::new(true));
        let current = Arc::new(AtomicI32::new(token));
        let fence = Fence {
            token,
            leading: leading.clone(),
            current: current.clone(),
            lease: Some(LeaseFence {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                holder: self.identity.clone(),
                transitions: token,
            }),
        };
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut task = tokio::spawn(lead(fence, stop_rx));
        let mut last_renew = Instant::now();
        let mut finished = false;
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = &mut task => { finished = true; break }
                _ = tokio::time::sleep(self.config.retry_period) => {
                    match self.try_acquire_or_renew().await {
                        Ok(Some(t)) => {
                            current.store(t, Ordering::SeqCst);
                            last_renew = Instant::now();
                            if t != token { break; }
                        }
                        Ok(None) => break,
                        Err(_) if last_renew.elapsed() < self.config.renew_deadline => {}
                        Err(_) => break,
                    }
                }
            }
        }
        leading.store(false, Ordering::SeqCst);
        let _ = stop_tx.send(true);
        if !finished {
            let _ = task.await;
        }
        self.release().await
    }
}
