//! MutatingAdmissionWebhook: the webhooks of MutatingWebhookConfigurations,
//! called in order, each able to change the object with a JSON patch.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;

use super::{Dispatcher, Invocation, Kind, convert, rejection};
use crate::api::ApiError;
use crate::auth::admission::{AdmissionPlugin, AdmissionRequest, ObjectReader};

/// The admission plugin of `admissionregistration.k8s.io/v1`
/// MutatingWebhookConfigurations, like upstream's
/// `MutatingAdmissionWebhook`.
///
/// In the mutating phase each matching webhook is sent an `admission.k8s.io/v1` AdmissionReview,
/// one after the other in configuration name order, and may answer with a
/// `JSONPatch` (RFC 6902) that the object is changed by before the next
/// one is called. A refusal is the client's error (`admission webhook
/// "<name>" denied the request: <message>`, with the webhook's code, 400
/// if it gave none); a webhook's warnings become the response's `Warning`
/// headers. A webhook that cannot be called, times out (`timeoutSeconds`,
/// 10 by default) or answers wrongly fails the write with 500 under
/// `failurePolicy: Fail` (the default) and is skipped under `Ignore`; a
/// patch that does not apply, or changes the object's name or namespace,
/// fails it with 500 whatever the policy. A
/// dry run is refused with 400 by a matching webhook whose `sideEffects`
/// is neither `None` nor `NoneOnDryRun`.
///
/// Webhooks with `reinvocationPolicy: IfNeeded` are called once more, in
/// order, when a webhook called after them changed the object. The
/// built-in plugins before this one in the chain are not run again: in
/// the server's default chain this plugin is the last mutating one.
///
/// # Matching
///
/// Matching follows upstream's dispatcher: a webhook is called when one of
/// its `rules` matches the request (operation, API group, version,
/// resource and subresource — `*` is every resource, `pods/*` pods and
/// every subresource of pods, `*/*` everything —, and scope), its
/// `namespaceSelector` matches the labels of the request's namespace (a
/// Namespace's own labels when the Namespace itself is written; requests
/// for other cluster-scoped kinds always match) and its `objectSelector`
/// matches the labels of the object or of the old object. With
/// `matchPolicy: Equivalent` (the default) a rule that names another
/// version or group of the same resource matches too, and the webhook then
/// receives the object in the version its rule names. The equivalences
/// this server knows are those of its registry: kinds kept in the same
/// storage, i.e. the versions of a CustomResourceDefinition and
/// `events.k8s.io/v1` Events with `core/v1` Events; it serves no
/// deprecated copies of built-in kinds (such as `extensions/v1beta1`
/// Deployments) for other equivalences to come from.
///
/// Webhooks are never called for writes of the webhook configurations
/// themselves, so that a broken webhook cannot prevent its own removal.
///
/// A `clientConfig.service` reference is reached as upstream's endpoint
/// routing reaches it: the review goes to a ready address of the Service's
/// Endpoints, on the port its service port (`port`, 443 by default)
/// targets, and the webhook's certificate is checked for the name
/// `<service>.<namespace>.svc`; an `ExternalName` Service's name is dialed
/// on `port`. A Service without ready endpoints fails the call.
///
/// What the server does not do: `matchConditions`
/// (CEL) are refused when a configuration is written; a webhook stored with
/// them fails its calls the same way. The client certificate and token
/// presented to a webhook are those a [`WebhookClientAuth`](super::WebhookClientAuth)
/// holds for its host
/// ([`ApiServerBuilder::admission_webhook_client_auth`](crate::server::ApiServerBuilder::admission_webhook_client_auth));
/// none by default. An answer's `auditAnnotations` annotate the request's
/// audit events as `<webhook name>/<key>`.
///
/// ```
/// use std::sync::Arc;
/// use orchestra_core::auth::admission::{AdmissionChain, MutatingAdmissionWebhook, StaticObjects};
///
/// // Configurations (and namespaces) read from `objects` at every write;
/// // `ApiServerBuilder::mutating_admission_webhook` keeps them from a watch.
/// let objects = Arc::new(StaticObjects::new());
/// let chain = AdmissionChain::new().with(MutatingAdmissionWebhook::new(objects));
/// assert_eq!(chain.names().collect::<Vec<_>>(), [MutatingAdmissionWebhook::NAME]);
/// ```
#[derive(Clone)]
pub struct MutatingAdmissionWebhook {
    dispatcher: Dispatcher,
}

