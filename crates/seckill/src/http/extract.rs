//! Extractors whose rejections are the service's coded errors.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// Largest request body the service reads (every body it takes is a small JSON object).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Longest bearer token accepted (the service's own are 32 characters).
const MAX_TOKEN_CHARS: usize = 128;

/// `Json<T>` whose rejections are coded: `UNSUPPORTED_MEDIA_TYPE` without a JSON
/// content type, `PAYLOAD_TOO_LARGE` over [`MAX_BODY_BYTES`], `MALFORMED_JSON` else.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(Self(v)),
            Err(e) => Err(json_rejection(&e)),
        }
    }
}

fn json_rejection(e: &JsonRejection) -> ApiError {
    match e.status() {
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::UnsupportedMediaType,
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge(MAX_BODY_BYTES),
        _ => ApiError::MalformedJson(e.body_text()),
    }
}

/// `Path<T>` whose rejection is a coded `INVALID_PATH` error.
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(Self(v)),
            Err(e) => Err(ApiError::InvalidPath(e.body_text())),
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header; the scheme's case does not
/// matter (RFC 9110: auth schemes are case-insensitive).
///
/// ```
/// use axum::http::{HeaderMap, HeaderValue, header::AUTHORIZATION};
/// use seckill::http::extract::bearer_token;
///
/// let mut headers = HeaderMap::new();
/// headers.insert(AUTHORIZATION, HeaderValue::from_static("bearer abc"));
/// assert_eq!(bearer_token(&headers), Some("abc"));
/// headers.insert(AUTHORIZATION, HeaderValue::from_static("Basic dTpw"));
/// assert_eq!(bearer_token(&headers), None);
/// ```
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim_start().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer")
        && !token.is_empty()
        && token.chars().count() <= MAX_TOKEN_CHARS)
        .then_some(token)
}
