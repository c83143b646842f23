//! Strategic merge patch and the patch metadata it shares with server-side
//! apply: which lists merge by key, which are sets, which maps are atomic.

pub mod meta;
mod shape;
mod strategic;

pub use shape::{FieldMeta, ListType, Schemas, Shape};
pub use strategic::{PatchError, PatchErrorKind, strategic_merge};

#[cfg(all(test, feature = "server"))]
mod properties;

#[cfg(test)]
mod tests {
    use super::meta::{ATOMIC_TYPES, FIELD_STRATEGIES, RETAIN_KEYS_FIELDS, Strategy};
    use k8s_openapi::schemars::{JsonSchema, SchemaGenerator};

    fn visit<T: JsonSchema>(generator: &mut SchemaGenerator) {
        generator.subschema_for::<T>();
    }

    /// Every entry of the curated table names a field of a type that exists,
    /// so a typo fails here.
    #[test]
    fn table_names_existing_fields() {
        use k8s_openapi::api::{
            admissionregistration::v1 as admission, apps::v1 as apps, autoscaling::v2 as autoscaling,
            batch::v1 as batch, certificates::v1 as certificates, core::v1 as core, discovery::v1 as discovery,
            flowcontrol::v1 as flowcontrol, networking::v1 as networking, node::v1 as node, policy::v1 as policy,
            storage::v1 as storage,
        };
        let mut generator = SchemaGenerator::default();
        let g = &mut generator;
        visit::<admission::MutatingWebhookConfiguration>(g);
        visit::<admission::ValidatingWebhookConfiguration>(g);
        visit::<admission::ValidatingAdmissionPolicy>(g);
        visit::<admission::ValidatingAdmissionPolicyBinding>(g);
        visit::<apps::DaemonSet>(g);
        visit::<apps::Deployment>(g);
        visit::<apps::ReplicaSet>(g);
        visit::<apps::StatefulSet>(g);
        visit::<autoscaling::HorizontalPodAutoscaler>(g);
        visit::<batch::Job>(g);
        visit::<batch::CronJob>(g);
        visit::<certificates::CertificateSigningRequest>(g);
        visit::<core::ComponentStatus>(g);
        visit::<core::Pod>(g);
        visit::<core::Node>(g);
        visit::<core::Namespace>(g);
        visit::<core::PersistentVolumeClaim>(g);
        visit::<core::ReplicationController>(g);
        visit::<core::Service>(g);
        visit::<core::ServiceAccount>(g);
        visit::<core::Event>(g);
        visit::<discovery::EndpointSlice>(g);
        visit::<flowcontrol::FlowSchema>(g);
        visit::<flowcontrol::PriorityLevelConfiguration>(g);
        visit::<networking::ServiceCIDR>(g);
        visit::<node::RuntimeClass>(g);
        visit::<policy::PodDisruptionBudget>(g);
        visit::<storage::CSIDriver>(g);
        visit::<storage::CSINode>(g);
        visit::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(g);
        visit::<k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService>(g);
        let definitions = generator.definitions();
        for entry in FIELD_STRATEGIES {
            let definition =
                definitions.get(entry.type_name).unwrap_or_else(|| panic!("no schema type {}", entry.type_name));
            let field = definition
                .pointer(&format!("/properties/{}", entry.field))
                .unwrap_or_else(|| panic!("{} has no field {}", entry.type_name, entry.field));
            let is_array = field.get("type").and_then(|t| t.as_str()) == Some("array");
            match entry.strategy {
                Strategy::ListMap(keys) => {
                    assert!(is_array, "{}.{} is not a list", entry.type_name, entry.field);
                    let items = field["items"]["$ref"].as_str().expect("list-map items are named types");
                    let items = definitions.get(items.rsplit('/').next().unwrap()).expect("item type exists");
                    for key in keys {
                        assert!(
                            items.pointer(&format!("/properties/{key}")).is_some(),
                            "{}.{} items have no key {key}",
                            entry.type_name,
                            entry.field
                        );
                    }
                }
                Strategy::ListSet | Strategy::AtomicList => {
                    assert!(is_array, "{}.{} is not a list", entry.type_name, entry.field)
                }
                Strategy::AtomicMap => assert!(!is_array),
            }
        }
        for (type_name, field) in RETAIN_KEYS_FIELDS {
            assert!(
                definitions.get(*type_name).and_then(|d| d.pointer(&format!("/properties/{field}"))).is_some(),
                "{type_name} has no field {field}"
            );
        }
        for name in ATOMIC_TYPES {
            assert!(definitions.contains_key(*name), "no schema type {name}");
        }
    }
}
