//! # orchestra-ctrl
//!
//! Will hold the controller runtime (informers, work queue, Reconciler, leader election) and the built-in controllers.
//!
//! Not implemented yet: this crate is a placeholder in the workspace so that
//! the crate map and the dependency direction are fixed from the start. Its
//! content is tracked by issue 5.
