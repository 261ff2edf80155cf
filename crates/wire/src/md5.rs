//! MD5 password hashing as PostgreSQL does it. (Filled in by the auth work.)
