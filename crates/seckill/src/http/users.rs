//! Login by phone number, and bearer tokens kept in Redis under `login:token:` with a
//! TTL, refreshed on every authenticated request.

use axum::Json;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::http::extract::{ApiJson, bearer_token};
use crate::http::id::Id;
use crate::state::AppState;

const TOKEN_PREFIX: &str = "login:token:";

/// `POST /users/login` body.
#[derive(Debug, Deserialize)]
pub struct LoginRequest {
    /// An 11-digit mainland mobile number, e.g. `13800138000`.
    pub phone: String,
}

impl crate::http::extract::JsonBody for LoginRequest {
    const FIELDS: &'static [(&'static str, &'static str)] = &[(
        "phone",
        "an 11-digit mobile number as a string, e.g. \"13800138000\"",
    )];
}

/// `POST /users/login` reply.
#[derive(Debug, Serialize, Deserialize)]
pub struct LoginReply {
    /// Send as `Authorization: Bearer <token>`.
    pub token: String,
    /// The user's id (a string in JSON).
    pub user_id: Id,
}

/// Whether `phone` is a mainland mobile number: `1`, then `3`–`9`, then nine digits
/// (a mainland China mobile number; checked without a regular expression).
///
/// ```
/// use seckill::http::users::is_valid_phone;
///
/// assert!(is_valid_phone("13800138000"));
/// assert!(!is_valid_phone("12800138000")); // second digit 2
/// assert!(!is_valid_phone("138-0013-8000"));
/// ```
pub fn is_valid_phone(phone: &str) -> bool {
    let b = phone.as_bytes();
    b.len() == 11
        && b[0] == b'1'
        && (b'3'..=b'9').contains(&b[1])
        && b.iter().all(u8::is_ascii_digit)
}

/// Logs a user in (creating them on first login) and returns a fresh token.
pub async fn login(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<LoginRequest>,
) -> Result<Json<LoginReply>, ApiError> {
    if !is_valid_phone(&req.phone) {
        return Err(ApiError::InvalidPhone);
    }
    let inner = &state.inner;
    let user_id = match inner.db.user_by_phone(&req.phone).await? {
        Some(id) => id,
        None => {
            let id = state
                .within_redis_timeout(inner.ids.next_id("user"))
                .await?;
            let now = chrono::Utc::now().timestamp_millis();
            inner.db.insert_user(id, &req.phone, now).await?
        }
    };
    let token = format!("{:032x}", rand::random::<u128>());
    let mut conn = inner.redis.clone();
    let () = redis::cmd("SET")
        .arg(format!("{TOKEN_PREFIX}{token}"))
        .arg(user_id)
        .arg("PX")
        .arg(token_ttl_ms(&state))
        .query_async(&mut conn)
        .await?;
    Ok(Json(LoginReply {
        token,
        user_id: Id(user_id),
    }))
}

/// The token lifetime in ms (at most a year: the settings check it).
fn token_ttl_ms(state: &AppState) -> i64 {
    state.inner.config.token_ttl.as_millis() as i64
}

/// The logged-in user, from `Authorization: Bearer <token>`; 401 `UNAUTHORIZED` otherwise.
#[derive(Debug, Clone, Copy)]
pub struct CurrentUser(pub i64);

impl FromRequestParts<AppState> for CurrentUser {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let token = bearer_token(&parts.headers).ok_or(ApiError::Unauthorized)?;
        let key = format!("{TOKEN_PREFIX}{token}");
        let mut conn = state.inner.redis.clone();
        // Read and refresh in one round trip.
        let (user, _): (Option<i64>, i64) = redis::pipe()
            .get(&key)
            .pexpire(&key, token_ttl_ms(state))
            .query_async(&mut conn)
            .await?;
        user.map(CurrentUser).ok_or(ApiError::Unauthorized)
    }
}

#[cfg(test)]
mod tests {
    use super::is_valid_phone;

    #[test]
    fn phones() {
        assert!(is_valid_phone("13800138000"));
        assert!(is_valid_phone("19912345678"));
        assert!(!is_valid_phone("12800138000"));
        assert!(!is_valid_phone("1380013800"));
        assert!(!is_valid_phone("138001380000"));
        assert!(!is_valid_phone("1380013800a"));
        assert!(!is_valid_phone(""));
        assert!(!is_valid_phone("１3800138000"));
    }
}
