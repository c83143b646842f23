//! # orchestra-core
//!
//! Will hold the API server (resource registry, request pipeline of authentication, authorization and admission, watch, discovery) and kube::Client constructors.
//!
//! Not implemented yet: this crate is a placeholder in the workspace so that
//! the crate map and the dependency direction are fixed from the start. Its
//! content is tracked by issue 3.
