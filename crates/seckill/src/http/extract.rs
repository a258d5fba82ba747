//! Extractors whose rejections are the service's coded errors.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// Largest request body the service reads (every body it takes is a small JSON object).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Longest bearer token accepted (the service's own are 32 characters).
const MAX_TOKEN_CHARS: usize = 128;

/// A JSON request body: the fields it has and what each must hold, in the words of the
/// 400 replies (which never show the parser's own texts).
///
/// ```
/// use seckill::http::extract::JsonBody;
/// use seckill::http::users::LoginRequest;
///
/// assert_eq!(LoginRequest::FIELDS[0].0, "phone");
/// ```
pub trait JsonBody: DeserializeOwned {
    /// Each field's name and what it must be ("a string of 1 to 200 characters").
    const FIELDS: &'static [(&'static str, &'static str)];
}

/// A JSON body whose rejections are coded: `UNSUPPORTED_MEDIA_TYPE` without a JSON
/// content type, `PAYLOAD_TOO_LARGE` over [`MAX_BODY_BYTES`], `MALFORMED_JSON` with a
/// message that names the field and what it must be.
pub struct ApiJson<T>(pub T);

impl<T: JsonBody, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !is_json(req.headers()) {
            return Err(ApiError::UnsupportedMediaType);
        }
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|_| ApiError::PayloadTooLarge(MAX_BODY_BYTES))?;
        parse_body(&bytes).map(Self)
    }
}

/// Whether the content type is JSON (`application/json`, or `application/*+json`),
/// parameters aside.
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or_default().trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case("json") || subtype.to_ascii_lowercase().ends_with("+json"))
}

/// `the body must be a JSON object with `a`, `b` and `c``.
fn shape<T: JsonBody>() -> String {
    let names: Vec<String> = T::FIELDS.iter().map(|(n, _)| format!("`{n}`")).collect();
    let list = match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    };
    format!("the body must be a JSON object with {list}")
}

/// Parses a JSON body; every refusal is `MALFORMED_JSON` in the API's words.
///
/// ```
/// use seckill::http::extract::parse_body;
/// use seckill::http::users::LoginRequest;
///
/// let error = parse_body::<LoginRequest>(br#"{"phone": 5}"#).err().expect("refused");
/// assert_eq!(error.to_string(), "malformed request body: `phone` must be an 11-digit mobile number as a string, e.g. \"13800138000\"");
/// ```
///
/// # Errors
///
/// [`ApiError::MalformedJson`] when the body is not JSON, not an object, lacks a field
/// or has one of the wrong type or value.
pub fn parse_body<T: JsonBody>(bytes: &[u8]) -> Result<T, ApiError> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::MalformedJson(if e.is_eof() {
            "the body is empty or ends early: it must be a JSON object".to_owned()
        } else {
            format!(
                "the body is not valid JSON (line {}, column {})",
                e.line(),
                e.column()
            )
        })
    })?;
    if !value.is_object() {
        return Err(ApiError::MalformedJson(shape::<T>()));
    }
    serde_path_to_error::deserialize::<_, T>(value)
        .map_err(|e| ApiError::MalformedJson(field_message::<T>(&e.path().to_string(), e.inner())))
}

/// What was wrong with one field, named by its path in the body.
fn field_message<T: JsonBody>(path: &str, error: &serde_json::Error) -> String {
    let text = error.to_string();
    let backticked = |prefix: &str| {
        text.strip_prefix(prefix)
            .and_then(|rest| rest.split('`').next())
            .map(str::to_owned)
    };
    let what = |name: &str| {
        T::FIELDS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, what)| *what)
    };
    if let Some(name) = backticked("missing field `") {
        return match what(&name) {
            Some(what) => format!("`{name}` is missing: it must be {what}"),
            None => format!("`{name}` is missing"),
        };
    }
    let field = path.split(['.', '[']).next().unwrap_or(path);
    match what(field) {
        Some(what) => format!("`{field}` must be {what}"),
        None => shape::<T>(),
    }
}

/// `Path<T>` whose rejection is a coded `INVALID_PATH` error.
pub struct ApiPath<T>(pub T);

/// What a path parameter must be, for the 400 message.
pub trait PathParam: DeserializeOwned + Send {
    /// E.g. "an id: a decimal integer of at most 64 bits".
    const WHAT: &'static str;
}

impl PathParam for String {
    const WHAT: &'static str = "text in UTF-8";
}

impl<T: PathParam, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(Self(v)),
            Err(_) => Err(ApiError::InvalidPath(format!(
                "the path parameter must be {}",
                T::WHAT
            ))),
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
