//! PostgreSQL's MD5 password scheme.
//!
//! The stored secret is `"md5" + hex(md5(password ++ user))`; on login the server sends a
//! 4-byte salt and the client answers `"md5" + hex(md5(hex_of_stored ++ salt))`. Knowing the
//! stored hash is therefore enough to log in, which is why pgvia prefers SCRAM.

use ::md5::{Digest, Md5};
use subtle::ConstantTimeEq;

/// Length of `"md5"` plus 32 hex digits.
pub const MD5_PASSWORD_LEN: usize = 35;

/// The stored form: `"md5" + hex(md5(password ++ user))`.
pub fn md5_hash(user: &str, password: &str) -> String {
    md5_hex(&[password.as_bytes(), user.as_bytes()])
}

/// The response to an MD5 challenge with `salt`, given the stored form `"md5<32 hex>"`.
pub fn md5_salted(stored_md5: &str, salt: [u8; 4]) -> String {
    let hex = stored_md5.strip_prefix("md5").unwrap_or(stored_md5);
    md5_hex(&[hex.as_bytes(), &salt])
}

/// Whether `response` (a PasswordMessage's text, without its NUL) answers the challenge
/// `salt` for the stored hash. Constant-time in the contents of `response`.
pub fn verify_md5_response(stored_md5: &str, salt: [u8; 4], response: &[u8]) -> bool {
    md5_salted(stored_md5, salt).as_bytes().ct_eq(response).into()
}

/// Whether `s` is a stored MD5 hash as PostgreSQL recognises one: `md5` and 32 lowercase hex.
pub fn is_md5_hash(s: &str) -> bool {
    s.len() == MD5_PASSWORD_LEN
        && s.starts_with("md5")
        && s.bytes().skip(3).all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn md5_hex(parts: &[&[u8]]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut h = Md5::new();
    for p in parts {
        h.update(p);
    }
    let mut out = String::with_capacity(MD5_PASSWORD_LEN);
    out.push_str("md5");
    for b in h.finalize() {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_postgresql() {
        // From PostgreSQL 15: SET password_encryption = 'md5'; CREATE ROLE m PASSWORD 'pencil'.
        assert_eq!(md5_hash("m", "pencil"), "md58bbf3f45673bf67d02e4214911f3417f");
        assert!(is_md5_hash(&md5_hash("m", "pencil")));
    }

    #[test]
    fn matches_postgres_protocol() {
        let salt = [0x01, 0x02, 0xfe, 0xff];
        for (user, password) in [("m", "pencil"), ("", ""), ("ünï", "pässwörd")] {
            let theirs =
                postgres_protocol::authentication::md5_hash(user.as_bytes(), password.as_bytes(), salt);
            assert_eq!(md5_salted(&md5_hash(user, password), salt), theirs);
            assert!(verify_md5_response(&md5_hash(user, password), salt, theirs.as_bytes()));
            assert_eq!(postgres_protocol::password::md5(password.as_bytes(), user), md5_hash(user, password));
        }
    }

    #[test]
    fn rejects_wrong_responses() {
        let stored = md5_hash("m", "pencil");
        let salt = [1, 2, 3, 4];
        let right = md5_salted(&stored, salt);
        assert!(verify_md5_response(&stored, salt, right.as_bytes()));
        assert!(!verify_md5_response(&stored, [1, 2, 3, 5], right.as_bytes()));
        assert!(!verify_md5_response(&stored, salt, &right.as_bytes()[..34]));
        assert!(!verify_md5_response(&stored, salt, b""));
        assert!(!verify_md5_response(&stored, salt, stored.as_bytes()));
    }

    #[test]
    fn recognises_hashes() {
        assert!(is_md5_hash("md58bbf3f45673bf67d02e4214911f3417f"));
        assert!(!is_md5_hash("md58BBF3F45673BF67D02E4214911F3417F"));
        assert!(!is_md5_hash("md58bbf3f45673bf67d02e4214911f3417"));
        assert!(!is_md5_hash("md58bbf3f45673bf67d02e4214911f3417fa"));
        assert!(!is_md5_hash("xyz8bbf3f45673bf67d02e4214911f3417f"));
        assert!(!is_md5_hash("md5ü8bf3f45673bf67d02e4214911f3417"));
    }
}
