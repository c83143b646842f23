//! The review kinds: create-only, cluster-scoped resources that the API
//! server answers from its authenticator and authorizer chains and never
//! stores (`kubectl auth can-i`, `auth can-i --list`, `auth whoami`, webhook
//! token and authorization checks).

use k8s_openapi::api::authentication::v1 as authentication;
use k8s_openapi::api::authorization::v1 as authorization;
use k8s_openapi::schemars::JsonSchema;

use super::resource::{KindSchema, ResourceInfo};

/// `authorization.k8s.io`.
pub const AUTHORIZATION_GROUP: &str = "authorization.k8s.io";
/// `authentication.k8s.io`.
pub const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";

/// Which review a resource is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewKind {
    /// `selfsubjectaccessreviews`: may the requesting user do this?
    SelfSubjectAccess,
    /// `subjectaccessreviews`: may the user in the spec do this?
    SubjectAccess,
    /// `selfsubjectrulesreviews`: what may the requesting user do?
    SelfSubjectRules,
    /// `tokenreviews`: whom does this bearer token authenticate?
    Token,
    /// `selfsubjectreviews`: who is the requesting user?
    SelfSubject,
}

impl ReviewKind {
    /// The review served as `group`/`plural`, if any.
    pub fn of(group: &str, plural: &str) -> Option<ReviewKind> {
        Some(match (group, plural) {
            (AUTHORIZATION_GROUP, "selfsubjectaccessreviews") => ReviewKind::SelfSubjectAccess,
            (AUTHORIZATION_GROUP, "subjectaccessreviews") => ReviewKind::SubjectAccess,
            (AUTHORIZATION_GROUP, "selfsubjectrulesreviews") => ReviewKind::SelfSubjectRules,
            (AUTHENTICATION_GROUP, "tokenreviews") => ReviewKind::Token,
            (AUTHENTICATION_GROUP, "selfsubjectreviews") => ReviewKind::SelfSubject,
            _ => return None,
        })
    }

    /// The review a registered resource is, if any.
    pub fn of_resource(info: &ResourceInfo) -> Option<ReviewKind> {
        ReviewKind::of(&info.group, &info.plural)
    }
}

fn review<K>(group: &str, kind: &str, plural: &str) -> ResourceInfo
where
    K: JsonSchema + serde::de::DeserializeOwned,
{
    let mut info = ResourceInfo::new(group, "v1", kind, plural, false)
        .verbs(&["create"])
        .with_schema(KindSchema::Typed(|generator| generator.subschema_for::<K>()));
    info.decode_check = Some(|value| K::deserialize(value).map(drop).map_err(|e| e.to_string()));
    info
}

/// The review resources, each with the verb `create` only.
pub fn resources() -> Vec<ResourceInfo> {
    vec![
        review::<authorization::SelfSubjectAccessReview>(
            AUTHORIZATION_GROUP,
            "SelfSubjectAccessReview",
            "selfsubjectaccessreviews",
        ),
        review::<authorization::SelfSubjectRulesReview>(
            AUTHORIZATION_GROUP,
            "SelfSubjectRulesReview",
            "selfsubjectrulesreviews",
        ),
        review::<authorization::SubjectAccessReview>(
            AUTHORIZATION_GROUP,
            "SubjectAccessReview",
            "subjectaccessreviews",
        ),
        review::<authentication::TokenReview>(AUTHENTICATION_GROUP, "TokenReview", "tokenreviews"),
        review::<authentication::SelfSubjectReview>(AUTHENTICATION_GROUP, "SelfSubjectReview", "selfsubjectreviews"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reviews_are_create_only_and_cluster_scoped() {
        let all = resources();
        assert_eq!(all.len(), 5);
        for info in &all {
            assert_eq!(info.verbs, ["create"]);
            assert!(!info.namespaced);
            assert!(ReviewKind::of_resource(info).is_some(), "{}", info.plural);
        }
        assert_eq!(ReviewKind::of("", "pods"), None);
    }
}
