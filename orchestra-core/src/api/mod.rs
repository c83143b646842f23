//! The types-only layer: resource descriptions and the registry, Status
//! errors, label and field selectors, resource quantities, object-meta
//! helpers, validation, OpenAPI documents, the schema view and strict
//! decoding. No I/O.

pub mod apply;
pub mod certificates;
pub mod conversion;
pub mod crd;
mod error;
pub mod escape;
pub mod fence;
pub mod fields;
pub mod meta;
pub mod net;
pub mod openapi;
pub mod openapi_v2;
pub mod patch;
pub mod pdb;
pub mod quantity;
pub mod quota;
mod registry;
mod resource;
pub mod review;
pub mod schema;
mod selector;
pub mod strict;
pub mod table;
mod triple;
pub mod validation;

pub use error::{ApiError, ErrorTarget, FieldError};
pub use registry::{EVENT_TTL, Registry};
pub use resource::{DecodeCheck, KindSchema, RESOURCE_VERBS, ResourceInfo, Scope, SubresourceInfo};
pub use selector::{
    FieldSelector, LabelSelector, SelectorError, escape_field_value, selector_is_empty, selector_matches,
};
