//! The types-only layer: resource descriptions and the registry, Status
//! errors, selectors, object-meta helpers and validation. No I/O.

pub mod crd;
mod error;
pub mod meta;
pub mod pdb;
mod registry;
mod resource;
mod selector;
pub mod validation;

pub use error::{ApiError, ErrorTarget, FieldError};
pub use registry::Registry;
pub use resource::{
    KindSchema, PrinterColumn, RESOURCE_VERBS, ResourceInfo, Scope, SubresourceInfo,
};
pub use selector::{FieldSelector, LabelSelector};
