//! SCRAM-SHA-256 math. (Filled in by the auth work.)