impl std::fmt::Debug for MutatingAdmissionWebhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MutatingAdmissionWebhook").finish_non_exhaustive()
    }
}

impl MutatingAdmissionWebhook {
    /// The plugin's name.
    pub const NAME: &'static str = "MutatingAdmissionWebhook";

    /// The plugin, reading the MutatingWebhookConfigurations and the
    /// namespaces from `objects` at every write (equivalent resources are
    /// those of the built-in kinds).
    pub fn new(objects: Arc<dyn ObjectReader>) -> MutatingAdmissionWebhook {
        MutatingAdmissionWebhook { dispatcher: Dispatcher::reading(Kind::Mutating, objects) }
    }

    pub(crate) fn with_dispatcher(dispatcher: Dispatcher) -> MutatingAdmissionWebhook {
        MutatingAdmissionWebhook { dispatcher }
    }

    /// Calls one webhook and applies its patch; true if the object changed.
    async fn call(&self, invocation: &Invocation, request: &mut AdmissionRequest<'_>) -> Result<bool, ApiError> {
        let webhook = &invocation.webhook;
        Dispatcher::check_dry_run(webhook, request)?;
        let reply = match self.dispatcher.call(invocation, request).await {
            Ok(reply) => reply,
            Err(reason) if webhook.ignore_failures => {
                tracing::warn!(webhook = %webhook.name, %reason, "failed calling webhook, failing open");
                return Ok(false);
            }
            Err(reason) => {
                tracing::warn!(webhook = %webhook.name, %reason, "failed calling webhook, failing closed");
                return Err(Dispatcher::call_failed(webhook, &reason));
            }
        };
        reply.note(&webhook.name, request);
        if !reply.allowed {
            return Err(rejection(&webhook.name, &reply.status));
        }
        let Some(patch) = &reply.patch else { return Ok(false) };
        let patch: json_patch::Patch = serde_json::from_slice(patch).map_err(|e| {
            ApiError::internal(format!("admission webhook {:?} returned an invalid JSON patch: {e}", webhook.name))
        })?;
        if patch.0.is_empty() {
            return Ok(false);
        }
        let resource = request.resource;
        let subresource = request.subresource;
        let Some(object) = request.object.as_mut() else {
            return Err(ApiError::internal(format!(
                "admission webhook {:?} attempted to modify the object, which is not supported for this operation",
                webhook.name
            )));
        };
        // The patch is about the object as the webhook received it: in the
        // version its rule named.
        let equivalent = invocation.equivalent.as_deref().filter(|_| subresource.is_none());
        let mut patched = match equivalent {
            Some(to) => convert(object, resource, to),
            None => object.clone(),
        };
        json_patch::patch(&mut patched, &patch.0).map_err(|e| ApiError::internal(e.to_string()))?;
        if let Some(from) = equivalent {
            patched = convert(&patched, from, resource);
        }
        // The server has chosen where the object is stored by now.
        for field in ["name", "namespace"] {
            if patched.pointer(&format!("/metadata/{field}")) != object.pointer(&format!("/metadata/{field}")) {
                return Err(ApiError::internal(format!(
                    "admission webhook {:?} may not change metadata.{field}",
                    webhook.name
                )));
            }
        }
        let changed = patched != *object;
        *object = patched;
        Ok(changed)
    }
}

#[async_trait]
impl AdmissionPlugin for MutatingAdmissionWebhook {
    fn name(&self) -> &str {
        Self::NAME
    }

    async fn mutate(&self, request: &mut AdmissionRequest<'_>) -> Result<(), ApiError> {
        let invocations = self.dispatcher.invocations(request).await?;
        // Upstream's reinvocation bookkeeping: the IfNeeded webhooks called
        // since the object last changed, and those to call again because
        // it changed after them.
        let mut invoked = BTreeSet::new();
        let mut reinvoke = BTreeSet::new();
        for invocation in &invocations {
            if self.call(invocation, request).await? {
                reinvoke.append(&mut invoked);
            }
            if invocation.webhook.reinvoke {
                invoked.insert(invocation.webhook.id.clone());
            }
        }
        if reinvoke.is_empty() {
            return Ok(());
        }
        // Matched again against the changed object; a webhook not called
        // in the first round is not called now.
        for invocation in self.dispatcher.invocations(request).await? {
            if reinvoke.contains(&invocation.webhook.id) {
                self.call(&invocation, request).await?;
            }
        }
        Ok(())
    }
}
