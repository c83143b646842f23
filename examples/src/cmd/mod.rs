//! One module per subcommand.

pub mod store_demo;
