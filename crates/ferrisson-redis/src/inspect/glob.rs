//! Glob patterns as Redis reads them (`SCAN MATCH`, `KEYS`): `*`, `?`, `[abc]`, `[^a-z]`
//! and `\` to take the next character literally.
//!
//! The inspector sends a pattern to Redis to narrow a scan, and matches the names it
//! parsed out of the keys against the same pattern again: a `*` sent inside a longer key
//! pattern can match across the key's separators (an id counter's `icr:PREFIX:*` matches
//! a longer prefix too), so the server's answer is a superset.

use crate::api::error::{Error, Result};

/// Checks a name pattern: not empty, no `{` or `}` (no name holds one, so such a pattern
/// could only match keys that are not primitives').
pub(crate) fn validate_pattern(pattern: &str) -> Result<()> {
    if pattern.is_empty() {
        return Err(Error::invalid(
            "name pattern must not be empty (* matches every name)",
        ));
    }
    if pattern.contains(['{', '}']) {
        return Err(Error::invalid(format!(
            "name pattern {pattern:?} holds a brace; no name holds {{ or }}"
        )));
    }
    Ok(())
}

/// `text` with every character a glob treats specially escaped, so that it matches only
/// itself (a namespace in front of a pattern, or a name looked up exactly).
pub(crate) fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len() + 4);
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// Whether `text` matches `pattern`, byte for byte as Redis's `stringmatchlen` decides.
pub(crate) fn matches(pattern: &str, text: &str) -> bool {
    matches_bytes(pattern.as_bytes(), text.as_bytes())
}

fn matches_bytes(mut pattern: &[u8], mut text: &[u8]) -> bool {
    // The last `*` seen and the text position it was tried at: on a mismatch, that star
    // takes one more byte (classic backtracking without recursion).
    let mut star: Option<(&[u8], &[u8])> = None;
    loop {
        match pattern.first() {
            Some(b'*') => {
                while pattern.first() == Some(&b'*') {
                    pattern = &pattern[1..];
                }
                if pattern.is_empty() {
                    return true;
                }
                star = Some((pattern, text));
                continue;
            }
            Some(_) if !text.is_empty() => {
                if let Some(rest) = match_one(pattern, text[0]) {
                    pattern = rest;
                    text = &text[1..];
                    continue;
                }
            }
            None if text.is_empty() => return true,
            _ => {}
        }
        // Mismatch: let the last star swallow one more byte, if there is one to swallow.
        match star {
            Some((after_star, at)) if !at.is_empty() => {
                star = Some((after_star, &at[1..]));
                pattern = after_star;
                text = &at[1..];
            }
            _ => return false,
        }
    }
}

/// Matches `byte` against the pattern element at the start of `pattern` (not a `*`);
/// returns the pattern after that element, or `None` when the byte does not match.
fn match_one(pattern: &[u8], byte: u8) -> Option<&[u8]> {
    match pattern[0] {
        b'?' => Some(&pattern[1..]),
        b'[' => match_class(&pattern[1..], byte),
        b'\\' if pattern.len() >= 2 => (pattern[1] == byte).then_some(&pattern[2..]),
        literal => (literal == byte).then_some(&pattern[1..]),
    }
}

/// A `[...]` class (`pattern` starts after the `[`): `^` negates, `a-z` is a range
/// (either order), `\` escapes; an unclosed class runs to the end of the pattern.
fn match_class(mut pattern: &[u8], byte: u8) -> Option<&[u8]> {
    let negate = pattern.first() == Some(&b'^');
    if negate {
        pattern = &pattern[1..];
    }
    let mut found = false;
    loop {
        match pattern {
            [] => break,
            [b']', rest @ ..] => {
                pattern = rest;
                break;
            }
            [b'\\', c, rest @ ..] => {
                found |= *c == byte;
                pattern = rest;
            }
            [low, b'-', high, rest @ ..] if *high != b']' => {
                let (low, high) = if low <= high {
                    (*low, *high)
                } else {
                    (*high, *low)
                };
                found |= (low..=high).contains(&byte);
                pattern = rest;
            }
            [c, rest @ ..] => {
                found |= *c == byte;
                pattern = rest;
            }
        }
    }
    (found != negate).then_some(pattern)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_redis_does() {
        for (pattern, text, expected) in [
            ("*", "", true),
            ("*", "orders:42", true),
            ("orders:*", "orders:42", true),
            ("orders:*", "order:42", false),
            ("*:42", "orders:42", true),
            ("o*s*2", "orders:42", true),
            ("o*s*3", "orders:42", false),
            ("?", "a", true),
            ("?", "", false),
            ("??", "a", false),
            ("h[ae]llo", "hallo", true),
            ("h[ae]llo", "hillo", false),
            ("h[^e]llo", "hallo", true),
            ("h[^e]llo", "hello", false),
            ("h[a-b]llo", "hbllo", true),
            ("h[b-a]llo", "hallo", true),
            ("h[a-b]llo", "hcllo", false),
            ("a\\*b", "a*b", true),
            ("a\\*b", "axb", false),
            ("[\\]]", "]", true),
            ("a**b", "ab", true),
            ("*a*a*a*", "aaa", true),
            ("*a*a*a*", "aa", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
        ] {
            assert_eq!(matches(pattern, text), expected, "{pattern:?} on {text:?}");
        }
    }

    #[test]
    fn escaped_text_matches_only_itself() {
        for text in ["a*b", "[x]", "q?", "back\\slash", "plain", "ns:"] {
            let escaped = escape(text);
            assert!(matches(&escaped, text), "{escaped:?}");
            assert!(!matches(&escaped, &format!("{text}x")), "{escaped:?}");
        }
        assert!(!matches(&escape("a*b"), "axb"));
    }

    #[test]
    fn patterns_are_checked() {
        assert!(validate_pattern("orders:*").is_ok());
        assert!(matches!(
            validate_pattern(""),
            Err(Error::InvalidArgument(m)) if m.contains("empty")
        ));
        assert!(matches!(
            validate_pattern("{orders}"),
            Err(Error::InvalidArgument(m)) if m.contains("brace")
        ));
    }
}
