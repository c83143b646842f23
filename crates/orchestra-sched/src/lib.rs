//! # orchestra-sched
//!
//! Will hold the scheduling framework (extension-point traits, queue, node snapshot, plugins, preemption).
//!
//! Not implemented yet: this crate is a placeholder in the workspace so that
//! the crate map and the dependency direction are fixed from the start. Its
//! content is tracked by issue 4.
