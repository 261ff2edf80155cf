//! Frontend message views.
