//! A simple Lease-based leader election (`coordination.k8s.io/v1`), as
//! client-go's: the holder renews `renewTime` every retry period; another
//! candidate takes over once the lease is older than its duration.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::watch;

/// A candidate for the lease.
#[derive(Clone)]
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    lease_duration: Duration,
    retry_period: Duration,
}

impl LeaderElector {
    /// A candidate `identity` for lease `namespace/name`.
    pub fn new(client: kube::Client, namespace: &str, name: &str, identity: &str, lease_duration: Duration, retry_period: Duration) -> LeaderElector {
        LeaderElector {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity: identity.into(),
            lease_duration,
            retry_period,
        }
    }

    /// The candidate's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// One attempt to acquire or renew; true when this candidate holds the lease.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let existing = self.api.get_opt(&self.name).await?;
        let Some(mut lease) = existing else {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(self.name.clone()), ..Default::default() },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(self.lease_duration.as_secs() as i32),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let duration = spec.lease_duration_seconds.map(|s| s as i64).unwrap_or(self.lease_duration.as_secs() as i64);
        let renewed = spec.renew_time.as_ref().map(|t| t.0);
        let expired = holder.is_empty()
            || renewed.is_none_or(|r| now.as_second() - r.as_second() > duration);
        if holder != self.identity {
            if !expired {
                return Ok(false);
            }
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.renew_time = Some(MicroTime(now));
        spec.lease_duration_seconds = Some(self.lease_duration.as_secs() as i32);
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits until this candidate holds the lease, then keeps renewing it in
    /// the background; the returned receiver turns false when it is lost.
    pub async fn acquire(&self) -> watch::Receiver<bool> {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => tracing::warn!("leader election: {e}"),
            }
            tokio::time::sleep(self.retry_period).await;
        }
        let (tx, rx) = watch::channel(true);
        let me = self.clone();
        tokio::spawn(async move {
            let mut last_ok = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(me.retry_period).await;
                if tx.is_closed() {
                    return;
                }
                match me.try_acquire_or_renew().await {
                    Ok(true) => last_ok = tokio::time::Instant::now(),
                    Ok(false) => {
                        let _ = tx.send(false);
                        return;
                    }
                    Err(e) => {
                        tracing::warn!("leader election renew: {e}");
                        if last_ok.elapsed() > me.lease_duration {
                            let _ = tx.send(false);
                            return;
                        }
                    }
                }
            }
        });
        rx
    }

    /// Gives the lease up (clears the holder) if held.
    pub async fn release(&self) -> Result<(), kube::Error> {
        if let Some(mut lease) = self.api.get_opt(&self.name).await? {
            let spec = lease.spec.get_or_insert_with(Default::default);
            if spec.holder_identity.as_deref() == Some(&self.identity) {
                spec.holder_identity = None;
                self.api.replace(&self.name, &PostParams::default(), &lease).await?;
            }
        }
        Ok(())
    }
}
