//! Writes fenced by a leader-election Lease ([`LeaseFence`]): the store a
//! request that names its leadership term writes through.

use std::sync::Arc;

use orchestra_store::{FencedStore, KeyValue, Store};

pub use crate::api::fence::{HEADER, LeaseFence};
use crate::api::{ApiError, Registry};

/// `store` with its writes fenced by `term`: they land only while the
/// Lease names it, atomically with the Lease's revision.
pub(crate) fn fenced_store(
    term: LeaseFence,
    store: Arc<dyn Store>,
    registry: &Registry,
) -> Result<Arc<dyn Store>, ApiError> {
    let leases = registry
        .get("coordination.k8s.io", "v1", "leases")
        .ok_or_else(|| ApiError::bad_request("this server has no Leases to fence writes with"))?;
    let key = leases.storage_key(Some(&term.namespace), &term.name);
    let check = move |lease: Option<&KeyValue>| {
        let value = lease.map(|kv| serde_json::from_slice(&kv.value).unwrap_or_default());
        match term.refusal(value.as_ref()) {
            Some(reason) => Err(reason),
            None => Ok(()),
        }
    };
    Ok(Arc::new(FencedStore::new(store, key, Arc::new(check))))
}
