//! The built-in controllers, one module each.
