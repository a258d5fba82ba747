//! Redis Cluster's hash slots: which slot a key belongs to, and a short hash tag for every
//! slot (to name a key that must live in the same slot as another).
//!
//! The slot of a key is CRC16 (XMODEM) of its hash tag — the text between its first `{`
//! and the first `}` after it, when not empty — or of the whole key, modulo 16384.

use std::sync::LazyLock;

/// How many hash slots a Redis Cluster has.
pub(crate) const SLOTS: u16 = 16384;

/// The hash slot of `key`.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) % SLOTS
}

/// The part of `key` Redis Cluster hashes.
fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    let rest = &key[open + 1..];
    match rest.iter().position(|&b| b == b'}') {
        Some(close) if close > 0 => &rest[..close],
        _ => key,
    }
}

/// CRC16-CCITT, XMODEM variant (polynomial 0x1021, initial value 0), one table lookup per
/// byte: slots are computed for every key the watchdog renews and every call on a cluster.
fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &byte| {
        (crc << 8) ^ CRC16_TABLE[usize::from((crc >> 8) as u8 ^ byte)]
    })
}

static CRC16_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// A short tag whose slot is `slot`: a key named `...{tag}...` lives in that slot.
pub(crate) fn tag_for_slot(slot: u16) -> &'static str {
    &SLOT_TAGS[usize::from(slot % SLOTS)]
}

/// The shortest tags (base-36 numbers, first found) for all 16384 slots, built once:
/// about 180 000 CRCs, a few milliseconds.
static SLOT_TAGS: LazyLock<Box<[Box<str>]>> = LazyLock::new(|| {
    let mut tags: Vec<Option<Box<str>>> = vec![None; usize::from(SLOTS)];
    let mut missing = tags.len();
    let mut n: u64 = 0;
    while missing > 0 {
        let tag = base36(n);
        let slot = usize::from(key_slot(tag.as_bytes()));
        if tags[slot].is_none() {
            tags[slot] = Some(tag.into_boxed_str());
            missing -= 1;
        }
        n += 1;
    }
    tags.into_iter().flatten().collect()
});

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut digits = Vec::new();
    loop {
        digits.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    digits.reverse();
    String::from_utf8(digits).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_the_xmodem_check_value_and_the_cluster_spec() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
    }

    #[test]
    fn keys_sharing_a_tag_share_a_slot() {
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"ns{orders:42}:fence"), key_slot(b"orders:42"));
        // An empty tag hashes the whole key.
        assert_eq!(key_slot(b"{}a"), crc16(b"{}a") % SLOTS);
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar"), b"foo{bar");
    }

    #[test]
    fn every_slot_has_a_short_tag_of_its_own() {
        for slot in 0..SLOTS {
            let tag = tag_for_slot(slot);
            assert!(!tag.is_empty() && tag.len() <= 4, "slot {slot}: {tag:?}");
            assert_eq!(key_slot(format!("x{{{tag}}}y").as_bytes()), slot);
        }
    }
}
