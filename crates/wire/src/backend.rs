//! Backend message views.
