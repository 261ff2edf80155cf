//! Authentication.
