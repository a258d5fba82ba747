//! Login by phone number and bearer tokens kept in Redis with a TTL (the seed project's
//! `login:token:` keys, refreshed on every authenticated request).

use axum::Json;
use axum::extract::{FromRequestParts, State};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use serde::{Deserialize, Serialize};

use crate::app::{ApiJson, AppState};
use crate::error::ApiError;

const TOKEN_PREFIX: &str = "login:token:";

/// `POST /users/login` body.
#[derive(Debug, Deserialize)]
pub struct LoginRequest {
    /// An 11-digit mainland mobile number, e.g. `13800138000`.
    pub phone: String,
}

/// `POST /users/login` reply.
#[derive(Debug, Serialize, Deserialize)]
pub struct LoginReply {
    /// Send as `Authorization: Bearer <token>`.
    pub token: String,
    /// The user's id.
    pub user_id: i64,
}

/// Whether `phone` is a mainland mobile number: `1`, then `3`–`9`, then nine digits
/// (the seed project's `PHONE_REGEX`, without the regex).
///
/// ```
/// use seckill::auth::is_valid_phone;
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
            let id = inner.ids.next_id("user").await?;
            let now = chrono::Utc::now().timestamp_millis();
            inner.db.insert_user(id, &req.phone, now).await?
        }
    };
    let token = format!("{:032x}", rand::random::<u128>());
    let mut conn = inner.redis.clone();
    let ttl = inner.config.token_ttl.as_secs().max(1);
    let () = redis::cmd("SET")
        .arg(format!("{TOKEN_PREFIX}{token}"))
        .arg(user_id)
        .arg("EX")
        .arg(ttl)
        .query_async(&mut conn)
        .await?;
    Ok(Json(LoginReply { token, user_id }))
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
        let token = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty() && t.len() <= 128)
            .ok_or(ApiError::Unauthorized)?;
        let key = format!("{TOKEN_PREFIX}{token}");
        let ttl = state.inner.config.token_ttl.as_secs().max(1);
        let mut conn = state.inner.redis.clone();
        // Read and refresh in one round trip, as the seed's RefreshTokenInterceptor does.
        let (user, _): (Option<i64>, i64) = redis::pipe()
            .get(&key)
            .expire(&key, ttl as i64)
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
