//! ValidatingAdmissionWebhook: the webhooks of
//! ValidatingWebhookConfigurations, called in parallel, each able to
//! refuse the write.

use std::sync::Arc;

use async_trait::async_trait;

use super::{Dispatcher, Invocation, Kind, rejection};
use crate::api::ApiError;
use crate::auth::admission::{AdmissionPlugin, AdmissionRequest, ObjectReader};

/// The admission plugin of `admissionregistration.k8s.io/v1`
/// ValidatingWebhookConfigurations, like upstream's
/// `ValidatingAdmissionWebhook`.
///
/// In the validating phase every matching webhook (matched as
/// [`MutatingAdmissionWebhook`](super::MutatingAdmissionWebhook) describes)
/// is sent an `admission.k8s.io/v1` AdmissionReview,
/// all at once; the write is refused if any refuses it (the client sees
/// the first refusal in configuration order: `admission webhook "<name>"
/// denied the request: <message>`, with the webhook's code, 400 if it gave
/// none). Warnings, `failurePolicy`, `timeoutSeconds` and dry runs are
/// handled as by [`MutatingAdmissionWebhook`](super::MutatingAdmissionWebhook);
/// a validating webhook may not answer with a patch.
///
/// ```
/// use std::sync::Arc;
/// use orchestra_core::auth::admission::{AdmissionChain, StaticObjects, ValidatingAdmissionWebhook};
///
/// let objects = Arc::new(StaticObjects::new());
/// let chain = AdmissionChain::new().with(ValidatingAdmissionWebhook::new(objects));
/// assert_eq!(chain.names().collect::<Vec<_>>(), [ValidatingAdmissionWebhook::NAME]);
/// ```
#[derive(Clone)]
pub struct ValidatingAdmissionWebhook {
    dispatcher: Dispatcher,
}

impl std::fmt::Debug for ValidatingAdmissionWebhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValidatingAdmissionWebhook").finish_non_exhaustive()
    }
}

impl ValidatingAdmissionWebhook {
    /// The plugin's name.
    pub const NAME: &'static str = "ValidatingAdmissionWebhook";

    /// The plugin, reading the ValidatingWebhookConfigurations and the
    /// namespaces from `objects` at every write (equivalent resources are
    /// those of the built-in kinds).
    pub fn new(objects: Arc<dyn ObjectReader>) -> ValidatingAdmissionWebhook {
        ValidatingAdmissionWebhook { dispatcher: Dispatcher::reading(Kind::Validating, objects) }
    }

    pub(crate) fn with_dispatcher(dispatcher: Dispatcher) -> ValidatingAdmissionWebhook {
        ValidatingAdmissionWebhook { dispatcher }
    }

    async fn call(&self, invocation: &Invocation, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        let webhook = &invocation.webhook;
        Dispatcher::check_dry_run(webhook, request)?;
        let reply = match self.dispatcher.call(invocation, request).await {
            Ok(reply) => reply,
            Err(reason) if webhook.ignore_failures => {
                tracing::warn!(webhook = %webhook.name, %reason, "failed calling webhook, failing open");
                return Ok(());
            }
            Err(reason) => {
                tracing::warn!(webhook = %webhook.name, %reason, "failed calling webhook, failing closed");
                return Err(Dispatcher::call_failed(webhook, &reason));
            }
        };
        reply.note(&webhook.name, request);
        match reply.allowed {
            true => Ok(()),
            false => Err(rejection(&webhook.name, &reply.status)),
        }
    }
}

#[async_trait]
impl AdmissionPlugin for ValidatingAdmissionWebhook {
    fn name(&self) -> &str {
        Self::NAME
    }

    async fn validate(&self, request: &AdmissionRequest<'_>) -> Result<(), ApiError> {
        let invocations = self.dispatcher.invocations(request).await?;
        let outcomes = futures::future::join_all(invocations.iter().map(|i| self.call(i, request))).await;
        outcomes.into_iter().collect()
    }
}
