//! One module per subcommand.

pub mod apiserver;
pub mod store_demo;
