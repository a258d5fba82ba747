//! A server's refusal to let the client in or to run a command (`NOAUTH`, `WRONGPASS`,
//! `NOPERM`) as a sentence that says what to fix. The server's code stays in it, in
//! parentheses, for whoever searches for it.

/// The refusal with code `code` and text `detail`, as a sentence naming the fix; `None`
/// for any other server error.
pub(crate) fn explain(code: &str, detail: &str) -> Option<String> {
    match code {
        "NOAUTH" => Some(
            "the server requires a password (NOAUTH): put it in the URL, \
             redis://:PASSWORD@HOST:PORT, or redis://USER:PASSWORD@HOST:PORT for an ACL user"
                .to_owned(),
        ),
        "WRONGPASS" => Some(
            "the server refused the user name or password (WRONGPASS): the password is \
             wrong, or the user does not exist or is disabled; check the credentials"
                .to_owned(),
        ),
        "NOPERM" => Some(not_permitted(detail)),
        _ => None,
    }
}

/// What an ACL user may not do, from the server's words: a command (`... to run the
/// 'evalsha' command`), keys or channels.
fn not_permitted(detail: &str) -> String {
    let lowered = detail.to_lowercase();
    if let Some(command) = lowered
        .split_once("to run the '")
        .and_then(|(_, rest)| rest.split_once('\''))
        .map(|(command, _)| command)
    {
        return format!(
            "the server's ACL does not let this user run '{command}' (NOPERM): grant it \
             (ACL SETUSER USER +{command}) or connect as a user who may"
        );
    }
    if lowered.contains("key") {
        return "the server's ACL does not let this user use ferrisson's keys (NOPERM): \
                grant them (ACL SETUSER USER ~*, or ~NAMESPACE* for a namespace) or connect \
                as a user who may"
            .to_owned();
    }
    if lowered.contains("channel") {
        return "the server's ACL does not let this user use ferrisson's wake-up channels \
                (NOPERM): grant them (ACL SETUSER USER &*, or &NAMESPACE* for a namespace) \
                or connect as a user who may"
            .to_owned();
    }
    format!(
        "the server's ACL refused this user (NOPERM {}): grant what it lacks with ACL \
         SETUSER or connect as a user who may",
        detail.trim_end_matches('.')
    )
}

#[cfg(test)]
mod tests {
    use super::explain;

    #[test]
    fn refusals_say_what_to_fix() {
        let noauth = explain(
            "NOAUTH",
            "HELLO must be called with the client already authenticated, otherwise the \
             HELLO AUTH <user> <pass> option can be used",
        );
        assert_eq!(
            noauth.as_deref(),
            Some(
                "the server requires a password (NOAUTH): put it in the URL, \
                 redis://:PASSWORD@HOST:PORT, or redis://USER:PASSWORD@HOST:PORT for an ACL user"
            )
        );
        let wrongpass = explain(
            "WRONGPASS",
            "invalid username-password pair or user is disabled.",
        )
        .unwrap_or_default();
        assert!(
            wrongpass.starts_with("the server refused the user name or password (WRONGPASS)"),
            "{wrongpass}"
        );
        // Redis 7.0 and 7.2 word a refused command differently.
        for detail in [
            "this user has no permissions to run the 'script|load' command",
            "User locker has no permissions to run the 'script|load' command",
        ] {
            assert_eq!(
                explain("NOPERM", detail).as_deref(),
                Some(
                    "the server's ACL does not let this user run 'script|load' (NOPERM): \
                     grant it (ACL SETUSER USER +script|load) or connect as a user who may"
                )
            );
        }
        for (detail, grant) in [
            (
                "this user has no permissions to access one of the keys used as arguments",
                "~*",
            ),
            ("No permissions to access a key", "~*"),
            ("No permissions to access a channel", "&*"),
        ] {
            let message = explain("NOPERM", detail).unwrap_or_default();
            assert!(message.contains(grant), "{detail}: {message}");
        }
        let other = explain("NOPERM", "something new.").unwrap_or_default();
        assert!(other.contains("(NOPERM something new)"), "{other}");
        assert_eq!(explain("ERR", "unknown command"), None);
    }
}
