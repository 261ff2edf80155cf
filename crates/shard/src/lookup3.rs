//! Bob Jenkins' lookup3 hash as PostgreSQL's `src/common/hashfn.c` computes it, in its 64-bit
//! "extended" form (`hash_bytes_extended`, `hash_bytes_uint32_extended`): the functions behind
//! every hash opclass that hash partitioning uses.
//!
//! PostgreSQL reads the key as little-endian words on the machines we run on (its aligned and
//! unaligned paths agree there), so the byte-wise form below is exact. Every operation wraps,
//! as C's unsigned arithmetic does.

/// The initial value of all three state words, before the length and seed are added.
const GOLDEN: u32 = 0x9e37_79b9;
/// PostgreSQL adds this constant to the initial state (it is in lookup3's `hashlittle`).
const INIT_EXTRA: u32 = 3_923_095;

#[inline]
fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

#[inline]
fn finish(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(14));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(11));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(25));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(16));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(4));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(14));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(24));
}

/// The state after the length and seed are taken in.
fn start(len: u32, seed: u64) -> (u32, u32, u32) {
    let init = GOLDEN.wrapping_add(len).wrapping_add(INIT_EXTRA);
    let (mut a, mut b, mut c) = (init, init, init);
    if seed != 0 {
        a = a.wrapping_add((seed >> 32) as u32);
        b = b.wrapping_add(seed as u32);
        mix(&mut a, &mut b, &mut c);
    }
    (a, b, c)
}

/// Little-endian word from up to four bytes.
#[inline]
fn word(bytes: &[u8]) -> u32 {
    bytes.iter().enumerate().fold(0u32, |w, (i, &b)| w.wrapping_add(u32::from(b) << (8 * i)))
}

/// PostgreSQL's `hash_bytes_extended(k, keylen, seed)`.
pub fn hash_bytes_extended(key: &[u8], seed: u64) -> u64 {
    // PostgreSQL passes the length as an int and adds it into a uint32; keys longer than
    // that cannot reach a hash function (a datum is at most 1 GiB).
    let (mut a, mut b, mut c) = start(key.len() as u32, seed);
    let mut rest = key;
    while rest.len() >= 12 {
        a = a.wrapping_add(word(&rest[0..4]));
        b = b.wrapping_add(word(&rest[4..8]));
        c = c.wrapping_add(word(&rest[8..12]));
        mix(&mut a, &mut b, &mut c);
        rest = &rest[12..];
    }
    // The last 0-11 bytes: `a` takes bytes 0-3, `b` 4-7, and `c` 8-10 shifted up one byte,
    // because lookup3 keeps c's lowest byte for the length.
    let n = rest.len();
    a = a.wrapping_add(word(&rest[..n.min(4)]));
    if n > 4 {
        b = b.wrapping_add(word(&rest[4..n.min(8)]));
    }
    if n > 8 {
        c = c.wrapping_add(word(&rest[8..n]) << 8);
    }
    finish(&mut a, &mut b, &mut c);
    (u64::from(b) << 32) | u64::from(c)
}

/// PostgreSQL's `hash_bytes_uint32_extended(k, seed)`.
pub fn hash_uint32_extended(k: u32, seed: u64) -> u64 {
    let (mut a, mut b, mut c) = start(4, seed);
    a = a.wrapping_add(k);
    finish(&mut a, &mut b, &mut c);
    (u64::from(b) << 32) | u64::from(c)
}

/// PostgreSQL's `hash_combine64(a, b)`, which folds each key column's hash into the row's.
pub fn hash_combine64(a: u64, b: u64) -> u64 {
    a ^ b.wrapping_add(0x49a0_f4dd_15e5_a8e3).wrapping_add(a << 54).wrapping_add(a >> 7)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `hash_bytes_extended` over 4 little-endian bytes equals `hash_uint32_extended`, as in
    /// PostgreSQL, where both start from the same state for a 4-byte key.
    #[test]
    fn four_bytes_agree_with_the_uint32_form() {
        for (k, seed) in [(0u32, 0u64), (1, 0), (0xdead_beef, 0x7A5B_2236_7996_DCFD), (u32::MAX, 42)] {
            assert_eq!(hash_bytes_extended(&k.to_le_bytes(), seed), hash_uint32_extended(k, seed));
        }
    }

    #[test]
    fn every_tail_length_is_taken_in() {
        // A byte changed at any position changes the hash (the tail switch covers each).
        let base = [7u8; 27];
        let h = hash_bytes_extended(&base, 1);
        for i in 0..base.len() {
            let mut changed = base;
            changed[i] ^= 1;
            assert_ne!(hash_bytes_extended(&changed, 1), h, "byte {i} ignored");
        }
    }
}
