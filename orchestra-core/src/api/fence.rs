//! Writes fenced by a leader-election Lease. A client that holds a Lease
//! (a controller manager, a scheduler) sends
//!
//! ```text
//! Orchestra-Lease-Fence: <namespace>/<name>; holder=<identity>; transitions=<n>
//! ```
//!
//! with its writes, naming its leadership term. The write then lands only
//! while the Lease still names that holder and that `leaseTransitions`
//! count, atomically with the Lease's revision
//! (the API server's `FencedStore`); otherwise it fails with 409 Conflict.
//! A deposed leader that wakes up late cannot overwrite its successor's work.

use serde_json::Value;

/// Why a fence header does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FenceError(String);

/// The request header naming the writer's leadership term.
pub const HEADER: &str = "orchestra-lease-fence";

/// A leadership term: the Lease and what it must say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseFence {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// `spec.holderIdentity` of the term.
    pub holder: String,
    /// `spec.leaseTransitions` of the term.
    pub transitions: i32,
}

impl LeaseFence {
    /// Parses the header's value; `Err` is the message of a 400.
    pub fn parse(value: &str) -> Result<LeaseFence, FenceError> {
        let mut parts = value.split(';').map(str::trim);
        let lease = parts.next().unwrap_or_default();
        let (namespace, name) = lease
            .split_once('/')
            .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
            .ok_or_else(|| FenceError(format!("{HEADER}: expected <namespace>/<name> first, got {lease:?}")))?;
        let (mut holder, mut transitions) = (None, None);
        for part in parts {
            match part.split_once('=') {
                Some(("holder", v)) => holder = Some(super::escape::percent_decode(v)),
                Some(("transitions", v)) => {
                    transitions =
                        Some(v.parse::<i32>().map_err(|e| FenceError(format!("{HEADER}: transitions {v:?}: {e}")))?)
                }
                _ => return Err(FenceError(format!("{HEADER}: unexpected {part:?}"))),
            }
        }
        Ok(LeaseFence {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            holder: holder.ok_or_else(|| FenceError(format!("{HEADER}: holder=<identity> missing")))?,
            transitions: transitions.ok_or_else(|| FenceError(format!("{HEADER}: transitions=<n> missing")))?,
        })
    }

    /// The header's value for this term (the holder percent-encoded).
    pub fn header_value(&self) -> String {
        let holder = super::escape::percent_encode(&self.holder, b":/");
        format!("{}/{}; holder={holder}; transitions={}", self.namespace, self.name, self.transitions)
    }

    /// Why the Lease (its JSON; `None`: absent) does not allow this term's
    /// writes, or `None` when it does.
    pub fn refusal(&self, lease: Option<&Value>) -> Option<String> {
        let lease_name = format!("{}/{}", self.namespace, self.name);
        let Some(value) = lease else {
            return Some(format!("the lease {lease_name} does not exist"));
        };
        let holder = value.pointer("/spec/holderIdentity").and_then(Value::as_str).unwrap_or_default();
        let transitions = value.pointer("/spec/leaseTransitions").and_then(Value::as_i64).unwrap_or(0);
        (holder != self.holder || transitions != i64::from(self.transitions)).then(|| {
            format!(
                "the lease {lease_name} is held by {holder:?} (transitions {transitions}); this writer's term ({:?}, transitions {}) has ended",
                self.holder, self.transitions
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_round_trips() {
        let fence = LeaseFence {
            namespace: "kube-system".into(),
            name: "kube-controller-manager".into(),
            holder: "host-a_1f2e; odd".into(),
            transitions: 3,
        };
        let value = fence.header_value();
        assert_eq!(value, "kube-system/kube-controller-manager; holder=host-a_1f2e%3B%20odd; transitions=3");
        assert_eq!(LeaseFence::parse(&value).unwrap(), fence);
        assert!(LeaseFence::parse("nolease; holder=a; transitions=1").is_err());
        assert!(LeaseFence::parse("ns/l; holder=a").unwrap_err().to_string().contains("transitions"));
        assert!(LeaseFence::parse("ns/l; holder=a; transitions=x").is_err());
    }

    #[test]
    fn only_the_named_term_may_write() {
        let fence = LeaseFence { namespace: "ns".into(), name: "l".into(), holder: "a".into(), transitions: 2 };
        let lease = |holder: &str, transitions: i64| serde_json::json!({"spec": {"holderIdentity": holder, "leaseTransitions": transitions}});
        assert_eq!(fence.refusal(Some(&lease("a", 2))), None);
        assert!(fence.refusal(Some(&lease("b", 3))).unwrap().contains("held by \"b\""));
        assert!(fence.refusal(Some(&lease("a", 3))).is_some(), "the same holder in a later term");
        assert!(fence.refusal(None).unwrap().contains("does not exist"));
    }
}
