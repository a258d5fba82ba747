//! Free text from clients (a voucher's title), checked before it reaches the database.
//!
//! The databases disagree on what they store: PostgreSQL refuses a NUL in a text
//! column (an error the client saw as a 500), SQLite and MariaDB keep it and hand it to
//! every later reader. So the service decides, the same way on every database: a text
//! may hold any printable character of any script (emoji and CJK included), and no
//! control character (NUL, newlines, tabs, escape, DEL and the C1 controls), no
//! character that reorders the text around it (the bidirectional overrides and
//! isolates, with which `abc` can display as `cba`), and no Unicode noncharacter.

use crate::error::ApiError;

/// Why `c` may not appear in a text, if it may not.
fn refusal(c: char) -> Option<&'static str> {
    let code = u32::from(c);
    if c == '\0' {
        Some("a NUL character")
    } else if c.is_control() {
        Some("a control character (a newline, tab, escape and the like)")
    } else if matches!(code, 0x202A..=0x202E | 0x2066..=0x2069 | 0x200E | 0x200F | 0x061C) {
        Some("a character that reorders the text around it")
    } else if matches!(code, 0xFDD0..=0xFDEF) || code & 0xFFFE == 0xFFFE {
        Some("a Unicode noncharacter")
    } else {
        None
    }
}

/// `value` with surrounding whitespace trimmed, if it is 1 to `max_chars` characters
/// and holds only characters the service stores.
///
/// ```
/// use seckill::http::text::checked_text;
///
/// assert_eq!(checked_text("title", " 秒杀券 🎟 ", 200).ok(), Some("秒杀券 🎟"));
/// assert!(checked_text("title", "a\0b", 200).is_err());
/// assert!(checked_text("title", "   ", 200).is_err());
/// ```
///
/// # Errors
///
/// [`ApiError::InvalidInput`] naming `field` and what is wrong with it.
pub fn checked_text<'a>(
    field: &str,
    value: &'a str,
    max_chars: usize,
) -> Result<&'a str, ApiError> {
    let text = value.trim();
    let chars = text.chars().count();
    if chars == 0 || chars > max_chars {
        return Err(ApiError::InvalidInput(format!(
            "{field} must be 1 to {max_chars} characters"
        )));
    }
    if let Some((at, why)) = text
        .chars()
        .enumerate()
        .find_map(|(i, c)| refusal(c).map(|why| (i, why)))
    {
        return Err(ApiError::InvalidInput(format!(
            "{field} must not contain {why} (character {} is one)",
            at + 1
        )));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::checked_text;

    #[test]
    fn refused_and_kept() {
        for bad in [
            "a\0",
            "a\nb",
            "tab\there",
            "\u{1b}[2J",
            "\u{7f}",
            "\u{85}",
            "x\u{202e}y",
            "\u{2066}",
            "\u{fffe}",
            "\u{1fffe}",
            "\u{fdd0}",
        ] {
            assert!(checked_text("title", bad, 200).is_err(), "{bad:?}");
        }
        for good in ["Flash sale", "秒杀券", "🎟️ 50% off", "café", "Ünïcødé"] {
            assert_eq!(checked_text("title", good, 200).ok(), Some(good));
        }
        assert!(checked_text("title", &"x".repeat(201), 200).is_err());
        assert!(checked_text("title", &"界".repeat(200), 200).is_ok());
    }
}
