//! Service account tokens for the `serviceAccountToken` sources of a
//! pod's projected volumes, as the kubelet's token manager gets them: one
//! TokenRequest (`POST .../serviceaccounts/<account>/token`) per audience
//! and lifetime, bound to the pod (name and UID), so that the token stops
//! authenticating once the pod is gone. A token is requested again once
//! it is older than 80% of its lifetime, or than 24 hours.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

/// What a token is requested for: its audience (`""`: the API server's
/// own) and its lifetime in seconds (`None`: the server's default).
pub type TokenKey = (String, Option<i64>);

/// The oldest a token gets before it is requested again, whatever its lifetime.
const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// The share of its lifetime after which a token is requested again.
const REFRESH_PERCENT: u32 = 80;

/// The tokens the `serviceAccountToken` sources of `pod`'s projected
/// volumes need, each once.
///
/// ```
/// use orchestra_node::agent::tokens::token_sources;
///
/// let pod = serde_json::from_value(serde_json::json!({
///     "metadata": {"name": "p"},
///     "spec": {"containers": [], "volumes": [{"name": "v", "projected": {"sources": [
///         {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
///         {"serviceAccountToken": {"path": "vault", "audience": "vault"}},
///     ]}}]},
/// }))
/// .unwrap();
/// assert_eq!(token_sources(&pod), [(String::new(), Some(3607)), ("vault".to_owned(), None)]);
/// ```
pub fn token_sources(pod: &Pod) -> Vec<TokenKey> {
    let mut keys: Vec<TokenKey> = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .flat_map(|v| v.projected.iter().flat_map(|p| p.sources.iter().flatten()))
        .filter_map(|source| source.service_account_token.as_ref())
        .map(|token| (token.audience.clone().unwrap_or_default(), token.expiration_seconds))
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Whether a token issued at `issued` for `lifetime` must be requested
/// again at `now` (upstream's `requiresRefresh`, without its jitter).
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use orchestra_node::agent::tokens::requires_refresh;
///
/// let issued = SystemTime::UNIX_EPOCH;
/// let hour = Duration::from_secs(3600);
/// assert!(!requires_refresh(issued, hour, issued + Duration::from_secs(2000)));
/// assert!(requires_refresh(issued, hour, issued + Duration::from_secs(2900)));
/// ```
pub fn requires_refresh(issued: SystemTime, lifetime: Duration, now: SystemTime) -> bool {
    now >= issued + refresh_after(lifetime)
}

fn refresh_after(lifetime: Duration) -> Duration {
    (lifetime * REFRESH_PERCENT / 100).min(MAX_TTL)
}

/// One token a [`PodTokens`] holds.
#[derive(Debug, Clone)]
struct Issued {
    token: String,
    issued: SystemTime,
    lifetime: Duration,
}

/// The tokens of one pod, requested when first needed and again when due.
///
/// ```
/// use orchestra_node::agent::tokens::PodTokens;
///
/// // A pod worker keeps one; nothing is due before a token is requested.
/// let tokens = PodTokens::new();
/// assert_eq!(tokens.next_refresh(), None);
/// ```
#[derive(Debug, Default)]
pub struct PodTokens {
    issued: HashMap<TokenKey, Issued>,
}

impl PodTokens {
    /// No tokens yet.
    pub fn new() -> PodTokens {
        PodTokens::default()
    }

    /// The token for every source of `pod` ([`token_sources`]), each
    /// requested through `client` if it is missing or due, or why it could
    /// not be had (the API's refusal).
    pub async fn tokens(&mut self, client: &Client, pod: &Pod) -> HashMap<TokenKey, Result<String, String>> {
        let wanted = token_sources(pod);
        self.issued.retain(|key, _| wanted.contains(key));
        let mut out = HashMap::new();
        let now = SystemTime::now();
        for key in wanted {
            let fresh = self.issued.get(&key).filter(|t| !requires_refresh(t.issued, t.lifetime, now));
            let result = match fresh {
                Some(fresh) => Ok(fresh.token.clone()),
                None => match request(client, pod, &key).await {
                    Ok(issued) => {
                        let token = issued.token.clone();
                        self.issued.insert(key.clone(), issued);
                        Ok(token)
                    }
                    // A token still valid serves until the API answers again.
                    Err(error) => match self.issued.get(&key).filter(|t| now < t.issued + t.lifetime) {
                        Some(valid) => Ok(valid.token.clone()),
                        None => Err(error),
                    },
                },
            };
            out.insert(key, result);
        }
        out
    }

    /// When the first token is due to be requested again, if any.
    pub fn next_refresh(&self) -> Option<SystemTime> {
        self.issued.values().map(|t| t.issued + refresh_after(t.lifetime)).min()
    }
}

/// `POST /api/v1/namespaces/<ns>/serviceaccounts/<account>/token` for `pod`.
async fn request(client: &Client, pod: &Pod, (audience, expiration): &TokenKey) -> Result<Issued, String> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let spec = pod.spec.clone().unwrap_or_default();
    let account = spec
        .service_account_name
        .filter(|n| !n.is_empty())
        .or(spec.service_account.filter(|n| !n.is_empty()))
        .unwrap_or_else(|| "default".into());
    let mut request_spec = json!({
        "boundObjectRef": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod.metadata.name.clone().unwrap_or_default(),
            "uid": pod.metadata.uid.clone().unwrap_or_default(),
        },
    });
    if !audience.is_empty() {
        request_spec["audiences"] = json!([audience]);
    }
    if let Some(seconds) = expiration {
        request_spec["expirationSeconds"] = json!(seconds);
    }
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": request_spec});
    let accounts =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "ServiceAccount"), "serviceaccounts");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &accounts);
    let issued = SystemTime::now();
    let answer: serde_json::Value = api
        .create_subresource("token", &account, &PostParams::default(), &body)
        .await
        .map_err(|error| match error {
            kube::Error::Api(status) => status.message,
            other => other.to_string(),
        })?;
    let token =
        answer["status"]["token"].as_str().filter(|t| !t.is_empty()).ok_or("the TokenRequest returned no token")?;
    let seconds = answer["spec"]["expirationSeconds"].as_i64().or(*expiration).unwrap_or(3600).max(0) as u64;
    Ok(Issued { token: token.to_owned(), issued, lifetime: Duration::from_secs(seconds) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_comes_at_80_percent_or_a_day() {
        let issued = SystemTime::UNIX_EPOCH;
        let secs = Duration::from_secs;
        #[rustfmt::skip]
        let cases = [
            // (lifetime, age, due)
            (secs(3607), secs(2885), false),
            (secs(3607), secs(2886), true),
            (secs(600), secs(479), false),
            (secs(600), secs(480), true),
            // A two-day token is refreshed after a day.
            (secs(48 * 3600), secs(24 * 3600 - 1), false),
            (secs(48 * 3600), secs(24 * 3600), true),
        ];
        for (lifetime, age, due) in cases {
            assert_eq!(requires_refresh(issued, lifetime, issued + age), due, "{lifetime:?} {age:?}");
        }
        let tokens = PodTokens {
            issued: HashMap::from([
                ((String::new(), Some(3600)), Issued { token: "a".into(), issued, lifetime: secs(3600) }),
                (("x".into(), Some(600)), Issued { token: "b".into(), issued, lifetime: secs(600) }),
            ]),
        };
        assert_eq!(tokens.next_refresh(), Some(issued + secs(480)));
    }
}
