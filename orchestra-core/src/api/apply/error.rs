//! Why an apply fails, and the API errors upstream answers with.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};

use super::Context;
use crate::api::ApiError;

/// A field another manager owns with a different value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The other manager, described like upstream (see [`ManagedEntry::describe`](super::ManagedEntry::describe)).
    pub manager: String,
    /// The field, e.g. `.spec.replicas`.
    pub field: String,
}

/// The 409 Conflict upstream answers an apply with conflicts.
pub fn conflict_error(conflicts: &[Conflict]) -> ApiError {
    let message = match conflicts {
        [one] => format!("Apply failed with 1 conflict: conflict with {}: {}", one.manager, one.field),
        _ => {
            let mut managers: Vec<&str> = conflicts.iter().map(|c| c.manager.as_str()).collect();
            managers.sort();
            managers.dedup();
            let mut lines = Vec::new();
            for manager in managers {
                lines.push(format!("conflicts with {manager}:"));
                for conflict in conflicts.iter().filter(|c| c.manager == manager) {
                    lines.push(format!("- {}", conflict.field));
                }
            }
            format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
        }
    };
    ApiError {
        code: 409,
        reason: "Conflict",
        message,
        details: Some(Box::new(StatusDetails {
            causes: Some(
                conflicts
                    .iter()
                    .map(|c| StatusCause {
                        reason: Some("FieldManagerConflict".into()),
                        message: Some(format!("conflict with {}", c.manager)),
                        field: Some(c.field.clone()),
                    })
                    .collect(),
            ),
            ..Default::default()
        })),
    }
}

/// Why an apply failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyError {
    /// Other managers own fields the apply would change (409).
    Conflicts(Vec<Conflict>),
    /// The configuration does not fit the schema, e.g. a list-map item
    /// without its key (upstream: an untyped 500 kubectl prints as
    /// `Error from server: failed to create typed patch object ...`).
    Invalid(String),
}

impl ApplyError {
    /// The API error upstream answers.
    pub fn to_api_error(&self) -> ApiError {
        match self {
            ApplyError::Conflicts(conflicts) => conflict_error(conflicts),
            ApplyError::Invalid(message) => ApiError { code: 500, reason: "", message: message.clone(), details: None },
        }
    }
}

/// The upstream name of a group-version-kind, e.g. `apps/v1, Kind=Deployment`.
pub(super) fn gvk_string(ctx: &Context<'_>) -> String {
    let group_version =
        if ctx.api_version.contains('/') { ctx.api_version.to_owned() } else { format!("/{}", ctx.api_version) };
    format!("{group_version}, Kind={}", ctx.kind)
}
