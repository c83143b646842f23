//! DefaultStorageClass: claims that name no StorageClass get the default one.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::{AdmissionPlugin, AdmissionRequest, ObjectReader, Operation, ResourceRef};
use crate::api::ApiError;

const STORAGE_CLASSES: ResourceRef<'static> = ResourceRef::new("storage.k8s.io", "v1", "storageclasses");

/// The annotations that mark a default StorageClass (the beta one too).
const DEFAULT_CLASS_ANNOTATIONS: [&str; 2] =
    ["storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"];

/// The annotation that named a claim's class before `spec.storageClassName`.
const BETA_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

/// The admission plugin that gives PersistentVolumeClaim creates without
/// a class the default StorageClass, like upstream's plugin of the same
/// name: a claim with no `spec.storageClassName` (an empty name is a
/// choice, no class) and no `volume.beta.kubernetes.io/storage-class`
/// annotation gets the class annotated
/// `storageclass.kubernetes.io/is-default-class: "true"`. Of several
/// defaults, the newest wins (the name breaks ties); without one, the claim
/// is left as it is.
///
/// ```
/// use std::sync::Arc;
/// use orchestra_core::auth::admission::{AdmissionChain, DefaultStorageClass, StaticObjects};
///
/// let chain = AdmissionChain::new().with(DefaultStorageClass::new(Arc::new(StaticObjects::new())));
/// assert_eq!(chain.names().collect::<Vec<_>>(), [DefaultStorageClass::NAME]);
/// ```
#[derive(Clone)]
pub struct DefaultStorageClass {
    objects: Arc<dyn ObjectReader>,
}

impl DefaultStorageClass {
    /// The plugin's name.
    pub const NAME: &'static str = "DefaultStorageClass";

    /// The plugin, reading StorageClasses from `objects`.
    pub fn new(objects: Arc<dyn ObjectReader>) -> DefaultStorageClass {
        DefaultStorageClass { objects }
    }

    /// The name of the default class, if there is one.
    async fn default_class(&self) -> Result<Option<String>, ApiError> {
        let classes = self.objects.list(STORAGE_CLASSES, None).await?;
        let is_default = |class: &&Value| {
            DEFAULT_CLASS_ANNOTATIONS.iter().any(|key| class["metadata"]["annotations"][key] == "true")
        };
        let name = |class: &Value| class["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        // RFC 3339 timestamps in UTC order as strings.
        let newest = classes.iter().map(|class| &**class).filter(is_default).max_by(|a, b| {
            let created =
                |class: &Value| class["metadata"]["creationTimestamp"].as_str().unwrap_or_default().to_owned();
            created(a).cmp(&created(b)).then_with(|| name(b).cmp(&name(a)))
        });
        Ok(newest.map(name))
    }
}

#[async_trait]
impl AdmissionPlugin for DefaultStorageClass {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn handles(&self, operation: Operation) -> bool {
        operation == Operation::Create
    }

    async fn mutate(&self, request: &mut AdmissionRequest<'_>) -> Result<(), ApiError> {
        if !request.writes("", "persistentvolumeclaims") {
            return Ok(());
        }
        let Some(claim) = request.object.as_ref() else { return Ok(()) };
        let has_class = !claim["spec"]["storageClassName"].is_null()
            || !claim["metadata"]["annotations"][BETA_CLASS_ANNOTATION].is_null();
        if has_class {
            return Ok(());
        }
        if let Some(class) = self.default_class().await? {
            let claim = request.object.as_mut().expect("checked above");
            claim["spec"]["storageClassName"] = class.into();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::ResourceInfo;
    use crate::auth::UserInfo;
    use crate::auth::admission::StaticObjects;
    use crate::auth::admission::testing::admit;

    fn class(name: &str, default: Option<&str>, created: &str) -> Value {
        let mut class = json!({"metadata": {"name": name, "creationTimestamp": created}, "provisioner": "p"});
        if let Some(value) = default {
            class["metadata"]["annotations"] = json!({"storageclass.kubernetes.io/is-default-class": value});
        }
        class
    }

    #[test]
    fn claims_without_a_class_get_the_newest_default() {
        let claims = ResourceInfo::new("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", true);
        let old = class("old", Some("true"), "2024-01-01T00:00:00Z");
        let new = class("new", Some("true"), "2025-01-01T00:00:00Z");
        let twin = class("a-twin", Some("true"), "2025-01-01T00:00:00Z");
        let plain = class("plain", None, "2026-01-01T00:00:00Z");
        let off = class("off", Some("false"), "2026-01-01T00:00:00Z");
        let beta = json!({"metadata": {"name": "beta", "annotations": {"storageclass.beta.kubernetes.io/is-default-class": "true"}}});
        let bare = json!({"metadata": {"name": "data"}, "spec": {}});
        let named = json!({"metadata": {"name": "data"}, "spec": {"storageClassName": "fast"}});
        let none = json!({"metadata": {"name": "data"}, "spec": {"storageClassName": ""}});
        let annotated =
            json!({"metadata": {"name": "data", "annotations": {BETA_CLASS_ANNOTATION: "slow"}}, "spec": {}});
        #[rustfmt::skip]
        let cases: [(Vec<Value>, &Value, Value); 8] = [
            (vec![old.clone(), plain.clone()], &bare, json!("old")),
            (vec![old.clone(), new.clone(), plain.clone(), off.clone()], &bare, json!("new")),
            // Equally new: the first name wins.
            (vec![new.clone(), twin.clone()], &bare, json!("a-twin")),
            (vec![beta.clone()], &bare, json!("beta")),
            (vec![plain.clone(), off.clone()], &bare, Value::Null),
            (vec![new.clone()], &named, json!("fast")),
            (vec![new.clone()], &none, json!("")),
            (vec![new.clone()], &annotated, Value::Null),
        ];
        let user = UserInfo::anonymous();
        for (classes, claim, expected) in cases {
            let objects = StaticObjects::new();
            for class in &classes {
                objects.insert(STORAGE_CLASSES, class.clone());
            }
            let plugin = DefaultStorageClass::new(Arc::new(objects));
            let (admitted, _) =
                admit(&plugin, Operation::Create, &claims, Some("default"), &user, Some(claim.clone()), None);
            let admitted = admitted.unwrap().unwrap();
            assert_eq!(admitted["spec"]["storageClassName"], expected, "{claim} with {classes:?}");
        }
    }
}
