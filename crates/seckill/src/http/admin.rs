//! The admin token: what creating vouchers, listing every order of a voucher and every
//! `/lab/*` route require.
//!
//! `seckill serve` takes the token from `--admin-token` or, better (a command line is
//! visible to every user of the machine), from `SECKILL_ADMIN_TOKEN`. Without one, the
//! admin routes are off: they answer 403 `ADMIN_DISABLED` saying how to turn them on.
//! With one, a request must send it as `Authorization: Bearer <token>`, else 401
//! `ADMIN_TOKEN_REQUIRED`. The comparison takes the same time whichever bytes differ,
//! and the token never appears in a log line, an error or `Debug`.

use std::fmt;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use subtle::ConstantTimeEq as _;

use crate::error::ApiError;
use crate::http::extract::bearer_token;
use crate::state::AppState;

/// Fewest characters of an admin token: 16 random characters are beyond guessing.
pub const MIN_ADMIN_TOKEN_CHARS: usize = 16;
/// Most characters of an admin token (the longest bearer token the service reads).
pub const MAX_ADMIN_TOKEN_CHARS: usize = 128;

/// The admin token `seckill serve` was given; its `Debug` does not show it.
///
/// ```
/// use seckill::http::admin::AdminToken;
///
/// let token = AdminToken::new("0123456789abcdef0123".into()).expect("a valid token");
/// assert!(token.matches("0123456789abcdef0123"));
/// assert!(!token.matches("0123456789abcdef0124"));
/// assert_eq!(format!("{token:?}"), "AdminToken(<redacted>)");
/// assert!(AdminToken::new("short".into()).is_err());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(String);

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminToken(<redacted>)")
    }
}

impl AdminToken {
    /// A token of 16 to 128 printable ASCII characters without spaces (what a bearer
    /// header can carry unchanged).
    ///
    /// # Errors
    ///
    /// What is wrong with it, without the token itself.
    pub fn new(token: String) -> Result<Self, String> {
        let chars = token.chars().count();
        if !(MIN_ADMIN_TOKEN_CHARS..=MAX_ADMIN_TOKEN_CHARS).contains(&chars) {
            return Err(format!(
                "the admin token has {chars} characters: it must have {MIN_ADMIN_TOKEN_CHARS} to {MAX_ADMIN_TOKEN_CHARS} (e.g. 32 random hex digits: openssl rand -hex 16)"
            ));
        }
        if !token.chars().all(|c| c.is_ascii_graphic()) {
            return Err(
                "the admin token must be printable ASCII without spaces (e.g. 32 random hex digits: openssl rand -hex 16)"
                    .into(),
            );
        }
        Ok(Self(token))
    }

    /// Whether `candidate` is this token, in a time that does not depend on where they
    /// differ (only on their lengths).
    pub fn matches(&self, candidate: &str) -> bool {
        self.0.as_bytes().ct_eq(candidate.as_bytes()).into()
    }
}

/// A request that carried the admin token; the handlers of admin routes take it.
#[derive(Debug, Clone, Copy)]
pub struct Admin;

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let Some(expected) = &state.inner.config.admin_token else {
            return Err(ApiError::AdminDisabled);
        };
        match bearer_token(&parts.headers) {
            Some(token) if expected.matches(token) => Ok(Self),
            _ => Err(ApiError::AdminTokenRequired),
        }
    }
}
