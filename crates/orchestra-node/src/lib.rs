//! # orchestra-node
//!
//! Will hold the node agent (pod workers, status, leases, probes), the RuntimeBackend, service proxy, pod network and DNS.
//!
//! Not implemented yet: this crate is a placeholder in the workspace so that
//! the crate map and the dependency direction are fixed from the start. Its
//! content is tracked by issue 6.
