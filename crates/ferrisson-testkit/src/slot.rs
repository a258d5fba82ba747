//! Redis Cluster's key-to-slot mapping, computed here so tests can check the servers.

/// How many hash slots a Redis Cluster has.
pub const CLUSTER_SLOTS: u16 = 16384;

/// The hash slot of `key`: CRC16 (XMODEM) of the key, or of its hash tag, modulo 16384.
///
/// The hash tag is what lies between the first `{` and the first `}` after it, when that
/// is not empty; keys sharing a tag share a slot.
///
/// ```
/// use ferrisson_testkit::key_slot;
///
/// assert_eq!(key_slot("foo"), 12182);
/// assert_eq!(key_slot("{user1000}.following"), key_slot("{user1000}.followers"));
/// assert_ne!(key_slot("{}a"), key_slot("{}b")); // an empty tag hashes the whole key
/// ```
pub fn key_slot(key: impl AsRef<[u8]>) -> u16 {
    crc16(hash_tag(key.as_ref())) % CLUSTER_SLOTS
}

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

/// CRC16-CCITT in the XMODEM variant (polynomial 0x1021, initial value 0), as Redis
/// Cluster specifies it.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crc_is_the_xmodem_check_value() {
        // The check value of CRC-16/XMODEM and the example of the Redis Cluster spec.
        assert_eq!(crc16(b"123456789"), 0x31C3);
    }

    #[test]
    fn only_a_non_empty_first_tag_is_hashed() {
        assert_eq!(hash_tag(b"{user1000}.following"), b"user1000");
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"foo{bar"), b"foo{bar");
        assert_eq!(hash_tag(b"}{"), b"}{");
        assert_eq!(hash_tag(b""), b"");
    }
}
