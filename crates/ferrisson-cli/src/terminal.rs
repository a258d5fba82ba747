//! Text from Redis (names, holders) on a terminal: escaped, so that it cannot move the
//! cursor, clear the screen or start a line of its own, and padded by the columns it
//! takes, so that wide characters keep a table's columns in line.

use unicode_width::UnicodeWidthStr as _;

/// `text` with everything a terminal would act on escaped, as Rust's `{:?}` does it:
/// control characters (`\n`, `\u{1b}`, C1 codes), invisible formatting characters
/// (bidirectional overrides, zero-width joiners), backslashes and double quotes. Text
/// without any of them is returned as it is: `orders:42` stays `orders:42`.
pub fn escaped(text: &str) -> String {
    let debug = format!("{text:?}");
    // `{:?}` of a str is always the escaped text between two double quotes.
    debug[1..debug.len() - 1].to_owned()
}

/// `text` escaped as [`escaped`] does, between double quotes: how a name reads inside a
/// sentence (`lock "orders:42"`).
pub fn quoted(text: &str) -> String {
    format!("\"{}\"", escaped(text))
}

/// Free text (a message that may quote a name, a server's reply) with only what a
/// terminal would act on escaped, as [`escaped`] escapes it: control and invisible
/// formatting characters. Quotes and backslashes stay, so a name the text already quotes
/// (`lock "a\nb"`) reads as it was written.
pub fn sanitized(text: &str) -> String {
    let mut clean = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '"' | '\'' | '\\') {
            clean.push(c);
        } else {
            // What `{:?}` leaves alone is safe; anything else goes in its escaped form.
            clean.push_str(&escaped(c.encode_utf8(&mut [0; 4])));
        }
    }
    clean
}

/// How many terminal columns `text` takes: East Asian wide characters and most emoji two,
/// combining marks none.
pub fn columns(text: &str) -> usize {
    text.width()
}

/// `text` followed by spaces up to `width` columns (none when it takes that many or more).
pub fn padded(text: &str, width: usize) -> String {
    let mut padded = text.to_owned();
    padded.extend(std::iter::repeat_n(
        ' ',
        width.saturating_sub(columns(text)),
    ));
    padded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_codes_and_line_breaks_are_shown_not_acted_on() {
        assert_eq!(
            escaped("evil\u{1b}[2J\nforged\r\u{9b}31m"),
            "evil\\u{1b}[2J\\nforged\\r\\u{9b}31m"
        );
        assert_eq!(escaped("a\u{202e}b\u{200d}c"), "a\\u{202e}b\\u{200d}c");
        assert_eq!(escaped(r#"back\slash "quote""#), r#"back\\slash \"quote\""#);
        assert_eq!(quoted("a\tb"), r#""a\tb""#);
    }

    #[test]
    fn free_text_keeps_its_quotes_and_loses_its_escape_codes() {
        assert_eq!(
            sanitized("lock \"a\\nb\" is gone\u{1b}[2J\n"),
            "lock \"a\\nb\" is gone\\u{1b}[2J\\n"
        );
        assert_eq!(sanitized("it's 注文 🔒"), "it's 注文 🔒");
    }

    #[test]
    fn plain_and_wide_text_is_left_alone() {
        for text in ["orders:42", "注文:42", "🔒lock", "café", "ordres/été"] {
            assert_eq!(escaped(text), text);
        }
    }

    #[test]
    fn padding_counts_columns_not_characters() {
        assert_eq!(columns("orders"), 6);
        assert_eq!(columns("注文"), 4);
        assert_eq!(columns("🔒"), 2);
        assert_eq!(padded("注文", 6), "注文  ");
        assert_eq!(padded("ab", 6), "ab    ");
        assert_eq!(padded("abcdefg", 6), "abcdefg");
    }
}
